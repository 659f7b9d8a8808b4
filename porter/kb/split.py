"""Two processes for a big input file: a forked helper matches the later part of the file.

On a big log most of `porter diagnose`'s time is per-line work that needs no order: the
prefilter, the prefix strip, the tokens, the signature candidates and matches. The extractor
(blocks, the exception chain, codes) needs every line in order. So, for a regular file of at
least `matcher.SPLIT_MIN_BYTES`, a forked helper scans the file from chunk `k` on (about `SPLIT_AT` of
the way in) while this process scans chunks 0..k-1 as usual; from chunk k on this process only
feeds the extractor, with the helper's per-batch work (`Prepared`: wanted
lines, prefix lengths, error-ish flags, matches), and records the matches in line order.

Exactness: the helper starts reading `LEAD_BYTES` before chunk k's offset and then reads the
same 1 MiB chunks as a one-process read, so from chunk k on it decodes and splits the very
lines and batches this process does (it needs a line break in the lead, else there is no
split). A batch is used only when its end offset, line count, first and last line and the
private-key masking state agree; otherwise this process scans that batch itself. The helper is
killed and reaped when the scan ends, fails or is interrupted.
"""

from __future__ import annotations

import os
import sys

from porter.kb import matcher, normalize
from porter.kb.matcher import scan
from porter.kb.normalize import iter_batches
from porter.record import record
from porter.redact import mask_private_key_lines

# (marshal, select, signal, array and deque are imported where a split needs them: a small file,
# every warm CLI call, never forks)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO, Iterable, Iterator

    from porter.kb.index import CompiledKB
    from porter.kb.extract import Signals

SPLIT_AT = 0.4  # this process scans this share of the chunks alone, then mostly feeds the extractor
LEAD_BYTES = 64 << 10  # the helper reads this much before its first chunk, to find a line start
_PIPE_BYTES = 1 << 20  # F_SETPIPE_SZ: the helper writes ahead while this process works on its part
# records read ahead are held up to this many bytes (~10 bytes a wanted line); beyond it the
# helper waits on the full pipe, so a huge log does not pile its records up in this process
MAX_HELD_BYTES = 16 << 20
# each process's memo of recent lines (matcher.LINE_MEMO_BYTES alone): the helper's pages are
# its own (the fork shares little once both write), and the two must stay within 100 MB
SPLIT_MEMO_BYTES = 2 << 20
_F_SETPIPE_SZ = 1031


@record
class Prepared:
    """One batch as the helper process scanned it: the wanted lines (the prefilter's, in order),
    per wanted line its prefix length (the de-prefixed text is `clean[cut:]`), 1/0 whether it is
    error-ish (`is_errorish`; 2: blank), and the signatures it matched (by line index; only
    lines that matched some)."""
    wanted: list[int]
    cuts: list[int]
    errorish: bytes
    matches: dict[int, list[int]]


class IdleExtractor:
    """The helper's stand-in: never inside a traceback, keeps nothing."""

    idle = True

    def feed(self, number: int, text: str, tokens=None, errorish=None) -> None:
        pass

    def note(self, raw: str) -> None:
        pass

    def seen(self, lines: int) -> None:
        pass



class Masker:
    """PEM private-key bodies masked batch by batch (`mask_private_key_lines`), remembering the
    state each batch started in."""

    def __init__(self) -> None:
        self.inside = False
        self.before = False

    def batches(self, batches: Iterable[list[str]]) -> Iterator[list[str]]:
        for lines in batches:
            self.before = self.inside
            self.inside = mask_private_key_lines(lines, self.inside)
            yield lines


class _Offset:
    """A reader that knows how many bytes it returned (the end offset of the current chunk)."""

    def __init__(self, raw, pos: int = 0) -> None:
        self.raw, self.pos = raw, pos

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.pos += len(data)
        return data


class _Pread:
    """Reads `fd` from `pos` with pread (the other process's file offset stays untouched); the
    first read stops at `first_end`, so later reads fall on the one-process chunk offsets."""

    def __init__(self, fd: int, pos: int, first_end: int) -> None:
        self.fd, self.pos, self.first_end = fd, pos, first_end

    def read(self, n: int = -1) -> bytes:
        if self.first_end:
            n, self.first_end = self.first_end - self.pos, 0
        data = os.pread(self.fd, n, self.pos)
        self.pos += len(data)
        return data


def split_chunk(fd: int, size: int) -> int | None:
    """The chunk index the helper starts at, or None: no split (small file, or no line break in
    the lead before any of a few candidate chunks: lines longer than the lead)."""
    if size < matcher.SPLIT_MIN_BYTES:
        return None
    chunk = normalize.CHUNK_SIZE  # (read when called: tests shrink it)
    chunks = -(-size // chunk)
    first = max(1, round(chunks * SPLIT_AT))
    for k in range(first, min(chunks, first + 4)):
        lead = os.pread(fd, LEAD_BYTES, max(0, k * chunk - LEAD_BYTES))
        if b"\n" in lead[4:] or b"\r" in lead[4:-1]:  # a "\r" last may be half of "\r\n"
            return k
    return None


def _fingerprint(lines: list[str]) -> int:
    return hash((len(lines), lines[0], lines[-1])) if lines else 0


def _helper(kb: CompiledKB, fd: int, k: int, out: int) -> None:
    """The helper's whole job: scan from chunk k, one record per batch on `out`."""
    import marshal
    from array import array

    start = k * normalize.CHUNK_SIZE
    reader = _Pread(fd, max(0, start - LEAD_BYTES), start)
    masker = Masker()

    def kept() -> Iterator[list[str]]:
        for lines in iter_batches(reader):
            if reader.pos > start:  # (the lead's lines belong to the other process)
                yield lines

    def emit(lines: list[str], prep: Prepared) -> None:
        record = marshal.dumps((reader.pos, _fingerprint(lines), masker.before, array("i", prep.wanted).tobytes(),
                                array("i", prep.cuts).tobytes(), prep.errorish, prep.matches))
        data = len(record).to_bytes(8, "little") + record
        view = memoryview(data)
        while view:
            view = view[os.write(out, view):]

    scan(kb, masker.batches(kept()), emit=emit, memo_bytes=SPLIT_MEMO_BYTES)


class _Records:
    """This process's end of the pipe: records by chunk end offset, in the helper's order."""

    def __init__(self, fd: int) -> None:
        from collections import deque

        self.fd, self.buffer, self.done = fd, bytearray(), False
        self.records: "deque[tuple[int, tuple]]" = deque()  # (bytes, record)
        self.held = 0  # bytes of the records and buffer held
        os.set_blocking(fd, False)

    def _parse(self) -> None:
        import marshal

        buf = self.buffer
        while len(buf) >= 8:
            size = int.from_bytes(buf[:8], "little")
            if len(buf) < 8 + size:
                break
            self.records.append((size, marshal.loads(bytes(buf[8 : 8 + size]))))
            del buf[: 8 + size]

    def drain(self, wait: bool = False) -> None:
        """Read what the helper wrote; with `wait`, block until something came (or it ended).
        Without `wait`, nothing is read once MAX_HELD_BYTES are held."""
        while not self.done and (wait or self.held < MAX_HELD_BYTES):
            try:
                data = os.read(self.fd, _PIPE_BYTES)
            except BlockingIOError:
                if not wait:
                    return
                import select

                select.select([self.fd], [], [])
                continue
            if not data:
                self.done = True
            self.buffer += data
            self.held += len(data)
            wait = False
        self._parse()

    def _pop(self) -> tuple:
        size, record = self.records.popleft()
        self.held -= 8 + size
        return record

    def take(self, pos: int) -> tuple | None:
        """The record of the batch that ends at `pos`, or None (this process scans it)."""
        while True:
            while self.records and self.records[0][1][0] < pos:
                self._pop()  # a batch this process has not seen: stale
            if self.records:
                return self._pop() if self.records[0][1][0] == pos else None
            if self.done:
                return None
            self.drain(wait=True)


def scan_file(kb: CompiledKB, stream: BinaryIO, fd: int | None) -> tuple[dict, Signals]:
    """`porter.kb.matcher.scan` of `stream` (read from its start), in two processes when `fd`
    is a regular file big enough (see the module docstring); the result is the same."""
    k = None
    threading = sys.modules.get("threading")  # a fork while other threads run may copy a held lock
    if fd is not None and hasattr(os, "fork") and (threading is None or threading.active_count() == 1):
        try:
            st = os.fstat(fd)
            import stat

            if stat.S_ISREG(st.st_mode) and os.lseek(fd, 0, os.SEEK_CUR) == 0:
                k = split_chunk(fd, st.st_size)
        except OSError:
            k = None
    masker = Masker()
    if k is None:
        return scan(kb, masker.batches(iter_batches(stream)))
    read_end, write_end = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(write_end, _F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, OSError):
        pass  # a smaller pipe only makes the helper wait for this process to read
    pid = os.fork()
    if pid == 0:  # the helper: never returns into the caller's code
        code = 1
        try:
            os.close(read_end)
            _helper(kb, fd, k, write_end)
            code = 0
        except BaseException:  # noqa: BLE001 - Ctrl-C, a closed pipe: the main process scans on alone
            pass
        finally:
            os._exit(code)
    os.close(write_end)
    import signal
    from array import array

    start = k * normalize.CHUNK_SIZE
    records = _Records(read_end)
    reader = _Offset(stream)

    def prepared(lines: list[str]) -> Prepared | None:
        if reader.pos <= start:
            records.drain()  # keep the pipe empty while this process works on its own part
            return None
        record = records.take(reader.pos)
        if record is None:
            return None
        _, fingerprint, before, wanted, cuts, errorish, matches = record
        if fingerprint != _fingerprint(lines) or before != masker.before:
            return None
        return Prepared(array("i", wanted), array("i", cuts), errorish, matches)

    try:
        return scan(kb, masker.batches(iter_batches(reader)), prepared=prepared, memo_bytes=SPLIT_MEMO_BYTES)
    finally:
        os.close(read_end)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
