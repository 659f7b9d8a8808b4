"""Shared gate helpers: the outcome record, skips, per-device/dtype tolerances, named checks, and the
small-run arguments the gates drive `vime.train.run` with.

Gate function contract (what `vime.gates.GATES` points at):

    def run(device: str, dtype: str, **knobs) -> GateOutcome      # or raise GateSkip("why")

`device` is a platform kind (`cpu` | `cuda` | `npu`), `dtype` a torch dtype name. Knobs inject faults
for tests (each gate documents its own); with default knobs a healthy runtime must pass.

Tolerances (reasoning in docs/vime.md, "Tolerances"): `tolerance(device, dtype)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable


class GateSkip(Exception):
    """The gate cannot run here (device, dtype or optional dependency missing); str = the reason."""


@dataclass
class GateOutcome:
    verdict: str  # pass | fail | skip | error
    values: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    traceback: str = ""


@dataclass(frozen=True)
class Tolerance:
    logprob_mean: float  # bound on train_rollout_logprob_abs_diff (per-response mean |delta|, averaged)
    logprob_max: float  # bound on the largest per-token |delta|
    bitwise: bool  # whether reproducibility/resume must be bit-exact on this device/dtype
    metric_rtol: float  # relative tolerance on metrics when bitwise is not required
    note: str


# Keyed by (device kind, dtype). See docs/vime.md for how each number was chosen.
TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("cpu", "float32"): Tolerance(1e-6, 1e-5, True, 0.0, "same kernels on both sides; measured mean ~1e-7, max ~1e-6 (1-2 ulp of ~5.5)"),
    ("cpu", "bfloat16"): Tolerance(0.05, 0.5, True, 0.0, "bf16 rounding of activations; deterministic CPU kernels"),
    ("cpu", "float16"): Tolerance(0.02, 0.2, True, 0.0, "fp16 rounding of activations; deterministic CPU kernels"),
    ("cuda", "float32"): Tolerance(1e-4, 1e-3, False, 1e-4, "fp32 with different reduction orders (KV decode vs full forward)"),
    ("cuda", "bfloat16"): Tolerance(0.05, 0.5, False, 0.05, "vime CI default 0.1 halved; <0.05 is the healthy range reported"),
    ("cuda", "float16"): Tolerance(0.02, 0.2, False, 0.02, "fp16: 3 more mantissa bits than bf16"),
    ("npu", "float32"): Tolerance(1e-4, 1e-3, False, 1e-4, "as CUDA fp32; no NPU determinism recipe is documented"),
    ("npu", "bfloat16"): Tolerance(0.05, 0.5, False, 0.05, "as CUDA bf16 (<0.05 healthy on Ascend)"),
    ("npu", "float16"): Tolerance(0.02, 0.2, False, 0.02, "as CUDA fp16"),
}

ZERO_KL = 1e-8  # vime's first-step bounds: ppo_kl, kl_loss and |log_probs - ref_log_probs| at rollout 0


def tolerance(device: str, dtype: str) -> Tolerance:
    try:
        return TOLERANCES[(device, dtype)]
    except KeyError:
        raise GateSkip(f"no tolerance calibrated for device {device!r} dtype {dtype!r}") from None


@dataclass
class Check:
    name: str
    ok: bool
    value: Any = None
    threshold: Any = None
    detail: str = ""


def outcome(checks: Iterable[Check], values: dict | None = None, thresholds: dict | None = None) -> GateOutcome:
    """pass iff every check holds; the reason names the first failing ones."""
    checks = list(checks)
    vals = dict(values or {})
    ths = dict(thresholds or {})
    for c in checks:
        if c.value is not None:
            vals.setdefault(c.name, c.value)
        if c.threshold is not None:
            ths.setdefault(c.name, c.threshold)
    failed = [c for c in checks if not c.ok]
    vals["checks"] = {c.name: c.ok for c in checks}
    if not failed:
        return GateOutcome("pass", vals, ths)
    reason = "; ".join(
        f"{c.name}: {c.detail or f'{c.value!r} vs {c.threshold!r}'}" for c in failed[:3]
    )
    return GateOutcome("fail", vals, ths, reason=reason[:500])


def finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def metrics_close(a: list[dict], b: list[dict], rtol: float) -> tuple[bool, float]:
    """Same keys and every number within rtol (rtol 0 -> exact). Returns (ok, worst relative diff)."""
    if len(a) != len(b):
        return False, math.inf
    worst = 0.0
    for da, db in zip(a, b):
        if set(da) != set(db):
            return False, math.inf
        for k in da:
            x, y = da[k], db[k]
            if x == y:
                continue
            if not (finite(x) and finite(y)):
                return False, math.inf
            rel = abs(x - y) / max(abs(x), abs(y), 1e-12)
            worst = max(worst, rel)
    return (worst <= rtol if rtol > 0 else worst == 0.0), worst


def gate_argv(device: str, dtype: str, *extra: str, num_rollout: int = 2, seed: int = 1234, rollout_seed: int = 42) -> list[str]:
    """A small, fast `vime.train` run: 4 prompts x 4 samples, 12 new tokens, one optimizer step per rollout."""
    return [
        "--colocate", "--device", device, "--dtype", dtype,
        "--num-rollout", str(num_rollout), "--rollout-batch-size", "4", "--n-samples-per-prompt", "4",
        "--rollout-max-response-len", "12", "--lr", "1e-3", "--seed", str(seed), "--rollout-seed", str(rollout_seed),
        "--rollout-shuffle", *extra,
    ]


def quiet(_line: str) -> None:
    """Log sink for driver runs inside gates."""
