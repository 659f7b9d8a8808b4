"""Small on-disk memos of parsed data (YAML, TOML, JSON documents) as marshal: plain dicts, lists,
strings and numbers, so loading one runs no code and needs no parser import. A memo is only ever a
speed-up: a missing, unreadable or foreign file reads as MISSING, and a value marshal cannot hold
(a YAML or TOML date) or an unwritable cache is simply not memoised. Standard library only."""

from __future__ import annotations

import marshal
from pathlib import Path

# no `typing` import: this module is on the warm `porter diagnose` path, which imports typing nowhere else
MISSING = object()  # what `load` returns when there is no usable memo


def content_tag(data: bytes) -> str:
    """A file-name key for `data`'s content (crc32, adler32 and length: an edit is a new key)."""
    import zlib

    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}{len(data):x}"


def load(path: str | Path) -> object:
    """The value memoised at `path`, or MISSING."""
    try:
        with open(path, "rb") as fh:
            return marshal.loads(fh.read())
    except (OSError, EOFError, ValueError, TypeError):
        return MISSING


def store(path: str | Path, value: object) -> None:
    """Memoise `value` at `path` (atomically, not fsynced) when marshal can hold it and the cache is writable."""
    try:
        blob = marshal.dumps(value)
    except ValueError:
        return
    try:
        from porter.fsutil import atomic_write_bytes

        atomic_write_bytes(Path(path), blob, durable=False)
    except OSError:
        pass  # a read-only cache only costs the parse next time
