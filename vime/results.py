"""Gate results: the contract between `python -m vime.smoke` and `porter smoke`.

No torch import here: porter reads these records on machines without the runtime.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Verdict = Literal["pass", "fail", "skip", "error"]
SMOKE_SCHEMA = "vime.smoke/1"
LEVELS = ("L0", "L1", "L2", "L3")


@dataclass
class GateResult:
    gate: str  # "G1" ... "G8" for L3 gates, or a check id such as "L1.import.torch"
    name: str  # human name: "logprob alignment"
    level: str  # L0..L3
    verdict: Verdict
    values: dict[str, Any] = field(default_factory=dict)  # measured
    thresholds: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    dtype: str = "float32"
    duration_s: float = 0.0
    reason: str = ""  # why skip/fail/error, in one line
    traceback: str = ""  # for error/fail, the text porter runs through diagnose

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GateResult":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class SmokeReport:
    level: str
    results: list[GateResult]
    environment: dict[str, Any] = field(default_factory=dict)  # L0 facts: versions, device, env vars
    stack: dict[str, Any] = field(default_factory=dict)  # vime/stack.yaml as verified
    duration_s: float = 0.0
    schema: str = SMOKE_SCHEMA

    @property
    def ok(self) -> bool:
        return all(r.verdict in ("pass", "skip") for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "level": self.level,
            "ok": self.ok,
            "duration_s": self.duration_s,
            "environment": self.environment,
            "stack": self.stack,
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SmokeReport":
        return cls(
            level=data["level"],
            results=[GateResult.from_dict(r) for r in data.get("results", [])],
            environment=data.get("environment", {}),
            stack=data.get("stack", {}),
            duration_s=float(data.get("duration_s", 0.0)),
            schema=data.get("schema", SMOKE_SCHEMA),
        )
