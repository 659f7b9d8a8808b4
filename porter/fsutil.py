"""Filesystem helpers: atomic writes, so a crash never leaves half a file behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` via a temporary file and a rename. `durable=False` skips the fsync:
    for rebuildable cache entries (a crash loses the entry, never half of it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def shared_file_mode(path: Path) -> int:
    """Permissions for a file people share (stack files, reports): the existing file's, or what
    a plain open() gives under the umask. mkstemp's 0600 is right only for private files."""
    import stat

    try:
        return stat.S_IMODE(Path(path).stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
