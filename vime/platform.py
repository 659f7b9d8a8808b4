"""Device platform: which accelerator this process runs on, and the facts that follow from it.

One module decides `cpu` | `cuda` | `npu`; everything device-specific in vime asks it.

Detection order (`detect()`):
  1. env `VIME_ACCELERATOR`, then `VIME_TEST_DEVICE` (`cpu`, `cuda`, `npu`) - explicit choice wins;
  2. `npu` when `torch_npu` is importable and `torch.npu.is_available()`;
  3. `cuda` when `torch.cuda.is_available()`;
  4. `cpu`.

Vendor runtimes are imported lazily: `import vime.platform` never imports `torch_npu`; only
`detect()` (when no env override says otherwise) and NPU-specific calls do. `transfer_to_npu` is an
opt-in (`VIME_TRANSFER_TO_NPU=1`), off by default, because the production runtime does not use it.

API: `detect()`, `get_platform(kind=None) -> Platform`, and on `Platform`: `device(index)`,
`set_device`, `synchronize`, `empty_cache`, `manual_seed_all`, `get_rng_state` / `set_rng_state`,
`comm_backend`, `visible_devices_env`, `capabilities()`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

KINDS = ("cpu", "cuda", "npu")
ENV_KEYS = ("VIME_ACCELERATOR", "VIME_TEST_DEVICE")

_COMM_BACKEND = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
_VISIBLE_ENV = {"cpu": "", "cuda": "CUDA_VISIBLE_DEVICES", "npu": "ASCEND_RT_VISIBLE_DEVICES"}


class PlatformError(RuntimeError):
    """The requested device cannot be used here (unknown name, runtime missing, no device)."""


def _env_choice() -> str | None:
    for key in ENV_KEYS:
        value = os.environ.get(key, "").strip().lower()
        if value:
            if value not in KINDS:
                raise PlatformError(f"{key}={value!r} is not one of {', '.join(KINDS)}; unset it or pick one")
            return value
    return None


def _npu_available() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        importlib.import_module("torch_npu")
        import torch

        npu = getattr(torch, "npu", None)
        return bool(npu is not None and npu.is_available())
    except Exception:  # a broken CANN install must not stop CPU work
        return False


def detect() -> str:
    """Return the device kind this process should use (see module docstring for the order)."""
    chosen = _env_choice()
    if chosen:
        return chosen
    if _npu_available():
        return "npu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    return "cpu"


@dataclass(frozen=True)
class Platform:
    kind: str  # cpu | cuda | npu

    @property
    def comm_backend(self) -> str:
        return _COMM_BACKEND[self.kind]

    @property
    def visible_devices_env(self) -> str:
        """Env var that selects devices for child processes ("" on CPU)."""
        return _VISIBLE_ENV[self.kind]

    @cached_property
    def _module(self) -> Any:
        """torch.cuda / torch.npu; None on CPU. Importing torch_npu happens here, on first use."""
        import torch

        if self.kind == "cpu":
            return None
        if self.kind == "npu":
            try:
                importlib.import_module("torch_npu")
            except ImportError as exc:
                raise PlatformError(
                    "device 'npu' requested but torch_npu is not importable; install torch-npu matching "
                    "torch and source the CANN set_env.sh"
                ) from exc
            if os.environ.get("VIME_TRANSFER_TO_NPU") == "1":
                importlib.import_module("torch_npu.contrib.transfer_to_npu")
            return torch.npu
        return torch.cuda

    def device(self, index: int | None = None):
        import torch

        if self.kind == "cpu":
            return torch.device("cpu")
        return torch.device(self.kind, 0 if index is None else index)

    def is_available(self) -> bool:
        if self.kind == "cpu":
            return True
        try:
            return bool(self._module.is_available())
        except PlatformError:
            return False

    def set_device(self, index: int) -> None:
        if self._module is not None:
            self._module.set_device(index)

    def synchronize(self) -> None:
        if self._module is not None:
            self._module.synchronize()

    def empty_cache(self) -> None:
        if self._module is not None:
            self._module.empty_cache()

    def manual_seed_all(self, seed: int) -> None:
        """Seed the CPU generator and every device generator of this kind."""
        import torch

        torch.manual_seed(seed)
        if self._module is not None:
            self._module.manual_seed_all(seed)

    def get_rng_state(self) -> list:
        """Device RNG states (one tensor per device); [] on CPU (the CPU state is saved separately)."""
        if self._module is None:
            return []
        return [s.clone() for s in self._module.get_rng_state_all()]

    def set_rng_state(self, states: list) -> None:
        if self._module is not None and states:
            self._module.set_rng_state_all(states)

    def capabilities(self) -> dict[str, Any]:
        """Facts gates and quantisers branch on; cheap, no kernels launched."""
        import torch

        float8 = [n for n in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu") if hasattr(torch, n)]
        facts: dict[str, Any] = {"kind": self.kind, "float8_dtypes": float8, "native_mx_quant": False}
        if self.kind == "cpu":
            facts["bf16"] = True  # supported (slowly) by CPU kernels
        elif self.kind == "cuda":
            facts["bf16"] = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
        else:
            mod = self._module
            facts["bf16"] = bool(getattr(mod, "is_bf16_supported", lambda: True)())
            torch_npu = importlib.import_module("torch_npu")
            facts["native_mx_quant"] = hasattr(torch_npu, "npu_dynamic_mx_quant")
        return facts


def get_platform(kind: str | None = None) -> Platform:
    """Platform for `kind` (validated) or for `detect()` when None."""
    kind = (kind or detect()).lower()
    if kind not in KINDS:
        raise PlatformError(f"unknown device {kind!r}; use one of {', '.join(KINDS)}")
    return Platform(kind)

