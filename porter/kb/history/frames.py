"""The causal traceback's frames that lie in a plugin repository, and versions the text names.

Pure functions over de-prefixed trace lines (the extractor's traceback blocks): no git here.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from porter.kb.history.models import Frame, OtherFrame, TraceFacts

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]{1,1000})", line (?P<line>\d{1,7})(?:, in (?P<func>[^\s(]{1,200}))?')
# `Exception` alone too: `raise Exception("...")` prints `Exception: ...`
_EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_]\w{0,80}\.){0,8}(?:[A-Za-z_]\w{0,80}(?:Error|Exception|Exit|Interrupt|Failed|Fault)|Exception))(?::\s?(?P<msg>.*))?$")
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
_NOT_SOURCE = ("^", "~", "...", "[Previous line", 'File "', "Traceback (most recent call last)")
# Log prefixes the knowledge base's normaliser may leave (process tags with spaces, logger stamps):
# "(VllmWorker rank=1 pid=72013) ERROR 07-31 11:41:04 [multiproc_executor.py:522] "
_LOG_PREFIX = re.compile(
    r"^(?:\x1b\[[0-9;]*m|\^\[\[[0-9;]*m)*(?:\([^()]{1,80}\)\s*(?:\x1b\[[0-9;]*m|\^\[\[[0-9;]*m)*\s*)+"
    r"(?:(?:ERROR|WARNING|INFO|DEBUG|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+(?:\[[^\]]{1,80}\]\s?)?)?"
)
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")


def strip_log_prefix(line: str) -> str:
    """The line without a process tag / logger stamp / `[rankN]:` prefix (the code after it is kept)."""
    m = _LOG_PREFIX.match(line)
    if m and m.end():
        line = line[m.end():]
    m = _RANK_PREFIX.match(line)
    return line[m.end():] if m else line
MAX_FRAMES = 8
# Frames of the interpreter, torch's module machinery and decorators: they say nothing about which code failed
_PLUMBING = frozenset({"<module>", "main", "run", "_run_code", "_run_module_as_main", "__call__", "_call_impl",
                       "_wrapped_call_impl", "forward", "wrapper", "inner", "decorate_context", "_bootstrap",
                       "run_method", "execute_method", "worker_busy_loop", "worker_main", "_target", "wrapped_app",
                       "app", "handle", "__init__", "new_func", "dispatch", "sync_wrapper", "_fn", "fn", "func"})


@dataclass
class Segment:
    """One traceback of a chain: its frames (outermost first) and the exception that ended it."""

    frames: list[tuple[str, int, str, str]] = field(default_factory=list)  # path, line, function, source
    exception_type: str = ""
    exception_message: str = ""
    headed: bool = False  # began with a `Traceback (most recent call last):` line (else: frames without a header)


def segments(lines: Iterable[str]) -> list[Segment]:
    """Split traceback lines into chained segments, in the order printed (root cause first)."""
    out: list[Segment] = []
    current: Segment | None = None
    pending_source = False
    for raw in lines:
        text = strip_log_prefix(raw.rstrip())
        stripped = text.strip()
        if stripped.startswith("Traceback (most recent call last)") or stripped.startswith(_CHAIN):
            if current is not None and (current.frames or current.exception_type):
                out.append(current)
            current = Segment(headed=True) if stripped.startswith("Traceback") else None
            pending_source = False
            continue
        m = _FRAME.match(text)
        if m:
            if current is None or current.exception_type:  # frames without a header: a new segment
                if current is not None:
                    out.append(current)
                current = Segment()
            current.frames.append((m.group("path"), int(m.group("line")), (m.group("func") or "").strip(), ""))
            pending_source = True
            continue
        if current is None or not stripped:
            continue
        if pending_source and not stripped.startswith(_NOT_SOURCE) and not _is_exception(stripped, current):
            path, line, func, _ = current.frames[-1]
            current.frames[-1] = (path, line, func, stripped)
            pending_source = False
            continue
        pending_source = False
        if not current.exception_type and current.frames:
            e = _EXCEPTION.match(stripped)
            if e:
                current.exception_type = e.group("type")
                current.exception_message = (e.group("msg") or "").strip()
    if current is not None and (current.frames or current.exception_type):
        out.append(current)
    return out


def _is_exception(stripped: str, current: Segment) -> bool:
    head = stripped.split(":", 1)[0]
    return " " not in head and _EXCEPTION.match(stripped) is not None


class PathMapper:
    """Maps a printed path (site-packages, a source checkout, a container path) to a repository
    path: the longest suffix of its components that is a file the repository has or had."""

    def __init__(self, repo_files: Iterable[str], existed: Callable[[str], bool] | None = None) -> None:
        """`existed(path)`: whether the history ever had that path (asked only for a suffix that
        starts at one of the repository's top-level folders, when no known file matched)."""
        self.files = frozenset(repo_files)
        self.roots = frozenset(f.split("/", 1)[0] for f in self.files if "/" in f)
        self.existed = existed

    def __call__(self, path: str) -> str | None:
        parts = [p for p in re.split(r"[\\/]+", path) if p and p != "."]
        for i in range(len(parts)):
            candidate = "/".join(parts[i:])
            if candidate in self.files:
                # a bare "setup.py" or "__init__.py" suffix says nothing about which project it is
                return candidate if "/" in candidate else None
        if self.existed is not None and parts and parts[-1].endswith(".py"):
            starts = [i for i, p in enumerate(parts[:-1]) if p in self.roots]
            if starts:
                candidate = "/".join(parts[starts[-1]:])
                if self.existed(candidate):  # a file since removed or renamed
                    return candidate
        return None


def plugin_frames(segs: Sequence[Segment], mapper: PathMapper) -> tuple[list[Frame], Segment | None]:
    """The frames in the repository of the causal segment (the first, root-cause one that has any),
    innermost first, and that segment."""
    for seg in segs:
        mapped = [(mapper(p), p, n, f, s) for p, n, f, s in seg.frames]
        inside = [(rp, p, n, f, s) for rp, p, n, f, s in mapped if rp]
        if not inside:
            continue
        frames: list[Frame] = []
        seen: set[tuple[str, int]] = set()
        for rp, p, n, f, s in reversed(inside):
            if (rp, n) in seen:  # a recursion or a re-printed frame
                continue
            seen.add((rp, n))
            frames.append(Frame(path=p, repo_path=rp, line=n, function=f, source=s, depth=len(frames)))
            if len(frames) >= MAX_FRAMES:
                break
        return frames, seg
    return [], None


def _version_pattern(names: Sequence[str]) -> re.Pattern[str]:
    alts = sorted({"[-_.]".join(re.escape(p) for p in re.split(r"[-_.]+", n) if p) for n in names}, key=len, reverse=True)
    return re.compile(
        # `name==1.2`, `name version 1.2`, an issue's `- name: 1.2` line, an image tag `name:v1.2`, `name-1.2.dist-info`
        r"(?<![\w-])(?:" + "|".join(alts) + r")(?:==|\s*version\s*[:=]?\s*|\s*:\s*v?|-v?|\s+v?)"
        r"(?P<v>\d+\.\d+(?:\.\d+)?(?:\.?(?:rc\d+|post\d+|dev\d*))?)(?![\w.])",
        re.IGNORECASE,
    )


def versions_in_text(text: str, names: Sequence[str]) -> str | None:
    """The version of a package the trace names most often (pip list lines, dist-info paths,
    image tags, banners), or None."""
    if not names or not text:
        return None
    seen = Counter(m.group("v") for m in _version_pattern(names).finditer(text))
    return seen.most_common(1)[0][0] if seen else None


def trace_facts(traceback_blocks: Iterable[Sequence[str]], mapper: PathMapper,
                fallback: tuple[str, str] | None = None) -> TraceFacts:
    """`fallback`: the (type, message) to use when no traceback printed its exception (a pasted
    error line without frames): the extractor's first exception."""
    segs = joined_segments(traceback_blocks)
    frames, seg = plugin_frames(segs, mapper)
    # the exception that ended the causal segment; else the first one a traceback printed
    source = seg if seg is not None and seg.exception_type else next((s for s in segs if s.exception_type), None)
    others = other_frames(seg or source or next((s for s in segs if s.frames), None), mapper)
    if source is not None:
        return TraceFacts(tuple(frames), source.exception_type, source.exception_message, others)
    exc_type, message = fallback or ("", "")
    return TraceFacts(tuple(frames), exc_type, message, others)


def joined_segments(traceback_blocks: Iterable[Sequence[str]]) -> list[Segment]:
    """The blocks' segments, a traceback cut across blocks joined again: a segment that ends without
    its exception line, followed by frames without a `Traceback` header, goes on there. (The extractor
    splits one traceback where a line breaks it, e.g. Ray's `RayTaskError(ValueError): ray::...` lines
    between the driver's frames and the remote task's: the failing code is the remote part.)"""
    out: list[Segment] = []
    for block in traceback_blocks:
        for seg in segments(block):
            prev = out[-1] if out else None
            if prev is not None and prev.frames and not prev.exception_type and not seg.headed and seg.frames:
                out[-1] = Segment([*prev.frames, *seg.frames], seg.exception_type, seg.exception_message, prev.headed)
            else:
                out.append(seg)
    return out


def other_frames(seg: Segment | None, mapper: PathMapper) -> tuple[OtherFrame, ...]:
    """The segment's frames outside the repository, innermost first, without interpreter and
    decorator plumbing: the framework code the plugin overrides or patches (`_dummy_run`, ...)."""
    if seg is None:
        return ()
    out: list[OtherFrame] = []
    for path, _, func, source in reversed(seg.frames):
        if func in _PLUMBING or func.startswith("<") or mapper(path):
            continue
        out.append(OtherFrame(path, func, source))
        if len(out) >= MAX_FRAMES:
            break
    return tuple(out)


def first_exception(exceptions: Sequence[object]) -> tuple[str, str] | None:
    """The first exception (with a message, if any has one) of the extractor's list."""
    with_msg = [e for e in exceptions if getattr(e, "message", "")]
    pick = with_msg[0] if with_msg else (exceptions[0] if exceptions else None)
    return (pick.type, pick.message) if pick is not None else None
