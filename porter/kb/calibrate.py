"""Calibrated confidence: P(the top answer is right | the evidence), fitted on the dev split.

The author-assigned signature weights say how specific a line is; they are not probabilities.
The reported confidence is a logistic model over evidence features of the top match that carry
from one thread to another (no per-entry weight: an entry's record on the fitting cases says
nothing about a thread it has not seen): its weight-based score, how many signature items fired
and whether two required items held together (`conj`), whether a structured signature fired, how many other entries
fired and how many of them name the same cause (`agree`) or another one (`disagree`).

It is fitted *leave-source-out* on the dev split: for each dev case, the entries whose examples
were copied from that case are removed before diagnosing it, so the fit sees how the KB does on
a trace it was not written from, which is what a test or user trace is. The coefficient on the
score is constrained to be >= 0, so confidence never falls as the evidence gets stronger.
The fitted model is data (knowledge/calibration.json); without it, confidence is the raw score.

The L2 penalty is chosen by cross-validation over source threads (`choose_l2`): a penalty too
strong for the data squeezes every answer towards the base rate (right answers stay below 0.9,
wrong ones rise), one too weak fits noise; the fold log loss on threads the fit did not see
decides, the way a test thread is unseen.
"""

from __future__ import annotations

import math
from pathlib import Path

from porter.record import record

# No author weight of its own (an entry's strongest item, the strongest that fired): fitted on dev they came out
# negative, i.e. a high authored weight on a line said the answer is *less* often right, and a feature of evidence
# strength must not lower the confidence; the weight-based score carries them, kept monotone (see `fit`).
# Nor a feature of the log rather than of the match (whether it shows an exception or an error code at all): fitted on
# dev, "codes" came out strongly negative because dev's unexplained cases are CANN code dumps, a property of the corpus
# mix that moves with it (on the regression traces it abstained on right answers).
FEATURES = ("score_logit", "items_hit", "competitors", "structured", "agree", "disagree", "conj", "bias")
# other firm entries a feature looks at: the first ones in rank order (the fit sees the top answers of `top=TOP_SEEN`)
TOP_SEEN = 5
# a match whose calibrated confidence is lower is reported as a near miss, not an answer. 0.25 with the cross-thread
# features (refit s15): at 0.3 the seed corpus' one-line answers (calibrated 0.299 with an earlier feature set)
# abstained; dev leave-source-out with the final features at 0.25: top-1 69/337, false 39/194, healthy 0/20
ABSTAIN_BELOW = 0.25
# Abstaining on a model fitted from a handful of cases would throw away right answers on noise:
# below this many fitting samples the calibrated confidence is reported but never abstains.
MIN_SAMPLES_TO_ABSTAIN = 100
DEFAULT_L2 = 0.05
L2_GRID = (0.001, 0.003, 0.01, 0.03, 0.05, 0.1, 0.3)
CV_FOLDS = 5
MIN_SAMPLES_TO_CHOOSE_L2 = 40  # fewer: the folds are too small to rank penalties, keep DEFAULT_L2


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
    l2: float = DEFAULT_L2  # the penalty the weights were fitted with
    cv_log_loss: tuple[tuple[float, float], ...] = ()  # (l2, mean fold log loss) per candidate penalty

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
                "samples": self.samples, "abstain_below": ABSTAIN_BELOW, "l2": self.l2,
                "cv_log_loss": [[l2, round(loss, 5)] for l2, loss in self.cv_log_loss],
                "entry_records": {eid: [right, answers] for eid, right, answers in self.records}}


def features(match, firm: list) -> list[float]:
    """Evidence features of `match` among the firm candidates `firm` (best first). No feature reads the log
    itself or the entry's own record (see FEATURES): what carries across threads is how the evidence looks."""
    raw = min(max(match.confidence, 1e-3), 0.999)
    entry = match.entry
    hit = match.explain.get("hit") or []
    sigs = entry.signatures
    others = [m for m in firm[:TOP_SEEN] if m is not match]
    causes = set(entry.causes)
    agree = sum(1 for m in others if causes and causes & set(m.entry.causes))
    structured = any(sigs[i].form in ("template", "exception", "code", "frame") for i in hit if i < len(sigs))
    conj = entry.match == "all" and sum(1 for i in hit if i < len(sigs) and sigs[i].required) >= 2
    return [math.log(raw / (1 - raw)), math.log1p(len(hit)), math.log1p(len(others)), 1.0 if structured else 0.0,
            math.log1p(agree), math.log1p(len(others) - agree), 1.0 if conj else 0.0, 1.0]


def fit(samples: list[tuple[list[float], int]], l2: float = 0.05, steps: int = 4000, lr: float = 0.1) -> tuple[float, ...]:
    """Logistic regression by gradient descent; weight 0 (the score) is kept >= 0 (monotone)."""
    n = len(samples)
    w = [0.0] * len(FEATURES)
    w[0] = 1.0
    if not n:
        return tuple(w)
    from operator import mul

    xs = [x for x, _ in samples]
    ys = [y for _, y in samples]
    columns = list(zip(*xs))  # per feature, its value in every sample
    exp = math.exp
    penalised = [FEATURES[j] != "bias" for j in range(len(w))]
    for _ in range(steps):
        # residuals p - y of every sample, then one dot product per feature (same sums as per-sample loops)
        res = [1.0 / (1.0 + exp(-max(-30.0, min(30.0, sum(map(mul, w, x)))))) - y for x, y in zip(xs, ys)]
        for j, col in enumerate(columns):
            reg = l2 * w[j] if penalised[j] else 0.0
            w[j] -= lr * (sum(map(mul, res, col)) / n + reg)
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
    l2 = doc.get("l2", DEFAULT_L2)
    return Calibration(tuple(float(v) for v in weights), str(doc.get("fitted_on", "")), int(doc.get("samples", 0)), records,
                       float(l2) if isinstance(l2, (int, float)) else DEFAULT_L2)


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


def _with_records(samples: list[tuple[list[float], int, str]], totals: dict[str, list[int]],
                  own_outcome: bool) -> list[tuple[list[float], int]]:
    """Rows with the entry-record feature from `totals` when FEATURES has one (`own_outcome`: the
    sample is counted in `totals` and is taken out of its own record, leave-one-out); without it,
    the rows as they are."""
    if "entry_record" not in FEATURES:
        return [(list(x), y) for x, y, _ in samples]
    idx = FEATURES.index("entry_record")
    rows = []
    for x, y, eid in samples:
        right, answers = totals.get(eid, (0, 0))
        if own_outcome:
            right, answers = right - y, answers - 1
        x = list(x)
        x[idx] = entry_record(right, answers)
        rows.append((x, y))
    return rows


def _totals(samples: list[tuple[list[float], int, str]]) -> dict[str, list[int]]:
    totals: dict[str, list[int]] = {}
    for _, y, eid in samples:
        t = totals.setdefault(eid, [0, 0])
        t[0] += y
        t[1] += 1
    return totals


def _log_loss(pairs: list[tuple[float, int]]) -> float:
    """Summed log loss of (confidence, right?) pairs."""
    loss = 0.0
    for p, y in pairs:
        p = min(max(p, 1e-6), 1 - 1e-6)
        loss -= math.log(p) if y else math.log(1 - p)
    return loss


def fold_of(group: str, folds: int = CV_FOLDS) -> int:
    """A sample's fold, by its source thread: every case of one thread lands in the same fold."""
    import hashlib  # here, not at the top: a warm `porter diagnose` imports this module (OpenSSL start-up ~6 % of the call)

    return int(hashlib.sha256(group.encode()).hexdigest(), 16) % folds


def choose_l2(samples: list[tuple[list[float], int, str]], groups: list[str], grid: tuple[float, ...] = L2_GRID,
              folds: int = CV_FOLDS, steps: int = 4000) -> tuple[float, tuple[tuple[float, float], ...]]:
    """The penalty of `grid` with the lowest mean log loss on held-out folds (folds by `groups`,
    the source threads; each fold's entry records come from the other folds only). Ties and an
    unusable split (a fold empty) keep DEFAULT_L2."""
    fold = [fold_of(g, folds) for g in groups]
    used = sorted(set(fold))
    if len(samples) < MIN_SAMPLES_TO_CHOOSE_L2 or len(used) < 2:
        return DEFAULT_L2, ()
    losses = []
    for l2 in grid:
        predicted = _fold_predictions(samples, fold, l2, steps)
        total = 0.0
        for k in used:  # per fold, then across folds
            total += _log_loss([p for p, f in zip(predicted, fold) if f == k])  # type: ignore[misc]
        losses.append((l2, total / len(samples)))
    best = min(losses, key=lambda t: (round(t[1], 6), abs(math.log(t[0] / DEFAULT_L2))))
    return best[0], tuple(losses)


RELIABILITY_BUCKETS = ((0.0, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.01))


def out_of_fold(samples: list[tuple[list[float], int, str]], groups: list[str], l2: float = DEFAULT_L2,
                folds: int = CV_FOLDS, steps: int = 4000) -> list[tuple[float, int]]:
    """(confidence, right?) per sample from a model fitted on the other folds (folds by source
    thread, entry records from the other folds): what the confidence is worth on threads the fit
    never saw. The in-sample reliability of `kb eval` on dev is optimistic by construction."""
    predicted = _fold_predictions(samples, [fold_of(g, folds) for g in groups], l2, steps)
    return [o for o in predicted if o is not None]


def _fold_predictions(samples: list[tuple[list[float], int, str]], fold: list[int], l2: float,
                      steps: int) -> list[tuple[float, int] | None]:
    """Per sample, (confidence, right?) from a model fitted on the other folds with entry records
    from them; None where no other fold holds a sample."""
    out: list[tuple[float, int] | None] = [None] * len(samples)
    for k in sorted(set(fold)):
        train = [s for s, f in zip(samples, fold) if f != k]
        held = [i for i, f in enumerate(fold) if f == k]
        if not train:
            continue
        totals = _totals(train)
        model = Calibration(fit(_with_records(train, totals, own_outcome=True), l2=l2, steps=steps))
        for i, (x, y) in zip(held, _with_records([samples[i] for i in held], totals, own_outcome=False)):
            out[i] = (model.probability(x), y)
    return out


def reliability(pairs: list[tuple[float, int]]) -> list[dict]:
    """Answers, right and accuracy per confidence bucket."""
    rows = []
    for lo, hi in RELIABILITY_BUCKETS:
        got = [y for p, y in pairs if lo <= p < hi]
        rows.append({"bucket": f"{lo:.1f}-{min(hi, 1.0):.1f}", "answers": len(got), "right": sum(got),
                     "accuracy": round(sum(got) / len(got), 4) if got else None})
    return rows


def fit_model(samples: list[tuple[list[float], int, str]], fitted_on: str, groups: list[str] | None = None) -> Calibration:
    """Fit on (features without the record, right?, entry id). Each sample's entry record is
    computed leave-one-out (from the other samples), so the fit does not see its own outcome.
    `groups` (the samples' source threads): choose the L2 penalty by cross-validation over them
    (`choose_l2`); without them, DEFAULT_L2."""
    l2, cv = choose_l2(samples, groups) if groups is not None else (DEFAULT_L2, ())
    totals = _totals(samples)
    records = tuple(sorted((eid, t[0], t[1]) for eid, t in totals.items()))
    return Calibration(fit(_with_records(samples, totals, own_outcome=True), l2=l2), fitted_on, len(samples), records, l2, cv)


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
            diag = diagnose_stream(kb, fh, top=TOP_SEEN)
        if diag.top is None:
            records.append({"id": case.id, "thread": case.thread or case.id, "left_out": sorted(own), "answer": None})
            continue
        top1, _, _ = judge(diag, case.kind, case.wanted, case.cause)
        samples.append((features(diag.top, diag.matches), int(top1), diag.top.entry.id))
        records.append({"id": case.id, "thread": case.thread or case.id, "left_out": sorted(own), "answer": diag.top.entry.id, "score": diag.top.confidence, "right": top1})
    return samples, records
