"""Score knowledge-base entries against a trace.

Order of evidence:
1. exact signatures (literal substring of a clean line, or regex search on the de-prefixed
   line), combined per entry with the all/any rule and a noisy-or of the item weights;
2. small boosts: the entry's layer is hinted by frame packages / error codes; the installed
   versions (from `--env`) fall inside `applies_to` (outside: the entry is demoted);
3. fuzzy similarity (rapidfuzz) of the extracted error texts against `symptoms` and titles,
   only when no signature reaches the threshold, and capped below signature confidence.

A line is checked only against signatures whose key token occurs in it (a token index over the
literals and the literal runs of regexes), which keeps a 50 MB log fast.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from typing import BinaryIO, Iterable, Mapping

from porter.kb.extract import Extractor, Signals
from porter.kb.normalize import fuzzy_form, iter_batches, strip_prefix
from porter.kb.schema import KBEntry

MATCH_THRESHOLD = 0.5  # signature confidence at which an entry is a diagnosis
FUZZY_MAX_CONFIDENCE = 0.55  # fuzzy evidence never outranks a firm signature hit
FUZZY_MATCH_SCORE = 93.0  # rapidfuzz score (0-100) at which a fuzzy hit counts as a match
FUZZY_NEAR_SCORE = 60.0  # shown as a near miss for unknown traces
CLOSE_MARGIN = 0.1  # top two within this: show discriminators
LAYER_BOOST = 0.05
VERSION_BOOST = 0.02
VERSION_DEMOTE = 0.4  # multiply confidence when the installed version is outside applies_to
MAX_HITS_PER_SIGNATURE = 3

_TOKEN = re.compile(r"\w+")
# Frequent words make poor index keys (they would send every line to the checker).
_COMMON = frozenset(
    """error errors exception import module named from cannot name line file object has attribute
    failed the not for and with this that none true false self type value runtime warning info
    return call most recent last traceback main python site packages lib usr local""".split()
)


def normalise_package(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# -- index keys ----------------------------------------------------------------------------------
def _interior_tokens(text: str) -> list[str]:
    """Tokens of `text` that must appear as whole tokens in any line containing `text`."""
    tokens = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    out = []
    for tok, start, end in tokens:
        if start == 0 and (text[:1].isalnum() or text[:1] == "_"):
            continue  # may be the tail of a longer word in the line
        if end == len(text) and (text[-1:].isalnum() or text[-1:] == "_"):
            continue  # may be the head of a longer word
        out.append(tok)
    return out


def _best_key(tokens: Iterable[str]) -> str | None:
    """The rarest-looking token: long and not a common word (a common one still beats no key)."""
    best, best_score = None, -100.0
    for tok in tokens:
        if len(tok) < 3 or (tok.isdigit() and len(tok) < 4):
            continue
        score = len(tok) - (20 if tok.lower() in _COMMON else 0)
        if score > best_score:
            best, best_score = tok, score
    return best


def _parse(pattern: str):
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python < 3.11
        import sre_parse  # type: ignore[no-redef]
    try:
        return sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - invalid patterns are reported by lint
        return None


def _constants():
    try:
        from re import _constants as C  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover
        import sre_constants as C  # type: ignore[no-redef]
    return C


def _seq_runs(seq, C) -> list[str]:
    """Literal runs that every match of the sequence contains (groups contribute their own)."""
    runs: list[str] = []
    current: list[str] = []
    for op, arg in seq:
        if op is C.LITERAL:
            current.append(chr(arg))
            continue
        if current:
            runs.append("".join(current))
            current = []
        if op is C.SUBPATTERN and not (arg[1] & re.IGNORECASE):
            inner = arg[-1]
            if not any(o is C.BRANCH for o, _ in inner):
                runs.extend(_seq_runs(inner, C))
    if current:
        runs.append("".join(current))
    return runs


def regex_literal_runs(pattern: str) -> list[str] | None:
    """Literal strings every match of `pattern` must contain (None when unknown or case-insensitive)."""
    parsed = _parse(pattern)
    if parsed is None or parsed.state.flags & re.IGNORECASE:
        return None
    return _seq_runs(parsed, _constants())


def _seq_needles(seq, C, depth: int = 0) -> tuple[str, ...]:
    """Needles for a parsed sequence: its longest literal run, else the alternatives of a group."""
    runs = _seq_runs(seq, C)
    best = max(runs, key=len) if runs else ""
    if len(best) >= 4 or depth > 4:
        return (best,) if len(best) >= 3 else ()
    for op, arg in seq:
        inner = None
        if op is C.BRANCH:
            inner = arg[1]
        elif op is C.SUBPATTERN and not (arg[1] & re.IGNORECASE):
            body = list(arg[-1])
            if len(body) == 1 and body[0][0] is C.BRANCH:
                inner = body[0][1][1]
        if inner is None:
            continue
        needles: list[str] = []
        for alt in inner:
            alt_needles = _seq_needles(list(alt), C, depth + 1)
            if not alt_needles:
                break
            needles.extend(alt_needles)
        else:
            return tuple(dict.fromkeys(needles))
    return (best,) if len(best) >= 3 else ()


def regex_needles(pattern: str) -> tuple[str, ...]:
    """Substrings of which at least one occurs in any line the regex matches (() when unknown)."""
    parsed = _parse(pattern)
    if parsed is None or parsed.state.flags & re.IGNORECASE:
        return ()
    C = _constants()
    seq = [(op, arg) for op, arg in parsed if op is not C.AT]
    while len(seq) == 1 and seq[0][0] is C.SUBPATTERN and not (seq[0][1][1] & re.IGNORECASE):
        seq = [(op, arg) for op, arg in seq[0][1][-1] if op is not C.AT]
    return _seq_needles(seq, C)


def signature_needles(kind: str, pattern: str) -> tuple[str, ...]:
    return (pattern,) if kind == "literal" else regex_needles(pattern)


def signature_key(kind: str, pattern: str) -> str | None:
    """The index token of a single-needle signature (None: multi-needle or keyless)."""
    keys = needle_keys(signature_needles(kind, pattern))
    return keys[0] if keys and len(keys) == 1 else None


def needle_keys(needles: tuple[str, ...]) -> list[str] | None:
    """One index token per needle, or None when some needle has no whole-token key."""
    if not needles:
        return None
    keys = []
    for needle in needles:
        key = _best_key(_interior_tokens(needle))
        if key is None:
            return None
        keys.append(key)
    return list(dict.fromkeys(keys))


# -- the compiled knowledge base ------------------------------------------------------------------
class _Sig:
    """A signature prepared for the line loop. The regex is compiled on first use."""

    __slots__ = ("ei", "si", "kind", "pattern", "needles", "_rx", "_compiled")

    def __init__(self, ei: int, si: int, kind: str, pattern: str, needles: tuple[str, ...]) -> None:
        self.ei, self.si, self.kind, self.pattern, self.needles = ei, si, kind, pattern, needles
        self._rx: re.Pattern[str] | None = None
        self._compiled = False

    def hits(self, clean: str, text: str) -> bool:
        if self.kind == "literal":
            return self.pattern in clean
        for needle in self.needles:
            if needle in clean:
                break
        else:
            if self.needles:
                return False
        if not self._compiled:
            self._compiled = True
            try:
                self._rx = re.compile(self.pattern)
            except re.error:
                self._rx = None  # lint reports it; matching skips it
        return self._rx is not None and self._rx.search(text) is not None


@dataclass
class CompiledKB:
    entries: tuple[KBEntry, ...]
    sigs: list[_Sig]
    index: dict[str, list[int]]  # key token -> positions in `sigs`
    always: list[int]  # signatures without a key token: checked (needle first) on every line
    fuzzy_targets: list[tuple[int, str]]  # (entry index, fuzzy form of a symptom or title)

    @classmethod
    def build(cls, entries: Iterable[KBEntry], plan: dict | None = None) -> "CompiledKB":
        """`plan` is the output of `plan()` for the same entries (from the cache), or None."""
        entries = tuple(entries)
        if plan is None:
            plan = cls.plan(entries)
        sigs = [_Sig(ei, si, entries[ei].signatures[si].kind, entries[ei].signatures[si].pattern, tuple(needles))
                for ei, si, needles, _ in plan["sigs"]]
        index: dict[str, list[int]] = {}
        always: list[int] = []
        for pos, (_, _, _, keys) in enumerate(plan["sigs"]):
            if keys:
                for key in keys:
                    index.setdefault(key, []).append(pos)
            else:
                always.append(pos)
        return cls(entries, sigs, index, always, [tuple(t) for t in plan["fuzzy"]])

    @staticmethod
    def plan(entries: Iterable[KBEntry]) -> dict:
        """Plain data (cacheable): per signature its needles and index keys; fuzzy forms."""
        sigs, fuzzy = [], []
        for ei, entry in enumerate(entries):
            for si, sig in enumerate(entry.signatures):
                needles = signature_needles(sig.kind, sig.pattern)
                sigs.append((ei, si, needles, needle_keys(needles) or []))
            for text in (*entry.symptoms, entry.title):
                form = fuzzy_form(text)
                if len(form) >= 12:
                    fuzzy.append((ei, form))
        return {"sigs": sigs, "fuzzy": fuzzy}

    def by_id(self, entry_id: str) -> KBEntry | None:
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        return None


# -- results --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MatchedLine:
    line: int
    text: str
    signature: str
    kind: str  # literal | regex | fuzzy
    weight: float

    def to_dict(self) -> dict:
        return {"line": self.line, "text": self.text, "signature": self.signature, "kind": self.kind, "weight": self.weight}


@dataclass
class Match:
    entry: KBEntry
    confidence: float
    method: str  # signature | fuzzy
    lines: list[MatchedLine]
    explain: dict = field(default_factory=dict)
    version_notes: list[str] = field(default_factory=list)

    @property
    def specificity(self) -> int:
        return sum(len(m.signature) for m in self.lines)


@dataclass
class Diagnosis:
    status: str  # match | unknown
    matches: list[Match]  # top-k above the threshold (empty when unknown)
    near_misses: list[Match]  # best candidates below the threshold
    signals: Signals
    close: bool  # the top two are within CLOSE_MARGIN

    @property
    def top(self) -> Match | None:
        return self.matches[0] if self.matches else None


# -- scanning -------------------------------------------------------------------------------------
def _dedupe(needles) -> tuple[str, ...]:
    """Drop needles that contain a shorter needle (the shorter one already finds their lines)."""
    kept: list[str] = []
    for needle in sorted(set(needles), key=len):
        if not any(k in needle for k in kept):
            kept.append(needle)
    return tuple(kept)


def _prefilter_needles(kb: CompiledKB) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(needles for the case-folded text, needles for the original text); None: read every line.

    The extractor's words (error, failed, Traceback, ...) are searched case-folded; a signature
    needle that contains one of them, case-folded, is then redundant and dropped, so most
    signatures cost nothing here. The rest are searched case-sensitively.
    """
    cached = getattr(kb, "_needles", False)
    if cached is not False:
        return cached
    from porter.kb.extract import EXTRACT_NEEDLES

    if any(not sig.needles for sig in kb.sigs):
        kb._needles = None  # a regex without a literal anchor: every line must be searched
        return None
    folded = _dedupe(n.lower() for n in EXTRACT_NEEDLES)
    exact = _dedupe(n for sig in kb.sigs for n in sig.needles if not any(f in n.lower() for f in folded))
    kb._needles = (folded, exact)
    return kb._needles


def _candidate_lines(text: str, ends: list[int], needles: tuple[str, ...]) -> set[int]:
    """Indexes of the lines of `text` that contain any needle (str.find runs in C)."""
    found: set[int] = set()
    find, n = text.find, len(ends)
    for needle in needles:
        pos = find(needle)
        while pos >= 0:
            i = bisect_right(ends, pos)
            found.add(i)
            if i + 1 >= n:
                break
            pos = find(needle, ends[i])
    return found


def scan(kb: CompiledKB, batches: Iterable[list[str]]) -> tuple[dict[int, dict[int, list[tuple[int, str]]]], Signals]:
    """One pass over batches of clean lines: signature hits per entry/signature, and the signals.

    Per batch, lines that contain none of the prefilter needles (signature keys and anchors,
    error words, traceback markers) are skipped while no error block is open; that is what
    keeps a 50 MB log of mostly healthy output fast.
    """
    hits: dict[int, dict[int, list[tuple[int, str]]]] = {}
    extractor = Extractor()
    feed = extractor.feed
    index, sigs = kb.index, kb.sigs
    always_needles = [(needle, pos) for pos in kb.always for needle in sigs[pos].needles]
    always_bare = [pos for pos in kb.always if not sigs[pos].needles]  # regexes with no literal anchor
    keys = index.keys()
    findall = _TOKEN.findall
    needles = _prefilter_needles(kb)
    base = 0  # line number before this batch

    for lines in batches:
        if needles is None:
            wanted: set[int] | range = range(len(lines))  # noqa: F841 - used below
        else:
            ends = list(accumulate(len(line) + 1 for line in lines))  # offset just past each line's "\n"
            text = "\n".join(lines)
            wanted = _candidate_lines(text.lower(), ends, needles[0])
            wanted |= _candidate_lines(text, ends, needles[1])
        last = -1
        for i, line in enumerate(lines):
            if i not in wanted and extractor.idle:
                continue
            if i - last > 1 and extractor.idle:
                for j in range(max(last + 1, i - 3), i):  # context for a block that may open here
                    extractor.note(strip_prefix(lines[j].rstrip()))
            last = i
            number = base + i + 1
            clean = line.rstrip()
            if not clean:
                feed(number, clean, ())
                continue
            text = strip_prefix(clean)
            tokens = findall(clean)
            candidates: set[int] | None = None
            if not keys.isdisjoint(tokens):
                candidates = set()
                for tok in tokens:
                    refs = index.get(tok)
                    if refs:
                        candidates.update(refs)
            for needle, pos in always_needles:  # keyless signatures: a substring test first
                if needle in clean:
                    if candidates is None:
                        candidates = set()
                    candidates.add(pos)
            if always_bare:
                candidates = (candidates or set()) | set(always_bare)
            if candidates:
                for pos in candidates:
                    sig = sigs[pos]
                    if sig.hits(clean, text):
                        slot = hits.setdefault(sig.ei, {}).setdefault(sig.si, [])
                        if len(slot) < MAX_HITS_PER_SIGNATURE:
                            slot.append((number, text))
            feed(number, text, tokens)
        base += len(lines)
        extractor.seen(base)
    return hits, extractor.signals()


def _version_check(entry: KBEntry, env: Mapping[str, str]) -> tuple[float, list[str]]:
    """(multiplier, notes) from comparing installed versions with the entry's applies_to."""
    if not env or not entry.applies_to:
        return 1.0, []
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    factor, notes = 1.0, []
    for rng in entry.applies_to:
        installed = env.get(normalise_package(rng.package))
        if not installed:
            continue
        try:
            inside = SpecifierSet(rng.versions).contains(Version(installed), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            continue
        if inside:
            factor = max(factor, 1.0)
            notes.append(f"{rng.package} {installed} is within {rng.versions}")
        else:
            factor = min(factor, VERSION_DEMOTE)
            notes.append(f"{rng.package} {installed} is outside {rng.versions}: demoted")
    return factor, notes


def _score_signatures(
    kb: CompiledKB, hits: Mapping[int, Mapping[int, list[tuple[int, str]]]], signals: Signals, env: Mapping[str, str]
) -> list[Match]:
    out: list[Match] = []
    hinted = set(signals.layer_hints[:3])
    for ei, sig_hits in hits.items():
        entry = kb.entries[ei]
        sigs = entry.signatures
        explain: dict = {"hit": sorted(sig_hits), "of": len(sigs), "match": entry.match}
        if entry.match == "all":
            missing = [i for i, s in enumerate(sigs) if s.required and i not in sig_hits]
            if missing:
                explain["missing_required"] = missing
                partial = 1.0
                for i in sig_hits:
                    partial *= 1.0 - sigs[i].weight
                # a partial all-match is only ever a near miss
                confidence = min(MATCH_THRESHOLD - 0.05, (1.0 - partial) * 0.5)
                explain["partial"] = True
                out.append(Match(entry, round(confidence, 4), "signature", _lines(entry, sig_hits), explain))
                continue
        miss = 1.0
        for i in sig_hits:
            miss *= 1.0 - sigs[i].weight
        base = 1.0 - miss
        explain["noisy_or"] = round(base, 4)
        confidence = base
        if entry.layer in hinted:
            confidence += LAYER_BOOST * (1.0 - confidence) + 0.001
            explain["layer_boost"] = entry.layer
        factor, notes = _version_check(entry, env)
        if factor < 1.0:
            confidence *= factor
        elif notes:
            confidence += VERSION_BOOST * (1.0 - confidence)
        if notes:
            explain["versions"] = notes
        out.append(Match(entry, round(min(confidence, 0.99), 4), "signature", _lines(entry, sig_hits), explain, notes))
    return out


def _lines(entry: KBEntry, sig_hits: Mapping[int, list[tuple[int, str]]]) -> list[MatchedLine]:
    lines = []
    for si in sorted(sig_hits):
        sig = entry.signatures[si]
        for number, text in sig_hits[si]:
            lines.append(MatchedLine(number, text, sig.pattern, sig.kind, sig.weight))
    lines.sort(key=lambda m: m.line)
    return lines


def _fuzzy(kb: CompiledKB, signals: Signals, env: Mapping[str, str], exclude: set[int]) -> list[Match]:
    """Best fuzzy score per entry from the error texts against symptoms and titles."""
    texts = signals.error_texts(limit=16)
    if not texts or not kb.fuzzy_targets:
        return []
    from rapidfuzz import fuzz, process

    choices = [form for _, form in kb.fuzzy_targets]
    best: dict[int, tuple[float, str]] = {}
    for text in texts:
        query = fuzzy_form(text)
        if len(query) < 20:
            continue
        for _, score, idx in process.extract(query, choices, scorer=fuzz.token_sort_ratio, score_cutoff=FUZZY_NEAR_SCORE, limit=5):
            ei = kb.fuzzy_targets[idx][0]
            if ei not in exclude and score > best.get(ei, (0.0, ""))[0]:
                best[ei] = (score, text)
        if len(query) >= 30:
            for _, score, idx in process.extract(query, choices, scorer=fuzz.partial_ratio, score_cutoff=FUZZY_NEAR_SCORE, limit=5):
                ei = kb.fuzzy_targets[idx][0]
                # partial alignment of a long query inside a symptom: worth a little less
                score = score * 0.97 if len(choices[idx]) >= len(query) else score * 0.9
                if ei not in exclude and score > best.get(ei, (0.0, ""))[0]:
                    best[ei] = (score, text)
    out = []
    for ei, (score, text) in best.items():
        entry = kb.entries[ei]
        confidence = FUZZY_MAX_CONFIDENCE * score / 100.0
        if score < FUZZY_MATCH_SCORE:
            confidence = min(confidence, MATCH_THRESHOLD - 0.05)
        factor, notes = _version_check(entry, env)
        confidence *= factor
        line = next((e.line for e in signals.exceptions if e.text == text), 0)
        out.append(
            Match(
                entry,
                round(confidence, 4),
                "fuzzy",
                [MatchedLine(line, text, "symptoms", "fuzzy", 0.0)],
                {"fuzzy_score": round(score, 1)},
                notes,
            )
        )
    return out


def _rank_key(m: Match) -> tuple:
    return (-m.confidence, -len(m.lines), -m.specificity, m.entry.id)


def decide(kb: CompiledKB, hits, signals: Signals, env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    env = dict(env or {})
    candidates = sorted(_score_signatures(kb, hits, signals, env), key=_rank_key)
    firm = [m for m in candidates if m.confidence >= MATCH_THRESHOLD]
    near = [m for m in candidates if m.confidence < MATCH_THRESHOLD]
    if not firm:
        fuzzy = sorted(_fuzzy(kb, signals, env, exclude=set()), key=_rank_key)
        firm = [m for m in fuzzy if m.confidence >= MATCH_THRESHOLD]
        near = sorted(near + [m for m in fuzzy if m.confidence < MATCH_THRESHOLD], key=_rank_key)
    matches = firm[: max(1, top)]
    close = len(firm) >= 2 and firm[0].confidence - firm[1].confidence <= CLOSE_MARGIN
    return Diagnosis(
        status="match" if matches else "unknown",
        matches=matches,
        near_misses=near[: max(3, top)],
        signals=signals,
        close=close,
    )


def diagnose_stream(kb: CompiledKB, stream: BinaryIO, env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    hits, signals = scan(kb, iter_batches(stream))
    return decide(kb, hits, signals, env, top)


def diagnose_text(kb: CompiledKB, text: str, env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    import io

    return diagnose_stream(kb, io.BytesIO(text.encode("utf-8", "surrogatepass")), env, top)
