"""A bounded sample of a stream that is read once: its head and its tail, kept while the stream
passes through to the knowledge-base scan (the history search reads versions, banners and an
embedded `Type: message` from them, never the whole input)."""

from __future__ import annotations

from typing import BinaryIO

HEAD_BYTES = 1_000_000  # versions and banners print at the start of a log ...
TAIL_BYTES = 1_000_000  # ... and the crash at its end


class HeadTailReader:
    """Wraps a binary stream: reads pass through unchanged; the first `head` and the last `tail`
    bytes are kept (memory stays within head + 2 * tail, whatever the input's size)."""

    def __init__(self, raw: BinaryIO, head: int = HEAD_BYTES, tail: int = TAIL_BYTES) -> None:
        self.raw = raw
        self.head_limit = head
        self.tail_limit = tail
        self.head = bytearray()
        self.tail = bytearray()
        self.bytes = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.bytes += len(data)
        rest = data
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += rest[:room]
            rest = rest[room:]
        if rest:
            self.tail += rest
            if len(self.tail) > 2 * self.tail_limit:  # trim in steps: amortised, not per read
                del self.tail[: len(self.tail) - self.tail_limit]
        return data

    @property
    def truncated(self) -> bool:
        return self.bytes > len(self.head) + min(len(self.tail), self.tail_limit)

    def text(self) -> str:
        """Head and tail as text; a line marks the gap when the middle was dropped."""
        tail = bytes(self.tail[-self.tail_limit:]) if self.tail else b""
        if not self.truncated:
            return (bytes(self.head) + tail).decode("utf-8", "replace")
        return bytes(self.head).decode("utf-8", "replace") + "\n[... middle of the input not kept ...]\n" + tail.decode("utf-8", "replace")
