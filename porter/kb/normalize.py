"""Turn any byte stream into clean text lines, and lines into the forms the matcher uses.

- `iter_lines`: streaming decode (invalid UTF-8 replaced, NULs dropped, CRLF/CR -> LF) with a
  bounded line length, so a 50 MB log or a 1 GB line never sits in memory whole.
- `clean_line`: ANSI/CSI escapes and control characters removed; the text is otherwise verbatim.
- `strip_prefix`: rank/process/timestamp/log-level prefixes removed (signatures match this).
- `fuzzy_form`: paths, numbers, addresses, PIDs and shapes replaced by placeholders (fuzzy matching).
"""

from __future__ import annotations

import codecs
import re

from porter import rxcache
from porter.lazyre import LazyPattern

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import BinaryIO, Iterable, Iterator

CHUNK_SIZE = 1 << 20
MAX_LINE_CHARS = 32_768  # longer lines are cut; signatures sit near the start of a line

_ANSI = rxcache.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement, erase line
    r"|\x1b\][^\x07\x1b\n]{0,512}(?:\x07|\x1b\\)"  # OSC: window titles, hyperlinks (never across lines)
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
_CONTROL = rxcache.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_NEWLINES = rxcache.compile(r"\r\n|\r|\n")

# One prefix at a time; applied repeatedly because prefixes stack:
# "(RayWorker pid=1) [rank3]: 2024-01-01 10:00:00 ERROR ...". A prefix takes at most one
# separator space, so the indentation of traceback lines ("[rank1]:   File ...") survives.
_PREFIXES = rxcache.compile(
    r"""^(?:
        \((?:[A-Za-z_][\w.:=-]{0,80}[ \t]{1,4}){0,4}pid=\d+(?:,\s*ip=[\w.:-]{1,64})?\)[ \t]?  # (RayWorker pid=123) (VllmWorker rank=1 pid=7) (pid=5, ip=1.2.3.4)
      | \[rank\s?\d{1,6}\]:?[ \t]?                                            # [rank3]:
      | \[\d{1,6},\d{1,6}\]<std(?:out|err)>:\s?                              # [1,0]<stderr>: (mpirun)
      | rank\s?\d{1,6}:\s+                                                    # rank3: (torchrun --tee)
      | (?P<ts>\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\]\s*  # [2024-05-01 12:00:00,123]
              | \d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?\s*(?:\|\s*)?)  # 2024-05-01T12:00:00.123Z
      | \[\s{0,8}\d{1,8}\.\d{3,9}\]\s*                                        # dmesg [ 1234.567890]
      | (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\s+\d\d-\d\d\s\d\d:\d\d:\d\d(?:\.\d+)?[ \t]?(?:(?:\[[^\]\s]{1,120}\]|[\w.-]{1,80}:\d+\])[ \t]?)?  # vllm: INFO 05-01 12:00:00 [core.py:12] (older: core.py:12])
      | \[(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE|EVENT)\]\s*   # [ERROR]
      | [IWEF]\d{4}\s\d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+[\w.-]{1,80}:\d+\][ \t]?  # glog / Ray C++: E0501 12:00:00.1 123 file.cc:45]
    )""",
    re.VERBOSE,
)
# A level word is only a prefix right after a timestamp (a bare "ERROR: ..." is message text, e.g. pip's).
_LEVEL_AFTER_TS = rxcache.compile(r"^(?:-\s*)?(?:\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\]?)(?:\s*[-:|]\s*|\s+)")


def _clean_block(text: str) -> str:
    """ANSI escapes and control characters out of a block of lines (one C-level pass each),
    repeated while a pass changes something: removing a control character can complete an
    escape (`\x9b\x1fa`), and a cleaned line must come out the same however it was chunked."""
    while True:
        before = text
        if "\x1b" in text or "\x9b" in text:
            text = _ANSI.sub("", text)
        if _CONTROL.search(text):
            text = _CONTROL.sub("", text)
        if text == before:
            return text


def iter_batches(stream: BinaryIO, max_line: int = MAX_LINE_CHARS) -> Iterator[list[str]]:
    """Yield lists of clean lines, one list per read chunk, so callers can work chunk-wise.

    Lines are decoded (invalid UTF-8 replaced), NUL-free, split on LF/CRLF/CR, stripped of
    ANSI escapes and control characters, and cut to `max_line` characters (the rest of an
    over-long line is skipped without being held in memory). Never raises on content.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    skipping = False  # inside an over-long line: drop characters until its end
    while True:
        chunk = stream.read(CHUNK_SIZE)
        final = not chunk
        text = decoder.decode(chunk, final=final)
        if "\x00" in text:
            text = text.replace("\x00", "")
        text = pending + text
        pending = ""
        if not final and text.endswith("\r"):
            pending, text = "\r", text[:-1]  # "\r\n" may straddle the chunk boundary
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if final:
            complete, tail = text, None
        else:
            cut = text.rfind("\n")
            if cut < 0:
                if skipping:
                    continue
                if len(text) > max_line:
                    yield [_clean_block(text[:max_line])]
                    skipping = True
                else:
                    pending = text + pending
                continue
            complete, tail = text[:cut], text[cut + 1 :]
        ended_with_newline = complete.endswith("\n") or not complete
        lines = _clean_block(complete).split("\n")
        if skipping:
            lines = lines[1:]  # the end of the over-long line
            skipping = False
        if tail is not None:
            if len(tail) > max_line:
                lines.append(_clean_block(tail[:max_line]))
                skipping = True
            else:
                pending = tail + pending
        elif ended_with_newline and lines and lines[-1] == "":
            lines.pop()  # the input ended with a newline (or had nothing left)
        if lines and max(map(len, lines)) > max_line:
            lines = [line[:max_line] for line in lines]
        if lines:
            yield lines
        if final:
            return


def iter_lines(stream: BinaryIO, max_line: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Yield clean lines without their terminators (see `iter_batches`)."""
    for batch in iter_batches(stream, max_line):
        yield from batch


def iter_text_lines(text: str, max_line: int = MAX_LINE_CHARS) -> Iterator[str]:
    """`iter_lines` for an in-memory string (tests, fixtures)."""
    import io

    return iter_lines(io.BytesIO(text.encode("utf-8", "surrogatepass")), max_line)


def clean_line(line: str) -> str:
    """Remove terminal escapes and control characters; keep the message text verbatim."""
    return _clean_block(line).rstrip()


# the level word of a line's log prefix (vllm "INFO 05-01 ...", CANN plog "[INFO] HCCL(...)", "... - DEBUG - ")
_LEVEL_WORD = rxcache.compile(r"(?<![\w-])(DEBUG|INFO|TRACE|EVENT|WARNING|WARN|ERROR|CRITICAL|FATAL)(?![\w-])")
_QUIET_LEVELS = frozenset({"DEBUG", "INFO", "TRACE", "EVENT"})


def info_labelled(clean: str, text: str) -> bool:
    """Is this line an INFO/DEBUG/TRACE/EVENT record by its own log prefix (the part `strip_prefix`
    removed)? Such a line can quote an error code in passing (a timeout setting echoed with the
    code it avoids, a documentation link) but is not the failure that printed the code."""
    cut = len(clean) - len(text)
    if cut <= 0:
        return False
    m = _LEVEL_WORD.search(clean, 0, cut)
    return m is not None and m.group(1) in _QUIET_LEVELS


def strip_prefix(line: str) -> str:
    """Drop stacked rank / process / timestamp / log-level prefixes from a clean line."""
    for _ in range(6):
        m = _PREFIXES.match(line)
        if not m or m.end() == 0:
            break
        line = line[m.end() :]
        if m.group("ts") is not None:
            lv = _LEVEL_AFTER_TS.match(line)
            if lv:
                line = line[lv.end() :]
    return line


# the fuzzy forms' patterns: compiled when fuzzy matching runs (no signature matched) or a KB is planned
_PATH = LazyPattern(r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:/[\w.@+~-]+){2,}/?")
_HEX = LazyPattern(r"\b0x[0-9a-fA-F]+\b")
_PID = LazyPattern(r"\b(pid|tid|ppid)([=: ]\s*)\d+", re.IGNORECASE)
_LINENO = LazyPattern(r"\bline \d+")
_SHAPE = LazyPattern(r"(?:torch\.Size\()?\[\s*-?\d+(?:\s*,\s*-?\d+)+\s*\]\)?|\(\s*\d+(?:\s*,\s*\d+)+\s*\)")
_NUM = LazyPattern(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")
_SPACE = LazyPattern(r"\s+")


def fuzzy_form(line: str) -> str:
    """Placeholder form for fuzzy comparison: variable parts replaced, case folded."""
    line = _PATH.sub("<path>", line)
    line = _HEX.sub("<hex>", line)
    line = _PID.sub(lambda m: f"{m.group(1)}{m.group(2)}<n>", line)
    line = _LINENO.sub("line <n>", line)
    line = _SHAPE.sub("<shape>", line)
    line = _NUM.sub("<n>", line)
    return _SPACE.sub(" ", line).strip().lower()


def prepare(lines: Iterable[str]) -> Iterator[tuple[int, str, str]]:
    """Yield (1-based line number, clean line, de-prefixed line)."""
    for number, raw in enumerate(lines, 1):
        clean = clean_line(raw)
        yield number, clean, strip_prefix(clean) if clean else clean
