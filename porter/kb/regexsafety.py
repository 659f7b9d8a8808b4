"""Is a signature regex safe to run on every line of a 50 MB log?

Two checks: a structural one (no quantified group that itself contains an unbounded
quantifier: `(a+)+`, `(.*)*`, `(\\w+\\s?)*`), and a measured one (search a set of adversarial
100 kB lines built from the pattern's own characters; each must finish in < 50 ms). The
measured check interrupts a runaway search with SIGALRM (CPython's regex engine checks
signals), so a catastrophic pattern costs at most `HARD_LIMIT_S`.
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
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        return RegexVerdict(False, f"does not compile: {exc}")
    nested = nested_quantifier(pattern)
    if nested:
        return RegexVerdict(False, f"nested quantifier: {nested}")
    worst = 0.0
    for line in adversarial_lines(pattern):
        ms = _timed_search(rx, line)
        if ms is None:
            return RegexVerdict(False, f"catastrophic backtracking: a 100 kB adversarial line ran past {HARD_LIMIT_S:g} s", HARD_LIMIT_S * 1000)
        if ms > limit_ms:
            # one retry: the machine may just have been busy
            again = _timed_search(rx, line)
            ms = min(ms, again if again is not None else ms)
        worst = max(worst, ms)
        if worst > limit_ms:
            return RegexVerdict(False, f"slow: {worst:.0f} ms on a 100 kB adversarial line (limit {limit_ms:g} ms)", worst)
    return RegexVerdict(True, "", worst)
