"""Records passed between the upgrade stages: sources -> index -> usage -> drift -> outcome.

Every record is a frozen dataclass with `to_dict()` (the JSON schema of `porter upgrade --json`).
Vocabulary as in shared/DESIGN.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class DriftFamily(str, Enum):
    REMOVED = "F1"  # symbol gone, no new home found
    MOVED = "F2"  # same name, new module
    RENAMED = "F2r"  # new name (same module or elsewhere)
    SIGNATURE = "F3"  # parameters changed in a way that breaks the plugin's calls or overrides
    RETURN = "F4"  # return shape/type changed
    NEW_ATTRIBUTE = "F7"  # base class now requires an attribute the subclass lacks
    NEW_METHOD = "F8"  # new abstract / NotImplementedError method the subclass lacks
    BINARY = "F9"  # compiled extension / ABI
    BASE_CHANGED = "F10"  # class bases changed under a plugin subclass
    MONKEYPATCH = "F11"  # a monkeypatch target is gone
    OTHER = "other"

    @property
    def label(self) -> str:
        return FAMILY_LABELS[self]


FAMILY_LABELS = {
    DriftFamily.REMOVED: "removed",
    DriftFamily.MOVED: "moved",
    DriftFamily.RENAMED: "renamed",
    DriftFamily.SIGNATURE: "signature changed",
    DriftFamily.RETURN: "return changed",
    DriftFamily.NEW_ATTRIBUTE: "new required attribute",
    DriftFamily.NEW_METHOD: "new required method",
    DriftFamily.BINARY: "binary/ABI",
    DriftFamily.BASE_CHANGED: "base class changed",
    DriftFamily.MONKEYPATCH: "monkeypatch target gone",
    DriftFamily.OTHER: "other",
}


class Severity(str, Enum):
    BREAKING = "breaking"  # import or call fails at the target
    RISKY = "risky"  # may fail depending on runtime path
    NOTE = "note"  # only under a dead guard, or additive


class GuardKind(str, Enum):
    NONE = "none"
    VERSION = "version"  # vllm_version_is(...), torch version tuple checks
    IMPORT_ERROR = "import_error"  # try: ... except ImportError
    TYPE_CHECKING = "type_checking"
    HASATTR = "hasattr"


class Outcome(str, Enum):
    A = "A"  # works unchanged
    A_WITH_NOTE = "A_WITH_NOTE"  # works; additive change or gap to note
    B = "B"  # consumer-side configuration only
    C_PATCH = "C_PATCH"  # we patch the fork
    C_REPORT = "C_REPORT"  # the fix belongs to a community upstream


@dataclass(frozen=True)
class Location:
    """Where a symbol lives in an upstream: `module` plus dotted `qualname` inside it."""

    module: str
    qualname: str
    file: str | None = None
    line: int | None = None

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qualname}" if self.qualname else self.module

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None} | {"dotted": self.dotted}


@dataclass(frozen=True)
class Site:
    """A place in the plugin: path relative to the plugin root, 1-based line."""

    path: str
    line: int
    code: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Guard:
    kind: GuardKind = GuardKind.NONE
    expression: str = ""
    live: bool = True  # is the guarded branch taken at the target version?

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "expression": self.expression, "live": self.live}


@dataclass(frozen=True)
class Candidate:
    """A possible new home of a moved or renamed symbol, with the evidence for it."""

    location: Location
    confidence: float  # 0..1
    evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"location": self.location.to_dict(), "confidence": round(self.confidence, 3), "evidence": list(self.evidence)}


@dataclass(frozen=True)
class DriftRecord:
    family: DriftFamily
    symbol: str  # dotted name as the plugin uses it
    old_location: Location
    sites: tuple[Site, ...]
    severity: Severity = Severity.BREAKING
    new_location: Location | None = None
    confidence: float = 0.0  # of new_location
    evidence: tuple[str, ...] = ()
    candidates: tuple[Candidate, ...] = ()
    guard: Guard = field(default_factory=Guard)
    suggested_strategy: str = ""  # e.g. "lazy_import_fallback", "signature_adapter", "todo_stub"
    detail: dict[str, Any] = field(default_factory=dict)  # family-specific facts (params, methods, ...)
    message: str = ""
    lane: str = ""  # both | release | main | none: which lane of the plugin runs the sites (before the move)
    verdict: str = ""  # what to do at the target: breaks at NEW / dead at NEW: collapse / retarget the guard to NEW

    @property
    def key(self) -> str:
        """Stable identity of a finding across runs."""
        return f"{self.family.value}:{self.symbol}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "family": self.family.value,
            "family_label": self.family.label,
            "symbol": self.symbol,
            "severity": self.severity.value,
            "message": self.message,
            "old_location": self.old_location.to_dict(),
            "new_location": self.new_location.to_dict() if self.new_location else None,
            "confidence": round(self.confidence, 3),
            "evidence": list(self.evidence),
            "candidates": [c.to_dict() for c in self.candidates],
            "sites": [s.to_dict() for s in self.sites],
            "guard": self.guard.to_dict(),
            "suggested_strategy": self.suggested_strategy,
            "detail": self.detail,
            "lane": self.lane,
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class OutcomeDecision:
    outcome: Outcome
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.value, "reasons": list(self.reasons)}
