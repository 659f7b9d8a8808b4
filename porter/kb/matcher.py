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
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable, Mapping

from porter.kb.extract import Extractor, Signals
from porter.kb.normalize import fuzzy_form, iter_lines, iter_text_lines, prepare
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
    best, best_score = None, -1.0
    for tok in tokens:
        if tok.isdigit() and len(tok) < 4:
            continue
        score = len(tok) - (10 if tok.lower() in _COMMON else 0)
        if score > best_score:
            best, best_score = tok, score
    return best if best is not None and best_score >= 3 else None


def regex_literal_runs(pattern: str) -> list[str] | None:
    """Literal strings every match of `pattern` must contain (None when unknown or case-insensitive)."""
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
        from re import _constants as C  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - older layout
        import sre_constants as C  # type: ignore[no-redef]
        import sre_parse  # type: ignore[no-redef]
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # noqa: BLE001 - invalid patterns are reported by lint
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    runs: list[str] = []
    current: list[str] = []
    for op, arg in parsed:
        if op is C.LITERAL:
            current.append(chr(arg))
            continue
        if current:
            runs.append("".join(current))
            current = []
        if op is C.SUBPATTERN and arg[-1] is not None:
            # a group without alternation contributes its own literal runs (as separate runs)
            sub_flags = arg[1] if len(arg) > 1 else 0
            if sub_flags & re.IGNORECASE:
                continue
            inner = "".join(chr(a) for o, a in arg[-1] if o is C.LITERAL) if all(o is C.LITERAL for o, _ in arg[-1]) else None
            if inner:
                runs.append(inner)
    if current:
        runs.append("".join(current))
    return runs


def signature_key(kind: str, pattern: str) -> str | None:
    if kind == "literal":
        return _best_key(_interior_tokens(pattern))
    runs = regex_literal_runs(pattern)
    if not runs:
        return None
    keys = [k for k in (_best_key(_interior_tokens(run)) for run in runs) if k]
    return max(keys, key=lambda k: (k.lower() not in _COMMON, len(k))) if keys else None


# -- the compiled knowledge base ------------------------------------------------------------------
@dataclass
class CompiledKB:
    entries: tuple[KBEntry, ...]
    index: dict[str, list[tuple[int, int]]]  # key token -> [(entry index, signature index)]
    always: list[tuple[int, int]]  # signatures without a usable key: checked on every line
    fuzzy_targets: list[tuple[int, str]]  # (entry index, fuzzy form of a symptom or title)
    _regex: dict[tuple[int, int], re.Pattern[str] | None] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, entries: Iterable[KBEntry]) -> "CompiledKB":
        entries = tuple(entries)
        index: dict[str, list[tuple[int, int]]] = {}
        always: list[tuple[int, int]] = []
        fuzzy_targets: list[tuple[int, str]] = []
        for ei, entry in enumerate(entries):
            for si, sig in enumerate(entry.signatures):
                key = signature_key(sig.kind, sig.pattern)
                if key is None:
                    always.append((ei, si))
                else:
                    index.setdefault(key, []).append((ei, si))
            for text in (*entry.symptoms, entry.title):
                form = fuzzy_form(text)
                if len(form) >= 12:
                    fuzzy_targets.append((ei, form))
        return cls(entries, index, always, fuzzy_targets)

    def by_id(self, entry_id: str) -> KBEntry | None:
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        return None

    def regex(self, ei: int, si: int) -> re.Pattern[str] | None:
        """Compile on first use: most regexes never see a line with their key token."""
        key = (ei, si)
        if key not in self._regex:
            try:
                self._regex[key] = re.compile(self.entries[ei].signatures[si].pattern)
            except re.error:
                self._regex[key] = None  # lint reports it; matching skips it
        return self._regex[key]


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
def scan(kb: CompiledKB, lines: Iterable[str]) -> tuple[dict[int, dict[int, list[tuple[int, str]]]], Signals]:
    """One pass: signature hits per entry/signature, and the extracted signals."""
    hits: dict[int, dict[int, list[tuple[int, str]]]] = {}
    extractor = Extractor()
    index, always, entries = kb.index, kb.always, kb.entries
    keys = index.keys()

    def check(ei: int, si: int, number: int, clean: str, text: str) -> None:
        sig = entries[ei].signatures[si]
        if sig.kind == "literal":
            ok = sig.pattern in clean
        else:
            rx = kb.regex(ei, si)
            ok = rx is not None and rx.search(text) is not None
        if ok:
            slot = hits.setdefault(ei, {}).setdefault(si, [])
            if len(slot) < MAX_HITS_PER_SIGNATURE:
                slot.append((number, text))

    for number, clean, text in prepare(lines):
        if not clean:
            extractor.feed(number, text)
            continue
        tokens = _TOKEN.findall(clean)
        if not keys.isdisjoint(tokens):
            seen: set[tuple[int, int]] = set()
            for tok in tokens:
                refs = index.get(tok)
                if refs:
                    for ref in refs:
                        if ref not in seen:
                            seen.add(ref)
                            check(ref[0], ref[1], number, clean, text)
        for ei, si in always:
            check(ei, si, number, clean, text)
        extractor.feed(number, text)
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


def diagnose_lines(kb: CompiledKB, lines: Iterable[str], env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    hits, signals = scan(kb, lines)
    return decide(kb, hits, signals, env, top)


def diagnose_stream(kb: CompiledKB, stream: BinaryIO, env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    return diagnose_lines(kb, iter_lines(stream), env, top)


def diagnose_text(kb: CompiledKB, text: str, env: Mapping[str, str] | None = None, top: int = 3) -> Diagnosis:
    return diagnose_lines(kb, iter_text_lines(text), env, top)
