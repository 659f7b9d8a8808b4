"""The compiled knowledge base: signatures prepared for fast line matching.

Every signature gets *needles* (substrings of which at least one must occur in any line it can
match: the literal itself, or the literal runs of a regex found with the regex parser) and an
index *key* (a whole word of a needle, for a per-line token lookup). `prefilter_needles` merges
the needles with the extractor's error words into the short list the scanner searches chunk-wise
with `str.find` to skip lines that cannot matter.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from operator import methodcaller

from porter import rxcache
from porter.kb.normalize import fuzzy_form
from porter.kb.schema import KBEntry
from porter.record import record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Iterable

TOKEN = rxcache.compile(r"\w+")
ASCII_TOKEN = rxcache.compile(r"[A-Za-z0-9_]+")  # TOKEN on an ASCII string (its \w is exactly this class there)
# Frequent words make poor index keys (they would send every line to the checker).
_COMMON = frozenset(
    """error errors exception import module named from cannot name line file object has attribute
    failed the not for and with this that none true false self type value runtime warning info
    return call most recent last traceback main python site packages lib usr local""".split()
)



# -- needles and keys ----------------------------------------------------------------------------------
def _interior_tokens(text: str) -> list[str]:
    """Tokens of `text` that must appear as whole tokens in any line containing `text`."""
    tokens = [(m.group(), m.start(), m.end()) for m in TOKEN.finditer(text)]
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
    """For a literal: its longest whitespace-free run (literals match whitespace-tolerantly);
    for a code or range: the characters every code in it starts with."""
    if kind == "code":
        from porter.kb.families import code_needle

        return (code_needle(pattern),)
    if kind != "literal":
        # a needle with a space misses a line whose whitespace was widened: use its rarest word
        needles = regex_needles(pattern)
        if "\\ " in pattern:  # a structured template (porter.kb.families writes spaces as `\ `)
            words = [_word_needle(run) for run in regex_literal_runs(pattern) or ()]
            words = [w for w in words if len(w) >= 4 and " " not in w]
            if words:
                return (max(words, key=_needle_score),)
        return needles
    runs = [run for run in pattern.split() if len(run) >= 3]
    best = max(runs, key=_run_rarity) if runs else ""
    # only plain words: the whole literal is the better needle (exact whitespace, but selective)
    return (best,) if best and _run_rarity(best) >= 6 else (pattern,)


def _word_needle(needle: str) -> str:
    """The rarest whitespace-free run of a needle (the whole needle when it has no usable run)."""
    runs = [run for run in needle.split() if len(run) >= 4]
    return max(runs, key=_needle_score) if runs else needle


def _needle_score(run: str) -> int:
    """Longer is rarer; identifiers (digits, underscores, CamelCase) rarer still."""
    core = run.strip(".,:;!?()[]'\"")
    bonus = 3 if any(c.isdigit() or c == "_" for c in core) or any(c.isupper() for c in core[1:]) else 0
    return len(core) + bonus


def _run_rarity(run: str) -> float:
    """How unlikely a whitespace-free run is in healthy log lines (higher is rarer).

    Words ("device", "The", "NPU") are everywhere; identifiers, codes, dotted names and quoted
    symbols ("'vllm.lora.models'", "EL0005", "HcclAllreduce") are not.
    """
    score = float(min(len(run), 24))
    if run.isalpha():
        score -= 6
        if run.isupper() and len(run) <= 4:
            score -= 4  # acronyms: NPU, GPU, ACL
    if len(run) < 5:
        score -= 6
    if any(not ch.isalnum() for ch in run.strip(".,:;!?()[]'\"")):
        score += 4  # dotted/underscored/slashed names
    if any(ch.isdigit() for ch in run):
        score += 2
    if any(ch.isupper() for ch in run[1:]) and not run.isupper():
        score += 3  # CamelCase identifiers
    return score


def signature_keys(kind: str, pattern: str, needles: tuple[str, ...]) -> list[str]:
    """Index keys: for a literal, a whole word inside it (whitespace changes keep words whole)."""
    if kind == "literal":
        key = _best_key(_interior_tokens(pattern))
        return [key] if key else []
    if kind == "code":
        return []  # a code prefix is part of a longer token: checked by needle on every line
    if "\\ " in pattern and len(needles) == 1 and TOKEN.fullmatch(needles[0]):
        # a structured template's needle word: a key when some literal run holds it as a whole word
        if any(needles[0] in _interior_tokens(run) for run in regex_literal_runs(pattern) or ()):
            return [needles[0]]
    return needle_keys(needles) or []


def required_words(kind: str, pattern: str) -> tuple[str, ...]:
    """Whitespace-free words that every line a regex signature matches contains: the words of
    the literal runs every match holds (`regex_literal_runs`). Whitespace-free, so they are in
    the de-prefixed and in the whitespace-squeezed line alike, and testing them in the clean
    line (a superset of both) is exact. () for literals, codes and case-insensitive regexes."""
    if kind != "regex":
        return ()
    words = [word for run in regex_literal_runs(pattern) or () for word in run.split() if len(word) >= 2]
    return tuple(sorted(dict.fromkeys(words), key=_needle_score, reverse=True))  # the rarest first: fails soonest


def required_tokens(kind: str, pattern: str) -> tuple[str, ...]:
    """Word tokens (`TOKEN`) that every line a signature matches holds as whole tokens: a
    literal's interior tokens (what its index key is chosen from), a regex's interior tokens of
    the literal runs every match contains. Whitespace changes keep words whole and the
    de-prefixed line is a suffix of the clean one, so the clean line's tokens hold them for the
    squeezed and the de-prefixed match alike: a line lacking one cannot match, and the scanner
    drops such a candidate with one set test. () for codes and case-insensitive regexes."""
    if kind == "literal":
        # interior to the whitespace-collapsed form, which the squeezed line is matched with: a
        # pattern's last word before trailing whitespace (" ---> Running in ") may be the head of
        # a longer word there ("---> Running init")
        tokens = _interior_tokens(" ".join(pattern.split()))
    elif kind == "regex":
        tokens = [tok for run in regex_literal_runs(pattern) or () for tok in _interior_tokens(run)]
    else:
        return ()
    return tuple(dict.fromkeys(tokens))


def signature_key(kind: str, pattern: str) -> str | None:
    """The index token of a single-key signature (None: several keys or none)."""
    keys = signature_keys(kind, pattern, signature_needles(kind, pattern))
    return keys[0] if len(keys) == 1 else None


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
_ODD_SPACE = rxcache.compile(r"\s\s|[^\S ]")


def squeeze(line: str) -> str:
    """The line with every whitespace run as one space (the line itself when it has none)."""
    return " ".join(line.split()) if _ODD_SPACE.search(line) else line


class _Sig:
    """A signature prepared for the line loop. The regex is compiled on first use."""

    __slots__ = ("ei", "si", "kind", "pattern", "needles", "required", "tokens", "_rx", "_compiled", "_collapsed", "_tables")

    def __init__(self, ei: int, si: int, kind: str, pattern: str, needles: tuple[str, ...], required: tuple[str, ...] = (),
                 tokens: tuple[str, ...] = ()) -> None:
        self.ei, self.si, self.kind, self.pattern, self.needles = ei, si, kind, pattern, needles
        self.required = required  # words every match contains (`required_words`): tested before the regex runs
        self.tokens = tokens  # whole tokens every matching line holds (`required_tokens`): the scanner's first test
        self._rx: re.Pattern[str] | None = None
        self._compiled = False
        self._tables: tuple = ()  # (group, name, table) of `defined_in` captures (porter.kb.families)
        # a literal with whitespace also matches when runs of spaces/tabs differ (pasted logs)
        # (split() is [pattern] exactly when the pattern holds no whitespace: a C-level test, as
        # ~640 signatures are prepared on every call)
        words = pattern.split() if kind == "literal" else None
        has_space = words is not None and words != [pattern] and pattern != ""
        self._collapsed = " ".join(words) if has_space else None

    @property
    def collapsed(self) -> str | None:
        """A literal with whitespace, its runs as single spaces (matched in the squeezed line)."""
        return self._collapsed

    def _regex(self) -> re.Pattern[str] | None:
        if not self._compiled:
            self._compiled = True
            try:
                if self.kind == "code":
                    from porter.kb.families import code_regex

                    self._rx = rxcache.compile(code_regex(self.pattern))
                else:
                    self._rx = rxcache.compile(self.pattern)
                    if "__in_" in self.pattern:
                        from porter.kb.families import constrained_groups

                        self._tables = constrained_groups(self._rx.groupindex)
            except (re.error, ValueError):
                self._rx = None  # lint reports it; matching skips it
        return self._rx

    def hits(self, clean: str, text: str, squeezed: str | None = None) -> bool:
        """`squeezed`: the line with whitespace runs made single spaces (`squeeze`), computed once
        per line by the caller (building it per signature made crafted logs quadratic)."""
        if self.kind == "literal":  # (porter.kb.matcher.scan inlines this branch)
            if self.pattern in clean:
                return True
            return self._collapsed is not None and self._collapsed in (squeezed if squeezed is not None else squeeze(clean))
        for needle in self.needles:
            if needle in clean:
                break
        else:
            if self.needles:
                return False  # needles are whitespace-free words when the pattern has spaces
        for word in self.required:
            if word not in clean:
                return False  # a word every match contains is missing: no regex scan (nor a squeezed retry)
        rx = self._regex()
        if rx is None:
            return False
        if self.kind == "code":
            from porter.kb.families import code_in_range
            from porter.kb.normalize import info_labelled

            if info_labelled(clean, text):
                return False  # a code quoted by an INFO/DEBUG record is not the failure (see info_labelled)
            return any(code_in_range(self.pattern, m.group("code")) for m in rx.finditer(text))
        if self._tables:
            return self._defined_match(rx, text) is not None or (
                squeezed is not None and squeezed is not clean and self._defined_match(rx, squeeze(text)) is not None)
        if rx.search(text) is not None:
            return True
        # structured templates put one space per whitespace run: try the squeezed line too
        if squeezed is not None and squeezed is not clean:
            return rx.search(squeeze(text)) is not None
        return False

    def _defined_match(self, rx: re.Pattern[str], text: str):
        """The first match whose `defined_in` captures all name a symbol of their table."""
        from porter.kb.families import defined

        for m in rx.finditer(text):
            if all(m.group(group) and defined(m.group(group), table) for group, _, table in self._tables):
                return m
        return None

    def captures(self, text: str) -> dict[str, str]:
        """Named groups of the first match in a hit line (a code item captures `code`)."""
        rx = self._regex()
        if rx is None or not rx.groupindex:
            return {}
        if self.kind == "code":
            from porter.kb.families import code_in_range

            for m in rx.finditer(text):
                if code_in_range(self.pattern, m.group("code")):
                    return {"code": m.group("code")}
            return {}
        if self._tables:
            m = self._defined_match(rx, text) or self._defined_match(rx, squeeze(text))
        else:
            m = rx.search(text) or rx.search(squeeze(text))
        names = {group: name for group, name, _ in self._tables}  # `api__in_vllm` is reported as `api`
        return {names.get(k, k): v for k, v in m.groupdict().items() if v} if m else {}


@record
class CompiledKB:
    entries: Sequence[KBEntry]  # a tuple, or the cache's lazily restored entries
    sigs: list[_Sig]
    index: dict[str, list[int]]  # key token -> positions in `sigs`
    always: list[int]  # signatures without a key token: checked (needle first) on every line
    fuzzy_targets: list[tuple[int, str]]  # (entry index, fuzzy form of a symptom or title)
    calibration: object = None  # porter.kb.calibrate.Calibration fitted for this KB, or None (raw scores)

    @classmethod
    def build(cls, entries: Iterable[KBEntry], plan: dict | None = None) -> "CompiledKB":
        """`plan` is the output of `plan()` for the same entries (from the cache), or None."""
        if not isinstance(entries, Sequence) or isinstance(entries, list):
            entries = tuple(entries)  # (porter.kb.loader.LazyEntries stays lazy: entries are read when they hit)
        if plan is None:
            plan = cls.plan(entries)
        required = plan.get("required") or [()] * len(plan["sigs"])
        specs = plan.get("specs") or [(entries[ei].signatures[si].kind, entries[ei].signatures[si].pattern) for ei, si, _, _ in plan["sigs"]]
        tokens = plan.get("tokens") or [required_tokens(kind, pattern) for kind, pattern in specs]  # (a cache written before them)
        sigs = [_Sig(ei, si, kind, pattern, tuple(needles), tuple(words), tuple(toks))
                for (ei, si, needles, _), words, (kind, pattern), toks in zip(plan["sigs"], required, specs, tokens)]
        index: dict[str, list[int]] = {}
        always: list[int] = []
        for pos, (_, _, _, keys) in enumerate(plan["sigs"]):
            if keys:
                for key in keys:
                    index.setdefault(key, []).append(pos)
            else:
                always.append(pos)
        kb = cls(entries, sigs, index, always, [tuple(t) for t in plan["fuzzy"]])
        if "prefilter" in plan:
            kb._needles = plan["prefilter"]  # computed when the cache was written
        return kb

    @staticmethod
    def plan(entries: Iterable[KBEntry]) -> dict:
        """Plain data (cacheable): per signature its needles and index keys; fuzzy forms."""
        sigs, fuzzy, required, specs, tokens = [], [], [], [], []
        for ei, entry in enumerate(entries):
            for si, sig in enumerate(entry.signatures):
                needles = signature_needles(sig.kind, sig.pattern)
                sigs.append((ei, si, needles, signature_keys(sig.kind, sig.pattern, needles)))
                required.append(required_words(sig.kind, sig.pattern))
                specs.append((sig.kind, sig.pattern))
                tokens.append(required_tokens(sig.kind, sig.pattern))
            for text in (*entry.symptoms, entry.title):
                form = fuzzy_form(text)
                if len(form) >= 12:
                    fuzzy.append((ei, form))
        return {"sigs": sigs, "fuzzy": fuzzy, "required": required, "specs": specs, "tokens": tokens,
                "prefilter": prefilter_plan(needles for _, _, needles, _ in sigs)}

    def signature_map(self) -> dict[tuple[int, int], "_Sig"]:
        """(entry index, signature index) -> prepared signature."""
        cached = getattr(self, "_sig_map", None)
        if cached is None:
            cached = self._sig_map = {(s.ei, s.si): s for s in self.sigs}
        return cached

    def by_id(self, entry_id: str) -> KBEntry | None:
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        return None



# -- chunk prefilter ------------------------------------------------------------------------------
def _dedupe(needles) -> tuple[str, ...]:
    """Drop needles that contain a shorter needle (the shorter one already finds their lines)."""
    kept: list[str] = []
    for needle in sorted(set(needles), key=len):
        if not any(k in needle for k in kept):
            kept.append(needle)
    return tuple(kept)


Prefilter = tuple[tuple[str, ...], tuple[str, ...]]


def prefilter_plan(sig_needles: Iterable[tuple[str, ...]]) -> Prefilter | None:
    """(needles for the case-folded text, needles for the original text); None: read every line.

    The extractor's words (error, failed, Traceback, ...) are searched case-folded; a signature
    needle that contains one of them, case-folded, is then redundant and dropped, so most
    signatures cost nothing here. The rest are searched case-sensitively.
    """
    from porter.kb.extract import EXTRACT_NEEDLES

    sig_needles = list(sig_needles)
    if any(not needles for needles in sig_needles):
        return None  # a regex without a literal anchor: every line must be searched
    folded = _dedupe(n.lower() for n in EXTRACT_NEEDLES)
    exact = _dedupe(n for needles in sig_needles for n in needles if not any(f in n.lower() for f in folded))
    return folded, exact


def prefilter_needles(kb: CompiledKB) -> Prefilter | None:
    """The KB's prefilter (`prefilter_plan`), from the cached plan when there is one."""
    cached = getattr(kb, "_needles", False)
    if cached is False:
        cached = kb._needles = prefilter_plan(sig.needles for sig in kb.sigs)
    return cached


_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")


def presence_key(needle: str) -> str:
    """What `distinct_lines` must contain for `needle` to occur in the chunk: the needle, digits as 0."""
    return needle.translate(_DIGITS_AS_ZERO)


def presence_keys(needles) -> tuple[str, ...]:
    """`presence_key` of each needle, with one translate of them all joined (hundreds of
    needles are keyed on every scan); per needle when one holds the separator."""
    needles = tuple(needles)
    keys = "\n".join(needles).translate(_DIGITS_AS_ZERO).split("\n")
    return tuple(keys) if len(keys) == len(needles) else tuple(map(presence_key, needles))


def distinct_lines(lines: list[str], text: str) -> str | None:
    """The distinct lines with every digit as 0, joined; None when they would not be much
    shorter than the chunk. Log lines repeat with other numbers (timestamps, steps, pids), so
    for a chunk of a healthy log this is a few kB, and a needle whose key is not in it occurs
    nowhere in the chunk: its pass over the chunk is skipped. A sample of the first lines
    decides first, so a chunk of unique lines costs no copy."""
    digits_as_zero = methodcaller("translate", _DIGITS_AS_ZERO)
    if len(set(map(digits_as_zero, lines[:512]))) * 4 > min(len(lines), 512):
        return None
    seen: set[str] = set()
    for start in range(0, len(lines), 1024):  # a slice at a time: C-speed, and no chunk-sized copy
        seen.update("\n".join(lines[start : start + 1024]).translate(_DIGITS_AS_ZERO).split("\n"))
    distinct = "\n".join(seen)
    return distinct if len(distinct) * 4 < len(text) else None


def present_needles(needles: tuple[str, ...], keys: tuple[str, ...], lines: str) -> tuple[str, ...]:
    """The needles whose presence key occurs in `lines` (see `distinct_lines`)."""
    return tuple(n for n, k in zip(needles, keys) if k in lines)


def candidate_lines(text: str, ends: list[int], needles: tuple[str, ...], found: set[int] | None = None) -> set[int]:
    """Indexes of the lines of `text` that contain any needle (str.find runs in C), added to
    `found`; stops early once every line is in it (an error-dense log needs one pass, not one
    per needle)."""
    found = set() if found is None else found
    find, n = text.find, len(ends)
    for needle in needles:
        if len(found) >= n:
            break
        pos = find(needle)
        while pos >= 0:
            i = bisect_right(ends, pos)
            found.add(i)
            if i + 1 >= n:
                break
            pos = find(needle, ends[i])
    return found
