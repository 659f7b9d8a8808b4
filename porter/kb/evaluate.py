"""Accuracy of the knowledge base on a labelled trace corpus (`index.yaml` + trace files).

A positive case is correct at top-1 when the first match's id, or one of its aliases, is in
the case's `expected` or `acceptable` ids; top-3 likewise for any of the first three matches.
`negative` and `unknown` cases are correct only when the diagnosis is `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from porter.errors import InputError
from porter.kb.index import CompiledKB
from porter.kb.matcher import Diagnosis, Match, diagnose_stream


@dataclass(frozen=True)
class CaseResult:
    file: str
    kind: str
    expected: tuple[str, ...]
    got: tuple[str, ...]  # ids of the reported matches, best first
    top1: bool
    top3: bool
    confidence: float

    def to_dict(self) -> dict:
        return {"file": self.file, "kind": self.kind, "expected": list(self.expected), "got": list(self.got),
                "top1": self.top1, "top3": self.top3, "confidence": self.confidence}


@dataclass
class EvalReport:
    corpus: str
    cases: list[CaseResult] = field(default_factory=list)

    def _positives(self) -> list[CaseResult]:
        return [c for c in self.cases if c.kind == "positive"]

    @property
    def top1(self) -> float:
        pos = self._positives()
        return sum(c.top1 for c in pos) / len(pos) if pos else 0.0

    @property
    def top3(self) -> float:
        pos = self._positives()
        return sum(c.top3 for c in pos) / len(pos) if pos else 0.0

    @property
    def false_positives(self) -> list[CaseResult]:
        return [c for c in self.cases if c.kind != "positive" and not c.top1]

    @property
    def misses(self) -> list[CaseResult]:
        return [c for c in self._positives() if not c.top1]

    def to_dict(self) -> dict:
        return {
            "corpus": self.corpus,
            "positives": len(self._positives()),
            "negatives_and_unknown": len(self.cases) - len(self._positives()),
            "top1": round(self.top1, 4),
            "top3": round(self.top3, 4),
            "top1_correct": sum(c.top1 for c in self._positives()),
            "top3_correct": sum(c.top3 for c in self._positives()),
            "false_positives": [c.to_dict() for c in self.false_positives],
            "misses": [c.to_dict() for c in self.misses],
            "cases": [c.to_dict() for c in self.cases],
        }


def _names(m: Match) -> set[str]:
    return {m.entry.id, *m.entry.aliases}


def score_case(diag: Diagnosis, kind: str, wanted: set[str]) -> tuple[bool, bool]:
    if kind != "positive":
        ok = diag.status == "unknown"
        return ok, ok
    top1 = bool(diag.matches) and bool(_names(diag.matches[0]) & wanted)
    top3 = any(_names(m) & wanted for m in diag.matches[:3])
    return top1, top3


def load_index(corpus: Path) -> list[dict]:
    from porter.yamlio import load_yaml_file

    index = corpus / "index.yaml"
    if not index.is_file():
        raise InputError(f"{corpus}: no index.yaml", hint="a corpus directory holds trace files and an index.yaml (see tests/data/seed-traces/README.md)")
    doc = load_yaml_file(index) or {}
    cases = doc.get("cases") if isinstance(doc, dict) else None
    if not isinstance(cases, list):
        raise InputError(f"{index}: expected a `cases:` list")
    return cases


def evaluate(kb: CompiledKB, corpus: Path, env: dict[str, str] | None = None) -> EvalReport:
    corpus = Path(corpus)
    report = EvalReport(str(corpus))
    for i, case in enumerate(load_index(corpus)):
        if not isinstance(case, dict) or not case.get("file"):
            raise InputError(f"{corpus / 'index.yaml'}: case {i} has no `file`")
        path = corpus / case["file"]
        if not path.is_file():
            raise InputError(f"{path}: listed in index.yaml but missing")
        kind = str(case.get("kind", "positive"))
        expected = tuple(str(x) for x in case.get("expected") or ())
        wanted = set(expected) | {str(x) for x in case.get("acceptable") or ()}
        with path.open("rb") as fh:
            diag = diagnose_stream(kb, fh, env, top=3)
        top1, top3 = score_case(diag, kind, wanted)
        report.cases.append(
            CaseResult(case["file"], kind, expected, tuple(m.entry.id for m in diag.matches), top1, top3,
                       diag.matches[0].confidence if diag.matches else 0.0)
        )
    return report
