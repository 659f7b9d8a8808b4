"""W8A8-MXFP8 rollout quantisation: the OCP MX format with E4M3 elements and E8M0 shared scales.

The trainer always sends full-precision weights; only the rollout side quantises, as in the
production framework's Ascend 950 path. Which tensors are quantised is decided by a ModelSlim-style
`quant_model_description.json` next to the rollout checkpoint. On an NPU with the MX kernel we call
`torch_npu.npu_dynamic_mx_quant`; everywhere else the reference quantiser below is used.

Format facts (OCP Microscaling spec v1.0, E4M3 element type):
  * a group is 32 consecutive elements along the last axis; a row of K elements has ceil(K/32)
    scales (a short last group is padded with zeros for the amax only);
  * shared exponent E = floor(log2(amax of the group)) - 8, where 8 is E4M3's largest exponent;
    it is stored as the uint8 E + 127 (E8M0, 255 is reserved for NaN);
  * element = x / 2**E rounded to float8_e4m3fn and clamped to +-448 (the scaled group maximum lies
    in [256, 512), so the largest element of a group can saturate);
  * a group holding a NaN or an Inf gets the NaN scale 0xFF and every element of it decodes to NaN
    (E4M3 has no infinity; the spec's NaN scale propagates to the whole block).
Gate G5 checks this module bit for bit against vime.quant.ocp_reference, written separately from the
spec.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch

GROUP_SIZE = 32
E4M3_MAX = 448.0
E4M3_EMAX = 8  # floor(log2(448))
E4M3_MANTISSA_BITS = 3
E4M3_MIN_NORMAL_EXP = -6  # smallest normal E4M3 value is 2**-6
SCALE_BIAS = 127
NAN_EXPONENT = 128  # stored as the E8M0 byte 0xFF: the NaN scale of a block holding NaN or Inf
W8A8_MXFP8 = "W8A8_MXFP8"
FLOAT = "FLOAT"
DESCRIPTION_FILE = "quant_model_description.json"
SCALE_SUFFIX = "_scale"
_KNOWN_TYPES = {W8A8_MXFP8, FLOAT}


class MXFP8ConfigError(ValueError):
    """The quantisation setup cannot work: missing/incompatible description, external server,
    a conflicting worker extension. A ValueError, so the driver reports it as a usage error (exit 2)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message if not hint else f"{message} ({hint})")
        self.message = message
        self.hint = hint


class MXFP8LifecycleError(RuntimeError):
    """prepare/finalize called out of order."""


# --------------------------------------------------------------------------- reference quantiser


def _grouped(x: torch.Tensor, group_size: int) -> tuple[torch.Tensor, int]:
    """View the last axis as (groups, group_size), zero-padding a short last group."""
    k = x.shape[-1]
    groups = math.ceil(k / group_size)
    pad = groups * group_size - k
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    return x.reshape(*x.shape[:-1], groups, group_size), k


def shared_exponent(amax: torch.Tensor) -> torch.Tensor:
    """E = floor(log2(amax)) - 8, clamped to E8M0's range; an all-zero group gets the minimum; a
    group whose amax is NaN or Inf gets NAN_EXPONENT (byte 0xFF)."""
    # frexp gives amax = m * 2**e with m in [0.5, 1): floor(log2(amax)) = e - 1, exactly.
    _, e = torch.frexp(amax.float())
    exp = (e.to(torch.int32) - 1) - E4M3_EMAX
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -SCALE_BIAS))
    exp = exp.clamp(-SCALE_BIAS, SCALE_BIAS)
    exp = torch.where(amax.isfinite(), exp, torch.full_like(exp, NAN_EXPONENT))
    return exp


def quantize_mx_reference(x: torch.Tensor, group_size: int = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise along the last axis. Returns (float8_e4m3fn elements, uint8 biased scales)."""
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"cannot MX-quantise a tensor of shape {tuple(x.shape)}")
    groups, k = _grouped(x.float(), group_size)
    exp = shared_exponent(groups.abs().amax(dim=-1))
    special = exp == NAN_EXPONENT
    scaled = groups / torch.exp2(torch.where(special, 0, exp).float()).unsqueeze(-1)
    # Clamp before the cast: some backends turn out-of-range float8 conversions into NaN.
    q = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    q = torch.where(special.unsqueeze(-1), torch.tensor(float("nan")).to(torch.float8_e4m3fn), q)
    q = q.reshape(*x.shape[:-1], -1)[..., :k]
    return q, (exp + SCALE_BIAS).to(torch.uint8)


def dequantize_mx(
    q: torch.Tensor, scale: torch.Tensor, group_size: int = GROUP_SIZE, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Inverse of the quantiser: element * 2**(scale - 127), per group."""
    k = q.shape[-1]
    if scale.shape[-1] != math.ceil(k / group_size) or scale.shape[:-1] != q.shape[:-1]:
        raise ValueError(
            f"scale shape {tuple(scale.shape)} does not match elements {tuple(q.shape)} with group size {group_size}"
        )
    groups, _ = _grouped(q.float(), group_size)
    biased = scale.to(torch.int32)
    factor = torch.exp2(biased.float() - SCALE_BIAS)
    factor = torch.where(biased == NAN_EXPONENT + SCALE_BIAS, float("nan"), factor).unsqueeze(-1)
    out = (groups * factor).reshape(*q.shape[:-1], -1)[..., :k]
    return out.to(dtype)


def error_bound(x: torch.Tensor, scale: torch.Tensor, group_size: int = GROUP_SIZE) -> torch.Tensor:
    """Largest |dequant(quant(x)) - x| the format allows, per element (derived, not fitted).

    Normal E4M3 range: round-to-nearest with 3 mantissa bits, so at most half a ULP = |x| / 16.
    Subnormal range (scaled |x| < 2**-6): spacing 2**-9, so at most 2**(E - 10) absolute.
    Saturation (scaled |x| > 448): the clamp error itself, at most |x| / 8 since scaled |x| < 512.
    """
    k = x.shape[-1]
    exp = scale.to(torch.int32).float() - SCALE_BIAS
    step = torch.exp2(exp).repeat_interleave(group_size, dim=-1)[..., :k]
    ax = x.float().abs()
    scaled = ax / step
    rounding = torch.maximum(ax * 2.0 ** -(E4M3_MANTISSA_BITS + 1), step * 2.0 ** (E4M3_MIN_NORMAL_EXP - E4M3_MANTISSA_BITS - 1))
    saturation = (scaled - E4M3_MAX).clamp(min=0) * step
    return torch.where(scaled > E4M3_MAX, saturation + rounding, rounding)


# --------------------------------------------------------------------------- device dispatch


def npu_mx_quant_available() -> bool:
    """True when torch_npu exposes the MX kernel (Ascend 950); never imports torch_npu eagerly."""
    import importlib.util

    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        import torch_npu  # type: ignore[import-not-found]
    except Exception:  # a broken vendor install is "not available", the reference still works
        return False
    return hasattr(torch_npu, "npu_dynamic_mx_quant") and hasattr(torch_npu, "float8_e4m3fn")


def quantize_mx_npu(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    import torch_npu  # type: ignore[import-not-found]

    q, scale = torch_npu.npu_dynamic_mx_quant(x.to(torch.bfloat16), axis=-1, dst_type=torch_npu.float8_e4m3fn)
    # The kernel's scale carries extra trailing dims; the production code merges the last two and
    # drops a trailing singleton to get (rows, groups).
    if scale.dim() >= 2:
        scale = scale.reshape(*scale.shape[:-2], scale.shape[-2] * scale.shape[-1])
    if scale.dim() > q.dim() and scale.shape[-1] == 1:
        scale = scale.squeeze(-1)
    if scale.dtype != torch.uint8 and scale.element_size() == 1:
        scale = scale.view(torch.uint8)  # E8M0 bytes, whatever dtype the kernel labels them with
    return q, scale


def quantize_mx(x: torch.Tensor, backend: str = "auto") -> tuple[torch.Tensor, torch.Tensor]:
    """`backend`: "reference", "npu", or "auto" (npu kernel when present and the tensor is on an NPU)."""
    if backend == "reference":
        return quantize_mx_reference(x)
    if backend == "npu" or (backend == "auto" and x.device.type == "npu" and npu_mx_quant_available()):
        if not npu_mx_quant_available():
            raise MXFP8ConfigError(
                "torch_npu.npu_dynamic_mx_quant is not available", "MX kernels need Ascend 950; use backend='reference'"
            )
        return quantize_mx_npu(x)
    if backend != "auto":
        raise ValueError(f"unknown MX quantisation backend {backend!r}; expected auto, reference or npu")
    return quantize_mx_reference(x)


# --------------------------------------------------------------------------- description


@dataclass(frozen=True)
class QuantDescription:
    """A ModelSlim `quant_model_description.json`: per-tensor quant types plus a few globals."""

    entries: Mapping[str, str]
    group_size: int = GROUP_SIZE
    quant_method: str = "ascend"
    source: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, checkpoint_dir: str | Path) -> "QuantDescription":
        path = Path(checkpoint_dir) / DESCRIPTION_FILE
        if not path.is_file():
            raise MXFP8ConfigError(
                f"no {DESCRIPTION_FILE} in {checkpoint_dir}",
                "--vllm-quantization ascend needs the ModelSlim description in the --hf-checkpoint directory",
            )
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise MXFP8ConfigError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
        return cls.from_dict(raw, source=str(path))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str = "<dict>") -> "QuantDescription":
        if not isinstance(raw, Mapping):
            raise MXFP8ConfigError(f"{source}: expected a JSON object, got {type(raw).__name__}")
        method = raw.get("quant_method", "ascend")
        if method != "ascend":
            raise MXFP8ConfigError(f"{source}: quant_method is {method!r}, expected 'ascend'")
        group = raw.get("group_size", GROUP_SIZE)
        if group != GROUP_SIZE:
            raise MXFP8ConfigError(f"{source}: group_size is {group!r}; W8A8_MXFP8 needs {GROUP_SIZE}")
        entries = {k: v for k, v in raw.items() if isinstance(v, str) and k not in ("quant_method", "model_quant_type", "version")}
        extra = {k: v for k, v in raw.items() if k not in entries and k not in ("quant_method", "group_size")}
        unknown = sorted({v for v in entries.values()} - _KNOWN_TYPES)
        if unknown:
            raise MXFP8ConfigError(
                f"{source}: unsupported quant types {unknown}",
                f"only {W8A8_MXFP8} and {FLOAT} are supported (no MXFP4 or int8 schemes)",
            )
        if W8A8_MXFP8 not in entries.values():
            raise MXFP8ConfigError(f"{source}: no tensor is marked {W8A8_MXFP8}; this is not an MXFP8 description")
        for name, kind in entries.items():
            if kind == W8A8_MXFP8 and not name.endswith("weight"):
                raise MXFP8ConfigError(f"{source}: {name} is marked {W8A8_MXFP8} but only weights can be quantised")
        return cls(entries=dict(entries), group_size=group, quant_method=method, source=source, extra=extra)

    def is_eligible(self, name: str) -> bool:
        return self.entries.get(name) == W8A8_MXFP8

    def validate_against(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        """Fail with a precise message when the description and the rollout model disagree."""
        missing = sorted(n for n in shapes if n not in self.entries)
        extra = sorted(n for n in self.entries if n not in shapes)
        flat = sorted(n for n, s in shapes.items() if self.is_eligible(n) and len(s) < 2)
        problems = []
        if missing:
            problems.append(f"{len(missing)} model tensors not described (first: {missing[0]})")
        if extra:
            problems.append(f"{len(extra)} described tensors not in the model (first: {extra[0]})")
        if flat:
            problems.append(f"{len(flat)} tensors marked {W8A8_MXFP8} are not matrices (first: {flat[0]})")
        if problems:
            raise MXFP8ConfigError(
                f"{self.source or 'quant description'} does not match the rollout model: " + "; ".join(problems),
                "regenerate the description for this checkpoint",
            )

    def to_dict(self) -> dict[str, Any]:
        return {"quant_method": self.quant_method, "group_size": self.group_size, **dict(self.extra), **dict(self.entries)}


def describe_model(
    shapes: Mapping[str, tuple[int, ...]], eligible: Callable[[str, tuple[int, ...]], bool] | None = None
) -> QuantDescription:
    """Build a description for a model: linear projections and expert matrices MXFP8, the rest FLOAT
    (embeddings, norms, router, lm_head), as ModelSlim does by default."""
    if eligible is None:
        def eligible(name: str, shape: tuple[int, ...]) -> bool:
            # linear projections and MoE expert matrices; the router gate stays in full precision
            linear = name.endswith("proj.weight") or re.search(r"\.experts\.\d+\.w[123]\.weight$", name) is not None
            return linear and len(shape) == 2 and ".layers." in name
    entries = {n: (W8A8_MXFP8 if eligible(n, tuple(s)) else FLOAT) for n, s in shapes.items()}
    return QuantDescription(entries=entries, extra={"model_quant_type": W8A8_MXFP8})


def write_description(checkpoint_dir: str | Path, description: QuantDescription) -> Path:
    from vime.fsio import atomic_write_bytes

    text = json.dumps(description.to_dict(), indent=2, sort_keys=True) + "\n"
    return atomic_write_bytes(Path(checkpoint_dir) / DESCRIPTION_FILE, text.encode("utf-8"))


# --------------------------------------------------------------------------- conversion


def quantize_named_tensors(
    named: Iterable[tuple[str, torch.Tensor]], description: QuantDescription, backend: str = "auto"
) -> Iterator[tuple[str, torch.Tensor]]:
    """Eligible weights become `name -> e4m3` and `name_scale -> uint8`; the rest pass through as the same object."""
    for name, tensor in named:
        if description.is_eligible(name):
            q, scale = quantize_mx(tensor.detach(), backend=backend)
            yield name, q
            yield name + SCALE_SUFFIX, scale
        else:
            yield name, tensor


def dequantize_named_tensors(
    named: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype = torch.float32
) -> Iterator[tuple[str, torch.Tensor]]:
    """Pair each e4m3 tensor with its `_scale` and yield the dequantised weight (the rollout forward's view)."""
    pending: dict[str, torch.Tensor] = {}
    scales: dict[str, torch.Tensor] = {}
    for name, tensor in named:
        if name.endswith(SCALE_SUFFIX) and tensor.dtype == torch.uint8:
            base = name[: -len(SCALE_SUFFIX)]
            if base in pending:
                yield base, dequantize_mx(pending.pop(base), tensor, dtype=dtype)
            else:
                scales[base] = tensor
        elif tensor.dtype == torch.float8_e4m3fn:
            if name in scales:
                yield name, dequantize_mx(tensor, scales.pop(name), dtype=dtype)
            else:
                pending[name] = tensor
        else:
            yield name, tensor
    if pending or scales:
        lost = sorted(pending) + sorted(s + SCALE_SUFFIX for s in scales)
        raise MXFP8ConfigError(f"MXFP8 update is incomplete: missing scale or elements for {lost[:3]} ({len(lost)} in all)")


# --------------------------------------------------------------------------- rollout worker extension

EXTENSION_NAME = "vime.quant.mxfp8.MXFP8RolloutExtension"


class MXFP8RolloutExtension:
    """The rollout worker's MXFP8 extension (the production AscendMXFP8WorkerExtension, in-process).

    Installed on an engine, it wraps the engine's weight-update verbs:
      start_weight_update  -> native start, then `prepare()`: restore eligible modules to their loading
                              layout (clear `_mxfp8_transformed`), wrap the loader; nested prepare fails.
      update_weights       -> eligible weights are quantised to (e4m3, uint8 scale) pairs, everything
                              else passes through as the same object; the loader pairs them and hands
                              the engine the dequantised weight (what the rollout forward computes with).
      finish_weight_update -> completeness check of the MXFP8 pairs, then the native finish (which
                              promotes the version), then `finalize(success=True)`: markers set,
                              loader restored. Any failure aborts the update (old weights, old version)
                              and calls `finalize(success=False)` without masking the original error.
      forward              -> with `activations=True` (default: the scheme is W8A8) the input of every
                              eligible linear layer is MX-quantised on the fly (per token, groups of 32
                              along the hidden axis, like the dynamic MX kernel) and dequantised, so
                              the rollout forward computes with MX weights and MX activations.
    The trainer keeps sending full-precision weights; only this side quantises.
    """

    FAULTS = ("drop_scale", "skip_quant")  # test knobs: lose one scale in transit / load unquantised weights

    def __init__(
        self, engine: Any, description: QuantDescription, *, backend: str = "auto", fault: str | None = None,
        activations: bool = True,
    ) -> None:
        if fault is not None and fault not in self.FAULTS:
            raise ValueError(f"unknown MXFP8 fault {fault!r}; use one of {self.FAULTS}")
        self.fault = fault
        self.engine = engine
        self.description = description
        self.backend = backend
        self.prepared = False
        self.events: list[str] = []
        self.last_pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # name -> (q, scale) of the last update
        self.passthrough: dict[str, torch.Tensor] = {}  # name -> object handed through unquantised (identity check)
        self._native: dict[str, Callable[..., Any]] = {}
        self._expected = [n for n in description.entries if description.is_eligible(n)]
        self.activations = activations
        self._hooks: list[Any] = []

    # ----- installation
    @classmethod
    def install(
        cls,
        engine: Any,
        checkpoint_dir: str | Path | None = None,
        *,
        description: QuantDescription | None = None,
        worker_extension_cls: str | None = None,
        external_server: bool = False,
        backend: str = "auto",
        fault: str | None = None,
        activations: bool = True,
    ) -> "MXFP8RolloutExtension":
        """Fail closed: an external server, a user worker extension or a description that does not
        fit the engine's model all stop here with a message that says what to change."""
        if external_server:
            raise MXFP8ConfigError(
                "--vllm-quantization ascend cannot drive an external rollout server",
                "the quantising worker extension must run inside an engine vime starts",
            )
        if worker_extension_cls and worker_extension_cls != EXTENSION_NAME:
            raise MXFP8ConfigError(
                f"--vllm-worker-extension-cls {worker_extension_cls} conflicts with the MXFP8 worker extension; "
                "remove it or drop --vllm-quantization ascend"
            )
        existing = getattr(engine, "worker_extension", None)
        if existing is not None and not isinstance(existing, cls):
            raise MXFP8ConfigError(
                f"engine already carries worker extension {type(existing).__name__}; refusing to stack MXFP8 on it"
            )
        if existing is not None:
            return existing  # installing twice is a no-op
        if description is None:
            if checkpoint_dir is None:
                raise MXFP8ConfigError("MXFP8 needs a quant description or the checkpoint directory that holds one")
            description = QuantDescription.load(checkpoint_dir)
        description.validate_against({n: tuple(t.shape) for n, t in engine.named_weights().items()})
        ext = cls(engine, description, backend=backend, fault=fault, activations=activations)
        for verb in ("start_weight_update", "update_weights", "finish_weight_update", "abort_weight_update"):
            ext._native[verb] = getattr(engine, verb)
        engine.start_weight_update = ext.start_weight_update
        engine.update_weights = ext.update_weights
        engine.finish_weight_update = ext.finish_weight_update
        engine.abort_weight_update = ext.abort_weight_update
        engine.worker_extension = ext
        if activations:
            ext._hooks = [m.register_forward_pre_hook(ext._quantize_input) for m in ext._modules().values()]
        return ext

    def _quantize_input(self, module: torch.nn.Module, args: tuple) -> tuple:
        """A8: the activation entering an MXFP8 linear layer, quantised dynamically and dequantised."""
        x = args[0]
        q, scale = quantize_mx(x.detach(), backend=self.backend)
        return (dequantize_mx(q, scale, dtype=x.dtype), *args[1:])

    def _modules(self) -> dict[str, torch.nn.Module]:
        """Owning module of each eligible weight (the linear layer)."""
        model = self.engine.model
        return {n: model.get_submodule(n.rsplit(".", 1)[0]) for n in self._expected}

    # ----- lifecycle
    def prepare(self) -> None:
        if self.prepared:
            raise MXFP8LifecycleError("prepare_ascend_mxfp8_weight_update called twice without finalize")
        for name, module in self._modules().items():
            if getattr(module, "_mxfp8_transformed", False):
                # restore_weights_for_rl_loading: back to the plain layout the loader writes into
                module._mxfp8_original_shapes = {name.rsplit(".", 1)[1]: tuple(module.weight.shape)}
                module._mxfp8_transformed = False
        self.last_pairs = {}
        self.passthrough = {}
        self.prepared = True
        self.events.append("prepare")

    def finalize(self, success: bool) -> None:
        """Idempotent: a second call, or a call after a failed update, changes nothing."""
        if not self.prepared:
            self.events.append(f"finalize:{'ok' if success else 'failed'}:noop")
            return
        self.prepared = False
        if success:
            for module in self._modules().values():
                if not getattr(module, "_mxfp8_transformed", False):
                    module._mxfp8_transformed = True  # process_weights_after_loading ran for it
        self.events.append(f"finalize:{'ok' if success else 'failed'}")

    # ----- wrapped verbs
    def start_weight_update(self, is_checkpoint_format: bool = True) -> None:
        self._native["start_weight_update"](is_checkpoint_format=is_checkpoint_format)
        try:
            self.prepare()
        except BaseException:
            self._native["abort_weight_update"]()
            raise

    def update_weights(self, chunk: Any) -> int:
        if not self.prepared:
            raise MXFP8LifecycleError("update_weights outside prepare/finalize")
        items = list(chunk.items() if hasattr(chunk, "items") else chunk)
        if self.fault == "skip_quant":
            wire = items
        else:
            wire = list(quantize_named_tensors(items, self.description, backend=self.backend))
        if self.fault == "drop_scale":
            scales = [i for i, (n, _) in enumerate(wire) if n.endswith(SCALE_SUFFIX)]
            if scales:
                del wire[scales[0]]
        originals = {n: t for n, t in items}
        for name, t in wire:
            if name.endswith(SCALE_SUFFIX) and name[: -len(SCALE_SUFFIX)] in originals:
                continue
            if self.description.is_eligible(name):
                continue
            self.passthrough[name] = t
        by_name = dict(wire)
        for name in originals:
            if self.description.is_eligible(name) and name + SCALE_SUFFIX in by_name:
                self.last_pairs[name] = (by_name[name], by_name[name + SCALE_SUFFIX])
        params = self.engine.named_weights()
        loaded = {}
        for name, t in dequantize_named_tensors(wire, dtype=torch.float32):
            loaded[name] = t.to(params[name].dtype) if name in params and t.dtype != params[name].dtype else t
        return self._native["update_weights"](loaded)

    def finish_weight_update(self, weight_version: int | None = None) -> int:
        try:
            missing = [n for n in self._expected if n not in self.last_pairs]
            if missing:
                raise MXFP8ConfigError(
                    f"MXFP8 update incomplete: {len(missing)} quantised weights missing (e.g. {missing[:3]})"
                )
            version = self._native["finish_weight_update"](weight_version)
        except BaseException:
            self._native["abort_weight_update"]()
            self.finalize(success=False)
            raise
        self.finalize(success=True)
        return version

    def abort_weight_update(self) -> None:
        self._native["abort_weight_update"]()
        self.finalize(success=False)


    def summary(self) -> dict[str, Any]:
        return {
            "extension": EXTENSION_NAME,
            "eligible": len(self._expected),
            "described": len(self.description.entries),
            "backend": "npu" if self.backend == "npu" or (self.backend == "auto" and npu_mx_quant_available()) else "reference",
            "activations": self.activations,
            "events": list(self.events),
        }


def _install_in_engine(
    engine: Any, checkpoint_dir: str | None, worker_extension_cls: str | None, external_server: bool, backend: str
) -> dict[str, Any]:
    return MXFP8RolloutExtension.install(
        engine, checkpoint_dir, worker_extension_cls=worker_extension_cls, external_server=external_server, backend=backend
    ).summary()


def enable_for_engine(
    engine: Any,
    checkpoint_dir: str | Path | None,
    *,
    worker_extension_cls: str | None = None,
    external_server: bool = False,
    backend: str = "auto",
) -> dict[str, Any]:
    """--vllm-quantization ascend: install the extension on a local engine, or inside the engine process
    of a decoupled (broadcast) setup when `engine` is a proxy carrying a BroadcastSync as `_sync`."""
    directory = None if checkpoint_dir is None else str(checkpoint_dir)
    if directory is None and not external_server:
        raise MXFP8ConfigError(
            "--vllm-quantization ascend needs --hf-checkpoint", f"the directory must hold {DESCRIPTION_FILE}"
        )
    remote = getattr(engine, "_sync", None)
    if remote is not None and hasattr(remote, "apply"):
        if external_server:  # fail before touching the remote process
            _install_in_engine(engine, directory, worker_extension_cls, external_server, backend)
        return remote.apply(_install_in_engine, directory, worker_extension_cls, external_server, backend)
    return _install_in_engine(engine, directory, worker_extension_cls, external_server, backend)


def main(argv: list[str] | None = None) -> int:
    """`python -m vime.quant describe CKPT_DIR`: write a quant_model_description.json for an HF
    checkpoint written by vime (projection and expert weights W8A8_MXFP8, the rest FLOAT)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m vime.quant", description=main.__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    describe = sub.add_parser("describe", help="write quant_model_description.json into CKPT_DIR")
    describe.add_argument("checkpoint_dir")
    args = parser.parse_args(argv)
    from safetensors import safe_open

    weights = Path(args.checkpoint_dir) / "model.safetensors"
    if not weights.is_file():
        parser.error(f"{weights} not found: pass a directory written by vime's save_hf")
    with safe_open(str(weights), framework="pt") as fh:
        shapes = {name: tuple(fh.get_slice(name).get_shape()) for name in fh.keys()}
    description = describe_model(shapes)
    path = write_description(args.checkpoint_dir, description)
    eligible = sum(1 for n in description.entries if description.is_eligible(n))
    print(f"wrote {path}: {eligible} of {len(description.entries)} tensors {W8A8_MXFP8}")
    return 0
