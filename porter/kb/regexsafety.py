"""Is a signature regex safe to run on every line of a 50 MB log?

Decided from the pattern's structure, so the verdict is the same on an idle laptop and on a
loaded CI runner (a measured limit once failed a safe pattern under load). A regex is refused when

- a repeated group contains an unbounded quantifier: `(a+)+`, `(.*)*`, `(\\w+\\s?)*` (exponential);
- a repeated group can match one text in several ways: `(a|aa)+`, `(\\d{1,3})+` (exponential);
- an unbounded run such as `.*`, `\\w+` or `\\s*` can be entered from many start positions over
  the same characters: nothing it cannot match comes shortly before it (a literal, a class, a
  `^`), as in `No module named .*x` or `\\d+x` (quadratic in the line length);
- its bounded gaps multiply to more than MAX_PATHS backtracking paths per start position
  (`.{0,500}a.{0,500}b`).

The measured search stays as a backstop: a pattern that still runs past HARD_LIMIT_S on a
100 kB adversarial line (a thousand times what a safe pattern takes) is refused too.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from dataclasses import dataclass

try:  # Python >= 3.11
    from re import _constants as _C  # type: ignore[attr-defined]
    from re import _parser as _P  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_constants as _C  # type: ignore[no-redef]
    import sre_parse as _P  # type: ignore[no-redef]

LINE_CHARS = 100_000
LIMIT_MS = 50.0
HARD_LIMIT_S = 1.0
_REPEATS = {_C.MAX_REPEAT, _C.MIN_REPEAT}
_UNBOUNDED = _C.MAXREPEAT


@dataclass(frozen=True)
class RegexVerdict:
    ok: bool
    problem: str = ""
    worst_ms: float = 0.0


def _contains_unbounded_repeat(subpattern) -> bool:
    for op, arg in subpattern:
        if op in _REPEATS:
            lo, hi, body = arg
            if hi == _UNBOUNDED or hi > 16:
                return True
            if _contains_unbounded_repeat(body):
                return True
        elif op is _C.SUBPATTERN:
            if _contains_unbounded_repeat(arg[-1]):
                return True
        elif op is _C.BRANCH:
            if any(_contains_unbounded_repeat(alt) for alt in arg[1]):
                return True
    return False


def nested_quantifier(pattern: str) -> str | None:
    """Return a description of the first nested quantifier, or None."""
    try:
        parsed = _P.parse(pattern)
    except Exception:  # noqa: BLE001 - compile errors are reported separately
        return None

    def walk(sub) -> str | None:
        for op, arg in sub:
            if op in _REPEATS:
                lo, hi, body = arg
                if (hi == _UNBOUNDED or hi > 1) and _contains_unbounded_repeat(body):
                    return "a repeated group contains an unbounded quantifier (like `(a+)+` or `(.*)*`)"
                found = walk(body)
                if found:
                    return found
            elif op is _C.SUBPATTERN:
                found = walk(arg[-1])
                if found:
                    return found
            elif op is _C.BRANCH:
                for alt in arg[1]:
                    found = walk(alt)
                    if found:
                        return found
        return None

    return walk(parsed)


def adversarial_lines(pattern: str, size: int = LINE_CHARS) -> list[str]:
    """Lines that make backtracking regexes slow: long runs of the characters the pattern expects."""
    try:
        parsed = _P.parse(pattern)
    except Exception:  # noqa: BLE001
        parsed = []
    literal_chars: list[str] = []
    runs: list[str] = []
    current: list[str] = []

    def collect(sub) -> None:
        nonlocal current
        for op, arg in sub:
            if op is _C.LITERAL:
                literal_chars.append(chr(arg))
                current.append(chr(arg))
                continue
            if current:
                runs.append("".join(current))
                current = []
            if op in _REPEATS:
                collect(arg[2])
            elif op is _C.SUBPATTERN:
                collect(arg[-1])
            elif op is _C.BRANCH:
                for alt in arg[1]:
                    collect(alt)

    collect(parsed)
    if current:
        runs.append("".join(current))
    chars = list(dict.fromkeys(literal_chars))[:6] + ["a", " ", "0", "'", "."]
    # the trailing NUL makes a match fail at the very end, which is what forces backtracking
    lines = [c * size + "\x00" for c in dict.fromkeys(chars)]
    mix = "".join(dict.fromkeys(literal_chars)) or "a0 "
    lines.append((mix * (size // len(mix) + 1))[:size])
    for run in sorted(set(runs), key=len, reverse=True)[:4]:
        lines.append((run * (size // len(run) + 1))[:size] + "\x00")
        lines.append((run + " ") * 3 + "a" * size)
    return lines


class _Timeout(Exception):
    pass


def _timed_search(rx: re.Pattern[str], line: str) -> float | None:
    """Milliseconds for one search, or None when it ran past HARD_LIMIT_S."""
    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if not use_alarm:
        start = time.perf_counter()
        rx.search(line)
        return (time.perf_counter() - start) * 1000

    def on_alarm(signum, frame):  # noqa: ANN001
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, HARD_LIMIT_S)
    start = time.perf_counter()
    try:
        rx.search(line)
        return (time.perf_counter() - start) * 1000
    except _Timeout:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_regex(pattern: str, limit_ms: float = LIMIT_MS) -> RegexVerdict:
    """`limit_ms` is kept for callers; the verdict no longer depends on a measured time below
    HARD_LIMIT_S (see the module text)."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        return RegexVerdict(False, f"does not compile: {exc}")
    nested = nested_quantifier(pattern)
    if nested:
        return RegexVerdict(False, f"nested quantifier: {nested}")
    structural = structural_problem(pattern)
    if structural:
        return RegexVerdict(False, structural)
    worst = 0.0
    for line in adversarial_lines(pattern):
        ms = _timed_search(rx, line)
        if ms is None:
            return RegexVerdict(False, f"catastrophic backtracking: a 100 kB adversarial line ran past {HARD_LIMIT_S:g} s", HARD_LIMIT_S * 1000)
        worst = max(worst, ms)
    return RegexVerdict(True, "", worst)


# -- the structural rules -------------------------------------------------------------------------
MAX_PATHS = 100_000  # backtracking paths per start position through bounded gaps
LARGE_REPEAT = 1000  # a bounded repeat this long scans like an unbounded one
GUARD_SPAN = 400  # a guard character at most this many characters before the run
_CHAR_OPS = {_C.LITERAL, _C.NOT_LITERAL, _C.IN, _C.ANY}
_ALL = frozenset(range(0x80)) | {0x80}  # ASCII plus a stand-in for every non-ASCII character


def _category_chars(cat) -> frozenset[int]:
    probe = {
        _C.CATEGORY_DIGIT: r"\d", _C.CATEGORY_NOT_DIGIT: r"\D", _C.CATEGORY_SPACE: r"\s",
        _C.CATEGORY_NOT_SPACE: r"\S", _C.CATEGORY_WORD: r"\w", _C.CATEGORY_NOT_WORD: r"\W",
    }.get(cat)
    if probe is None:
        return _ALL
    rx = re.compile(probe)
    chars = {c for c in range(0x80) if rx.match(chr(c))}
    if rx.match("\u00e9") or rx.match("\u00a0"):
        chars.add(0x80)
    return frozenset(chars)


def _char_set(op, arg) -> frozenset[int]:
    """The characters one character item can match (ASCII, 0x80 standing for the rest)."""
    if op is _C.LITERAL:
        return frozenset({min(arg, 0x80)})
    if op is _C.NOT_LITERAL:
        return _ALL - {arg} if arg < 0x80 else _ALL
    if op is _C.ANY:
        return _ALL - {10}
    chars: set[int] = set()
    negate = False
    for iop, iarg in arg:
        if iop is _C.NEGATE:
            negate = True
        elif iop is _C.LITERAL:
            chars.add(min(iarg, 0x80))
        elif iop is _C.RANGE:
            lo, hi = iarg
            chars.update(range(min(lo, 0x80), min(hi, 0x80) + 1))
        elif iop is _C.CATEGORY:
            chars |= _category_chars(iarg)
        else:
            return _ALL
    return frozenset(_ALL - chars) if negate else frozenset(chars)


def _item_width(op, arg) -> tuple[int, int]:
    return _P.SubPattern(_P.State(), [(op, arg)]).getwidth()


_END = frozenset({-1})  # "the pattern ends here": a run at the very end never needs to give back


def _starts(op, arg) -> tuple[frozenset[int] | None, bool]:
    """(characters the item can start with, whether it can match empty); None: unknown."""
    if op in _CHAR_OPS:
        return _char_set(op, arg), False
    if op in _REPEATS:
        lo, _, body = arg
        first, empty = _seq_starts(list(body), frozenset())
        return first, empty or lo == 0
    if op is _C.SUBPATTERN:
        return _seq_starts(list(arg[-1]), frozenset())
    if op is _C.BRANCH:
        chars: set[int] = set()
        empty = False
        for alt in arg[1]:
            first, alt_empty = _seq_starts(list(alt), frozenset())
            if first is None:
                return None, True
            chars |= first
            empty = empty or alt_empty
        return frozenset(chars), empty
    if op in (_C.AT, _C.ASSERT, _C.ASSERT_NOT):
        return frozenset(), True
    return None, True


def _seq_starts(items: list, follow: frozenset[int] | None) -> tuple[frozenset[int] | None, bool]:
    """Characters a match of `items` then `follow` can start with (None: unknown)."""
    chars: set[int] = set()
    for op, arg in items:
        first, empty = _starts(op, arg)
        if first is None:
            return None, True
        chars |= first
        if not empty:
            return frozenset(chars), False
    if follow is None:
        return None, True
    return frozenset(chars | follow), True


def _ways(sub, follow: frozenset[int] | None = _END) -> int:
    """Split points a backtracking search may try per start position (capped): alternatives and
    repeats of variable length multiply, except a run of one character class that what follows
    cannot continue (`[\\w.]{0,120}\\(`: the run ends where the `(` is, one way only) or that
    ends the pattern."""
    items = list(sub)
    total = 1
    for index, (op, arg) in enumerate(items):
        after, _ = _seq_starts(items[index + 1 :], follow)
        if op is _C.BRANCH:
            total *= sum(_ways(alt, after) for alt in arg[1])
        elif op is _C.SUBPATTERN:
            total *= _ways(arg[-1], after)
        elif op in _REPEATS:
            lo, hi, body = arg
            hi = min(hi, LARGE_REPEAT)
            body = list(body)
            if len(body) == 1 and body[0][0] in _CHAR_OPS:
                if after is None or (after is not _END and after != frozenset({-1}) and _char_set(*body[0]) & after):
                    total *= hi - lo + 1
            else:
                inner = _ways(body, None)
                total *= (hi - lo + 1) if inner == 1 else inner ** max(hi, 1)
        total = min(total, MAX_PATHS * 10)
    return total


def _is_char_repeat(op, arg) -> frozenset[int] | None:
    """The character set of an unbounded (or very long) run of one character item, else None."""
    if op not in _REPEATS:
        return None
    lo, hi, body = arg
    if hi != _UNBOUNDED and hi < LARGE_REPEAT:
        return None
    items = list(body)
    if len(items) == 1 and items[0][0] in _CHAR_OPS:
        return _char_set(*items[0])
    if len(items) == 1 and items[0][0] is _C.SUBPATTERN:
        return _is_char_repeat(op, (lo, hi, items[0][1][-1]))
    return _ALL


def _guarded(path: list[tuple[list, int]], run: frozenset[int]) -> bool:
    """Does something the run cannot match come at most GUARD_SPAN characters before it?
    `path`: (sequence, index) from the innermost sequence outwards."""
    span = 0
    for seq, index in path:
        for op, arg in reversed(seq[:index]):
            if op is _C.AT and arg in (_C.AT_BEGINNING, _C.AT_BEGINNING_STRING):
                return True  # one start position only
            if op in _CHAR_OPS and not (_char_set(op, arg) & run):
                return True
            if op in _REPEATS and arg[0] >= 1 and len(arg[2]) == 1 and arg[2][0][0] in _CHAR_OPS \
                    and not (_char_set(*arg[2][0]) & run):
                return True  # `[ \t]{1,4}` before `\w+`: at least one guard character
            if op in (_C.ASSERT, _C.ASSERT_NOT, _C.AT):
                continue  # zero width
            first, _ = _starts(op, arg)
            if op in _REPEATS and len(arg[2]) == 1 and arg[2][0][0] in _CHAR_OPS and not (_char_set(*arg[2][0]) & run):
                continue  # `\\s*` before `\\d+`: cannot stand inside the run, adds no start position there
            span += min(_item_width(op, arg)[1], LARGE_REPEAT * 10)
            if span > GUARD_SPAN:
                return False
    return False  # the start of the pattern: every position of a run is a start


def structural_problem(pattern: str) -> str | None:
    """The first structural reason the pattern can backtrack badly (see the module text), or None."""
    try:
        parsed = _P.parse(pattern)
    except Exception:  # noqa: BLE001 - compile errors are reported separately
        return None

    def walk(seq, path, anchored: bool) -> str | None:  # anchored: `^...`, one start position per line
        items = list(seq)
        for index, (op, arg) in enumerate(items):
            here = [(items, index), *path]
            if op in _REPEATS:
                lo, hi, body = arg
                run = _is_char_repeat(op, arg)
                if run is not None and run is not _ALL and not anchored and not _guarded(here, run):
                    return ("unbounded run that many start positions share (quadratic backtracking): "
                            "put a bounded repeat ({0,200}) or a literal the run cannot match before it")
                if (hi == _UNBOUNDED or hi > 1) and _ways(body) > 1 and not (len(body) == 1 and body[0][0] in _CHAR_OPS):
                    return "catastrophic backtracking: a repeated group can match the same text in several ways (like `(a|aa)+`)"
                found = walk(body, here, anchored)
            elif op is _C.SUBPATTERN:
                found = walk(arg[-1], here, anchored)
            elif op in (_C.ASSERT, _C.ASSERT_NOT):
                found = walk(arg[1], here, anchored)
            elif op is _C.BRANCH:
                found = next((f for f in (walk(alt, here, anchored) for alt in arg[1]) if f), None)
            else:
                found = None
            if found:
                return found
        return None

    anchored = bool(parsed.data) and parsed.data[0] == (_C.AT, _C.AT_BEGINNING) and not parsed.state.flags & re.MULTILINE
    found = walk(parsed, [], anchored)
    if found:
        return found
    if _ways(parsed) > MAX_PATHS:
        return f"slow: its bounded repeats and alternatives give more than {MAX_PATHS} backtracking paths per start position"
    return None
