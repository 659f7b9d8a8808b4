"""A tree's cached records in one file: content key -> pickled record.

The index (one record per parsed upstream module) and the plugin scan (one per plugin file) used to
keep a file per record under a directory per key prefix: a cold analysis of two vllm trees and
vllm-ascend created ~800 such files and ~400 directories, about 1 s of (mostly system) CPU in the
workers on the shared 2-core machine. A pack is one file per tree, written once per run by the
parent, which holds every record anyway (the workers send them back). Records are still found by
content key, so an edited file misses alone; a pack is named by the tree's root.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

from porter.fsutil import atomic_write_bytes

PACK_FORMAT = "porter-pack/1"


def pack_path(directory: Path | None, root: Path, *parts: str) -> Path | None:
    """The pack of the tree at `root` under `directory` (None: no cache). `parts` name anything else
    the records depend on that the content keys do not (kept out of the name when empty)."""
    if directory is None:
        return None
    digest = hashlib.blake2b(digest_size=16)
    for part in (str(Path(root).resolve()), *parts):
        digest.update(part.encode())
        digest.update(b"\0")
    return Path(directory) / f"{digest.hexdigest()}.pack"


class Pack:
    """The records of one pack file, loaded at the first lookup; new ones are written by save()."""

    def __init__(self, path: Path | None):
        self.path = path
        self._entries: dict[str, bytes] | None = None
        self._used: set[str] = set()
        self._dirty = False

    def _loaded(self) -> dict[str, bytes]:
        if self._entries is None:
            self._entries = {}
            if self.path is not None and self.path.is_file():
                try:
                    form, entries = pickle.loads(self.path.read_bytes())
                    if form == PACK_FORMAT and isinstance(entries, dict):
                        self._entries = entries
                except Exception:  # noqa: BLE001 - a damaged pack is a miss for every record
                    self._entries = {}
        return self._entries

    def get(self, key: str) -> bytes | None:
        blob = self._loaded().get(key) if self.path is not None else None
        if blob is not None:
            self._used.add(key)
        return blob

    def put(self, key: str, blob: bytes) -> None:
        if self.path is None:
            return
        entries = self._loaded()
        self._used.add(key)
        if entries.get(key) != blob:
            entries[key] = blob
            self._dirty = True

    def save(self, keep: int | None = None) -> None:
        """Write the pack when a record was added. `keep`: at most this many records; beyond it only
        those used by this run stay (None: only those, which drops the records of edited files)."""
        entries = self._entries
        if self.path is None or entries is None:
            return
        if keep is None or len(entries) > keep:
            kept = {k: v for k, v in entries.items() if k in self._used}
            if len(kept) != len(entries):
                entries = self._entries = kept
                self._dirty = True
        if not self._dirty:
            return
        atomic_write_bytes(self.path, pickle.dumps((PACK_FORMAT, entries), protocol=pickle.HIGHEST_PROTOCOL), durable=False)
        self._dirty = False
