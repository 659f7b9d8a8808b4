"""Calibrated confidence: P(the top answer is right | the evidence), fitted on the dev split.

The author-assigned signature weights say how specific a line is; they are not probabilities.
The reported confidence is a logistic model over evidence features of the top match (its
weight-based score, how many signature items fired, how long the matched text is, how many
entries compete and by what margin, whether the entry is a broad family or a generic symptom).

It is fitted *leave-source-out* on the dev split: for each dev case, the entries whose examples
were copied from that case are removed before diagnosing it, so the fit sees how the KB does on
a trace it was not written from, which is what a test or user trace is. The coefficient on the
score is constrained to be >= 0, so confidence never falls as the evidence gets stronger.
The fitted model is data (knowledge/calibration.json); without it, confidence is the raw score.
"""

from __future__ import annotations

import math
from pathlib import Path

from porter.record import record

FEATURES = ("score_logit", "items_hit", "matched_chars", "competitors", "margin", "structured", "max_weight", "entry_record", "bias")
ABSTAIN_BELOW = 0.3  # a match whose calibrated confidence is lower is reported as a near miss, not an answer
# Abstaining on a model fitted from a handful of cases would throw away right answers on noise:
# below this many fitting samples the calibrated confidence is reported but never abstains.
MIN_SAMPLES_TO_ABSTAIN = 100


def entry_record(right: int, answers: int) -> float:
    """Logit of the entry's smoothed precision on the fitting cases (0 for an entry never seen)."""
    p = (right + 1.0) / (answers + 2.0)
    return math.log(p / (1 - p))


@record(frozen=True)
class Calibration:
    weights: tuple[float, ...]
    fitted_on: str = ""
    samples: int = 0
    records: tuple[tuple[str, int, int], ...] = ()  # (entry id, right, answers) on the fitting cases

    def record_of(self, entry_id: str) -> float:
        for eid, right, answers in self.records:
            if eid == entry_id:
                return entry_record(right, answers)
        return 0.0

    def probability(self, x: list[float]) -> float:
        z = sum(w * v for w, v in zip(self.weights, x))
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def to_dict(self) -> dict:
        return {"features": list(FEATURES), "weights": [round(w, 5) for w in self.weights], "fitted_on": self.fitted_on,
                "samples": self.samples, "abstain_below": ABSTAIN_BELOW,
                "entry_records": {eid: [right, answers] for eid, right, answers in self.records}}


def features(match, firm: list, calibration: "Calibration | None" = None) -> list[float]:
    """Evidence features of `match` among the firm candidates `firm` (best first)."""
    raw = min(max(match.confidence, 1e-3), 0.999)
    hit = match.explain.get("hit") or []
    chars = sum(len(s.shown) for i, s in enumerate(match.entry.signatures) if i in hit) if hit else sum(len(m.signature) for m in match.lines)
    others = [m for m in firm if m is not match]
    margin = match.confidence - (others[0].confidence if others else 0.0)
    structured = any(s.form in ("template", "exception", "code", "frame") for i, s in enumerate(match.entry.signatures) if i in hit)
    max_weight = max((s.weight for s in match.entry.signatures), default=0.0)
    record = calibration.record_of(match.entry.id) if calibration is not None else 0.0
    return [math.log(raw / (1 - raw)), math.log1p(len(hit)), min(chars, 200) / 100.0, math.log1p(len(others)),
            margin, 1.0 if structured else 0.0, max_weight, record, 1.0]


def fit(samples: list[tuple[list[float], int]], l2: float = 0.05, steps: int = 4000, lr: float = 0.1) -> tuple[float, ...]:
    """Logistic regression by gradient descent; weight 0 (the score) is kept >= 0 (monotone)."""
    n = len(samples)
    w = [0.0] * len(FEATURES)
    w[0] = 1.0
    if not n:
        return tuple(w)
    for _ in range(steps):
        grad = [0.0] * len(w)
        for x, y in samples:
            z = sum(a * b for a, b in zip(w, x))
            p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
            for j, v in enumerate(x):
                grad[j] += (p - y) * v
        for j in range(len(w)):
            reg = l2 * w[j] if FEATURES[j] != "bias" else 0.0
            w[j] -= lr * (grad[j] / n + reg)
        w[0] = max(w[0], 0.0)
    return tuple(w)


def load(path: Path, cache_dir: Path | None = None) -> Calibration | None:
    """The fitted model at `path`, or None. With `cache_dir`, the parsed document is memoised there."""
    try:
        doc = _document(Path(path), cache_dir)
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("features") != list(FEATURES):
        return None  # fitted for another feature set: ignore rather than mis-apply
    weights = doc.get("weights")
    if not isinstance(weights, list) or len(weights) != len(FEATURES):
        return None
    records = tuple((str(k), int(v[0]), int(v[1])) for k, v in (doc.get("entry_records") or {}).items()
                    if isinstance(v, list) and len(v) == 2)
    return Calibration(tuple(float(v) for v in weights), str(doc.get("fitted_on", "")), int(doc.get("samples", 0)), records)


def _document(path: Path, cache_dir: Path | None) -> object:
    """calibration.json parsed, through a marshal memo keyed by its content
    (`<cache_dir>/kb/calibration-*.marshal`): `import json` (its module compiles six regexes) was
    ~3 % of a warm text-mode `porter diagnose`, which needs json for nothing else."""
    from porter import marshalmemo

    raw = path.read_bytes()
    memo = Path(cache_dir) / "kb" / f"calibration-{marshalmemo.content_tag(raw)}.marshal" if cache_dir is not None else None
    if memo is not None:
        doc = marshalmemo.load(memo)
        if type(doc) is dict:
            return doc
    import json

    doc = json.loads(raw.decode("utf-8"))
    if memo is not None:
        marshalmemo.store(memo, doc)
    return doc


def fit_model(samples: list[tuple[list[float], int, str]], fitted_on: str) -> Calibration:
    """Fit on (features without the record, right?, entry id). Each sample's entry record is
    computed leave-one-out (from the other samples), so the fit does not see its own outcome."""
    idx = FEATURES.index("entry_record")
    totals: dict[str, list[int]] = {}
    for _, y, eid in samples:
        t = totals.setdefault(eid, [0, 0])
        t[0] += y
        t[1] += 1
    rows = []
    for x, y, eid in samples:
        right, answers = totals[eid]
        x = list(x)
        x[idx] = entry_record(right - y, answers - 1)
        rows.append((x, y))
    records = tuple(sorted((eid, t[0], t[1]) for eid, t in totals.items()))
    return Calibration(fit(rows), fitted_on, len(samples), records)


def calibration_path(patterns_dir: Path) -> Path:
    return Path(patterns_dir).parent / "calibration.json"


def leave_source_out_samples(entries: list, cases: list) -> tuple[list[tuple[list[float], int, str]], list[dict]]:
    """(features, right?) of the top answer for each case, diagnosed by the KB without the
    entries whose examples were copied from that case; and a per-case record."""
    from porter.kb.evaluate import judge, own_entries
    from porter.kb.index import CompiledKB
    from porter.kb.matcher import diagnose_stream

    full = CompiledKB.build(entries)
    samples, records = [], []
    for case in cases:
        own = own_entries(entries, case)
        kb = full if not own else CompiledKB.build([e for e in entries if e.id not in own])
        with case.trace.open("rb") as fh:
            diag = diagnose_stream(kb, fh, top=3)
        if diag.top is None:
            records.append({"id": case.id, "left_out": sorted(own), "answer": None})
            continue
        top1, _, _ = judge(diag, case.kind, case.wanted, case.cause)
        samples.append((features(diag.top, diag.matches), int(top1), diag.top.entry.id))
        records.append({"id": case.id, "left_out": sorted(own), "answer": diag.top.entry.id, "score": diag.top.confidence, "right": top1})
    return samples, records
