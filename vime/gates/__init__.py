"""The L3 gate registry: `GATES`, `run_gate`, `run_gates`.

`GATES: dict[str, GateSpec]` maps a gate id (G1..G9) to its name and a lazily imported function
(`"module:function"`, contract in vime.gates.common). `run_gate(gate_id, device=None, dtype=None,
**knobs) -> GateResult` fills in device, dtype and duration and never raises for a gate's own
failure:
  * a gate that cannot run here (device absent, optional dependency missing) -> verdict "skip"
    with the reason;
  * an exception inside the gate -> verdict "error" with the traceback text;
  * a registered gate whose module is not in this build -> "error" (never a silent pass).
Importing this package does not import torch; the gates do when they run.
"""

from __future__ import annotations

import importlib
import os
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

from vime.results import GateResult

DEFAULT_DTYPE = "float32"
# The gate model is tiny: extra intra-op threads only add contention (10x slower on a busy 2-core
# host). Bit-exact comparisons hold for a fixed thread count. Override with VIME_GATE_THREADS.
GATE_THREADS_ENV = "VIME_GATE_THREADS"


@contextmanager
def _cpu_threads():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(os.environ.get(GATE_THREADS_ENV, "1"))))
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class GateSpec:
    id: str
    name: str
    target: str  # "package.module:function"
    level: str = "L3"

    @property
    def function(self) -> Callable[..., Any]:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


GATES: dict[str, GateSpec] = {
    spec.id: spec
    for spec in (
        GateSpec("G1", "logprob alignment", "vime.gates.g1_logprob:run"),
        GateSpec("G2", "reproducibility", "vime.gates.g2_repro:run"),
        GateSpec("G3", "save/load/resume continuity", "vime.gates.g3_resume:run"),
        GateSpec("G4", "weight sync", "vime.gates.g4_weight_sync:run"),
        GateSpec("G5", "MXFP8 rollout", "vime.gates.g5_mxfp8:run"),
        GateSpec("G6", "speculative decoding", "vime.gates.g6_spec_decode:run"),
        GateSpec("G7", "R3 routing replay", "vime.gates.g7_r3:run"),
        GateSpec("G8", "HF parity", "vime.gates.g8_hf_parity:run"),
        GateSpec("G9", "policy objective (GRPO/PPO)", "vime.gates.g9_policy:run"),
    )
}


def _device_skip(device: str) -> str:
    """'' when the device can be used here, else the reason."""
    from vime.platform import get_platform

    platform = get_platform(device)
    if platform.is_available():
        return ""
    return f"device {device!r} is not available on this host"


def run_gate(gate_id: str, device: str | None = None, dtype: str | None = None, **knobs: Any) -> GateResult:
    spec = GATES.get(gate_id)
    if spec is None:
        return GateResult(gate_id, "unknown gate", "L3", "error", reason=f"unknown gate {gate_id}; known: {', '.join(GATES)}")
    from vime.gates.common import GateOutcome, GateSkip

    dtype = dtype or DEFAULT_DTYPE
    start = time.perf_counter()
    result = GateResult(spec.id, spec.name, spec.level, "error", device=device or "", dtype=dtype)
    try:
        if device is None:
            from vime.platform import detect

            device = detect()
        result.device = device
        why = _device_skip(device)
        if why:
            raise GateSkip(why)
        try:
            fn = spec.function
        except ModuleNotFoundError as exc:
            if exc.name and spec.target.startswith(exc.name):
                result.reason = f"gate {spec.id} is registered but {exc.name} is not in this build"
                return result
            raise
        with _cpu_threads():
            got = fn(device, dtype, **knobs)
        if isinstance(got, GateResult):
            got.device, got.dtype = device, dtype
            result = got
        elif isinstance(got, GateOutcome):
            result.verdict, result.values, result.thresholds = got.verdict, got.values, got.thresholds
            result.reason, result.traceback = got.reason, got.traceback
        else:
            raise TypeError(f"gate {spec.id} returned {type(got).__name__}, expected GateOutcome")
    except GateSkip as exc:
        result.verdict, result.reason = "skip", str(exc)
    except Exception as exc:  # noqa: BLE001 - an error inside a gate is a result, with its traceback
        result.verdict = "error"
        result.reason = f"{type(exc).__name__}: {exc}"[:500]
        result.traceback = traceback.format_exc()
    finally:
        result.duration_s = round(time.perf_counter() - start, 4)
    return result


def run_gates(ids: list[str] | None = None, device: str | None = None, dtype: str | None = None) -> list[GateResult]:
    return [run_gate(g, device=device, dtype=dtype) for g in (ids or list(GATES))]
