"""Accuracy of the knowledge base on a labelled trace corpus (see porter.kb.corpus).

A positive case is right at top-1 when the first match's id (or an alias) is in the case's
`expected` or `acceptable` ids, or when the entry declares the case's `cause` slug in its
`causes`; top-3 likewise for any of the first three matches. Healthy and unexplained cases are
right only when the diagnosis is `unknown`; any match there is a false diagnosis.

A test case whose source thread an entry cites in `references` cannot measure generalisation:
it is not counted, and the report lists it with the citing entries.

Per split: top-1, top-3, how often an answer given with confidence >= 0.9 is right, false
diagnoses on healthy/unexplained cases, and reliability per confidence bucket (of the answers
given with confidence in [lo, hi), the fraction that was right).

Reach says which misses an entry could fix and which need knowledge the KB lacks: per positive
case, `named` when an entry of the KB it was diagnosed with names it (its expected/acceptable
ids or its cause), `own` when only the entries written from it do (leave-source-out dropped
them: nothing else in the KB knows that cause), `none` when no entry does. Top-1 over the
`named` cases is the matcher's share; the others bound top-1 whatever the matcher does.

A `named` miss also says why the matcher missed it (`miss`, counted per split in
`reach.named_misses`, so a split whose cases must not be read still says which class to work
on): `no_signature` (no signature of a naming entry hit: the trace words it differently, or the
entry describes another symptom of the cause), `weak` (one hit, below the match threshold or an
`all` entry's partial or advice-only match), `abstained` (a firm match the calibrated confidence
put below the floor), `outranked` (a firm answer, behind another entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from porter.kb.corpus import CorpusCase, canonical_thread, load_corpus, split_problems
from porter.kb.index import CompiledKB
from porter.kb.matcher import Diagnosis, Match

HIGH_CONFIDENCE = 0.9
MISS_CLASSES = ("no_signature", "weak", "abstained", "outranked")
BUCKETS = ((0.0, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01))


@dataclass(frozen=True)
class CaseResult:
    file: str  # the case id (index.yaml corpora: the trace file name)
    kind: str
    expected: tuple[str, ...]
    got: tuple[str, ...]  # ids of the reported matches, best first
    top1: bool
    top3: bool
    confidence: float  # of the first match; 0.0 when unknown
    split: str = ""
    cause: str = ""
    judged_by: str = ""  # expected | cause | unknown (how a right answer was recognised)
    reach: str = ""  # positives: named | own | none (see the module doc); "" for the other kinds
    miss: str = ""  # a named positive that is not right at top-1: one of MISS_CLASSES (see the module doc)

    @property
    def answered(self) -> bool:
        return bool(self.got)

    def to_dict(self) -> dict:
        return {"id": self.file, "split": self.split, "kind": self.kind, "cause": self.cause,
                "expected": list(self.expected), "got": list(self.got), "top1": self.top1, "top3": self.top3,
                "confidence": self.confidence, "judged_by": self.judged_by, "reach": self.reach, "miss": self.miss}


@dataclass
class EvalReport:
    corpus: str
    split: str = ""
    cases: list[CaseResult] = field(default_factory=list)
    excluded: list[dict] = field(default_factory=list)  # test cases whose thread an entry cites

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
        """Healthy / unexplained cases that got a diagnosis (their right answer is unknown)."""
        return [c for c in self.cases if c.kind != "positive" and not c.top1]

    @property
    def misses(self) -> list[CaseResult]:
        return [c for c in self._positives() if not c.top1]

    def high_confidence(self, threshold: float = HIGH_CONFIDENCE) -> tuple[int, int]:
        """(right, answered) over the answers given with confidence >= threshold."""
        given = [c for c in self.cases if c.answered and c.confidence >= threshold]
        return sum(c.kind == "positive" and c.top1 for c in given), len(given)

    def reliability(self) -> list[dict]:
        out = []
        for lo, hi in BUCKETS:
            given = [c for c in self.cases if c.answered and lo <= c.confidence < hi]
            right = sum(c.kind == "positive" and c.top1 for c in given)
            out.append({
                "bucket": f"{lo:.1f}-{min(hi, 1.0):.1f}",
                "answers": len(given),
                "right": right,
                "accuracy": round(right / len(given), 4) if given else None,
                "mean_confidence": round(sum(c.confidence for c in given) / len(given), 4) if given else None,
            })
        return out

    def reach(self) -> dict:
        """Positives per reach (named / own / none) and top-1 over the named ones."""
        pos = self._positives()
        named = [c for c in pos if c.reach == "named"]
        right = sum(c.top1 for c in named)
        return {"named": len(named), "own": sum(c.reach == "own" for c in pos), "none": sum(c.reach == "none" for c in pos),
                "top1_named_correct": right, "top1_named": round(right / len(named), 4) if named else None,
                "named_misses": {k: sum(c.miss == k for c in named) for k in MISS_CLASSES}}

    def to_dict(self) -> dict:
        pos = self._positives()
        right_hi, given_hi = self.high_confidence()
        abstain = [c for c in self.cases if c.kind != "positive"]
        return {
            "corpus": self.corpus,
            "split": self.split,
            "positives": len(pos),
            "negatives_and_unknown": len(abstain),
            "top1": round(self.top1, 4),
            "top3": round(self.top3, 4),
            "top1_correct": sum(c.top1 for c in pos),
            "top3_correct": sum(c.top3 for c in pos),
            "unknown_on_positives": sum(not c.answered for c in pos),
            "reach": self.reach(),
            "high_confidence": {"threshold": HIGH_CONFIDENCE, "answers": given_hi, "right": right_hi,
                                "precision": round(right_hi / given_hi, 4) if given_hi else None},
            "false_diagnoses": len(self.false_positives),
            "healthy": sum(c.kind in ("healthy", "negative") for c in self.cases),
            "false_diagnoses_healthy": sum(c.kind in ("healthy", "negative") for c in self.false_positives),
            "reliability": self.reliability(),
            "excluded": list(self.excluded),
            "false_positives": [c.to_dict() for c in self.false_positives],
            "misses": [c.to_dict() for c in self.misses],
            "cases": [c.to_dict() for c in self.cases],
        }


def _right_entry(entry, wanted: set[str], cause: str) -> str:
    """'expected' / 'cause' when this entry is a right answer for the case, else ''."""
    if {entry.id, *entry.aliases} & wanted:
        return "expected"
    if cause and cause in entry.causes:
        return "cause"
    return ""


def _right(m: Match, wanted: set[str], cause: str) -> str:
    return _right_entry(m.entry, wanted, cause)


def score_case(diag: Diagnosis, kind: str, wanted: set[str], cause: str = "") -> tuple[bool, bool]:
    top1, top3, _ = judge(diag, kind, wanted, cause)
    return top1, top3


def judge(diag: Diagnosis, kind: str, wanted: set[str], cause: str = "") -> tuple[bool, bool, str]:
    if kind != "positive":
        ok = diag.status == "unknown"
        return ok, ok, "unknown" if ok else ""
    verdicts = [_right(m, wanted, cause) for m in diag.matches[:3]]
    top1 = bool(verdicts) and bool(verdicts[0])
    return top1, any(verdicts), next((v for v in verdicts if v), "")


def cited_threads(kb: CompiledKB) -> dict[str, list[str]]:
    """canonical thread -> ids of the entries whose `references` cite it."""
    out: dict[str, list[str]] = {}
    for entry in kb.entries:
        for ref in entry.references:
            if "/" in ref:
                out.setdefault(canonical_thread(ref), []).append(entry.id)
    return out


def own_entries(entries, case: CorpusCase) -> set[str]:
    """Ids of the entries written from this case: an example copied from its trace, or a
    reference to its thread (leave-source-out drops them before diagnosing the case)."""
    marker, name = f"-{case.id}.txt", case.trace.name
    own = set()
    for e in entries:
        if any(x.endswith(marker) or x.rsplit("/", 1)[-1] == name for x in e.examples):
            own.add(e.id)
        elif case.thread and any("/" in r and canonical_thread(r) == case.thread for r in e.references):
            own.add(e.id)
    return own


def naming_entries(entries, case: CorpusCase) -> set[str]:
    """Ids of the entries that would be a right answer for the case (the rule `judge` applies)."""
    return {e.id for e in entries if _right_entry(e, case.wanted, case.cause)}


def reach_of(entries, case: CorpusCase, dropped: set[str] = frozenset()) -> str:
    """named / own / none for a positive case diagnosed without the `dropped` entries."""
    if case.kind != "positive":
        return ""
    naming = naming_entries(entries, case)
    if naming - set(dropped):
        return "named"
    return "own" if naming else "none"


def _without_own(kb: CompiledKB, case: CorpusCase, own: set[str] | None = None) -> CompiledKB:
    own = own_entries(kb.entries, case) if own is None else own
    if not own:
        return kb
    reduced = CompiledKB.build([e for e in kb.entries if e.id not in own])
    reduced.calibration = kb.calibration
    return reduced


def miss_class(kb: CompiledKB, hits, diag: Diagnosis, case: CorpusCase) -> str:
    """Why a named positive missed top-1 (MISS_CLASSES); `hits`: the scan's signature hits."""
    naming = naming_entries(kb.entries, case)
    if any(m.entry.id in naming for m in diag.matches[1:]):
        return "outranked"
    if any(m.entry.id in naming and "calibrated" in m.explain for m in diag.near_misses):
        return "abstained"
    fired = {kb.entries[ei].id for ei in hits}
    if naming & fired:
        return "weak"  # (a firm match the calibration dropped, shown past the near misses, counts here too)
    return "no_signature"


def run_case(kb: CompiledKB, case: CorpusCase, env: dict[str, str] | None = None,
             reach: str | None = None) -> tuple[CaseResult, Diagnosis]:
    """`reach`: the case's reach when the caller dropped entries from `kb` (default: computed on `kb`).
    Diagnosed as `diagnose_stream` does for a stream (one process), keeping the signature hits
    for the miss class."""
    from porter.kb.matcher import _without_private_keys, decide, scan
    from porter.kb.normalize import iter_batches

    with case.trace.open("rb") as fh:
        hits, signals = scan(kb, _without_private_keys(iter_batches(fh)))
    diag = decide(kb, hits, signals, env, 3)
    top1, top3, how = judge(diag, case.kind, case.wanted, case.cause)
    reach = reach_of(kb.entries, case) if reach is None else reach
    miss = miss_class(kb, hits, diag, case) if reach == "named" and not top1 else ""
    result = CaseResult(case.id, case.kind, case.expected, tuple(m.entry.id for m in diag.matches), top1, top3,
                        diag.matches[0].confidence if diag.matches else 0.0, case.split, case.cause, how, reach, miss)
    return result, diag


def evaluate_cases(kb: CompiledKB, cases: list[CorpusCase], corpus: str, env: dict[str, str] | None = None,
                   leave_source_out: bool = False) -> dict[str, EvalReport]:
    """One report per split, in the order dev, test, then any other split names. With
    `leave_source_out`, each case is diagnosed without the entries written from it (see
    `own_entries`): the figure says how the KB does on traces it was not written from."""
    from porter.kb.corpus import effective_split

    cited = cited_threads(kb)
    reports: dict[str, EvalReport] = {}
    for case in cases:
        split = effective_split(case)
        report = reports.setdefault(split, EvalReport(corpus, split))
        citing = cited.get(case.thread) if case.thread else None
        if citing and split == "test":
            report.excluded.append({"id": case.id, "thread": case.thread, "cited_by": sorted(set(citing))})
            continue
        own = own_entries(kb.entries, case) if leave_source_out else set()
        report.cases.append(run_case(_without_own(kb, case, own), case, env, reach_of(kb.entries, case, own))[0])
    order = {"dev": 0, "test": 1}
    return dict(sorted(reports.items(), key=lambda kv: (order.get(kv[0], 2), kv[0])))


def evaluate(kb: CompiledKB, corpus: Path, env: dict[str, str] | None = None) -> EvalReport:
    """All cases of a corpus in one report (index.yaml corpora: one split, the directory name)."""
    corpus = Path(corpus)
    reports = evaluate_cases(kb, load_corpus(corpus), str(corpus), env)
    merged = EvalReport(str(corpus), "+".join(reports))
    for r in reports.values():
        merged.cases.extend(r.cases)
        merged.excluded.extend(r.excluded)
    return merged


def evaluate_splits(kb: CompiledKB, corpus: Path, env: dict[str, str] | None = None, splits: tuple[str, ...] = (),
                    leave_source_out: bool = False) -> dict:
    """The `porter kb eval` payload: per-split reports plus the corpus' collection problems."""
    corpus = Path(corpus)
    cases = load_corpus(corpus)
    if splits:
        from porter.kb.corpus import effective_split

        cases = [c for c in cases if effective_split(c) in splits]
    reports = evaluate_cases(kb, cases, str(corpus), env, leave_source_out)
    return {"corpus": str(corpus), "leave_source_out": leave_source_out,
            "splits": {name: r.to_dict() for name, r in reports.items()}, "split_problems": split_problems(cases)}
