"""What changed between two smoke runs: new failures, fixes, checks that came or went, and
metric drift (numeric values that moved by more than a relative tolerance)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

FAILING = ("fail", "error")
DEFAULT_DRIFT = 0.10


@dataclass
class Drift:
    gate: str
    metric: str
    old: float
    new: float
    rel_change: float  # (new - old) / |old|; inf when old is 0 and new is not


@dataclass
class Comparison:
    old_run: str
    new_run: str
    new_failures: list[str] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)
    still_failing: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    not_reached: list[str] = field(default_factory=list)  # the newer run broke before these checks ran
    verdict_changes: list[dict[str, str]] = field(default_factory=list)
    drift: list[Drift] = field(default_factory=list)
    tolerance: float = DEFAULT_DRIFT
    error_change: str = ""  # a run-level error that appeared or went away

    @property
    def regressed(self) -> bool:
        return bool(self.new_failures) or self.error_change == "new"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["regressed"] = self.regressed
        return out


def _results(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    report = run.get("report") or {}
    return {r["gate"]: r for r in report.get("results", []) if isinstance(r, dict) and "gate" in r}


def numeric_value(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _rel(old: float, new: float) -> float:
    if old == new:
        return 0.0
    if old == 0.0:
        return math.inf
    return (new - old) / abs(old)


def compare_runs(old: dict[str, Any], new: dict[str, Any], tolerance: float = DEFAULT_DRIFT,
                 abs_floor: float = 1e-9) -> Comparison:
    """Compare two stored run records (result.json documents). Values both below `abs_floor`
    in magnitude count as equal: 1e-12 vs 3e-12 is noise, not a 200 % drift."""
    a, b = _results(old), _results(new)
    out = Comparison(old_run=f"{old.get('host')}/{old.get('run_id')}", new_run=f"{new.get('host')}/{new.get('run_id')}",
                     tolerance=tolerance)
    for gate in sorted(set(a) | set(b)):
        if gate not in a:
            out.added.append(gate)
            if b[gate].get("verdict") in FAILING:
                out.new_failures.append(gate)
            continue
        if gate not in b:
            (out.not_reached if new.get("error") else out.removed).append(gate)
            continue
        va, vb = a[gate].get("verdict"), b[gate].get("verdict")
        if va != vb:
            out.verdict_changes.append({"gate": gate, "old": str(va), "new": str(vb)})
        if vb in FAILING and va not in FAILING:
            out.new_failures.append(gate)
        elif va in FAILING and vb not in FAILING:
            out.fixed.append(gate)
        elif va in FAILING and vb in FAILING:
            out.still_failing.append(gate)
        old_values, new_values = a[gate].get("values") or {}, b[gate].get("values") or {}
        for metric in sorted(set(old_values) & set(new_values)):
            x, y = numeric_value(old_values[metric]), numeric_value(new_values[metric])
            if x is None or y is None or (abs(x) < abs_floor and abs(y) < abs_floor):
                continue
            change = _rel(x, y)
            if abs(change) > tolerance:
                out.drift.append(Drift(gate, metric, x, y, change))
    old_error, new_error = bool(old.get("error")), bool(new.get("error"))
    if new_error and not old_error:
        out.error_change = "new"
    elif old_error and not new_error:
        out.error_change = "gone"
    return out
