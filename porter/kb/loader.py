"""Load knowledge/patterns/**/*.yaml into typed entries, with a compiled cache.

Parsing ~130 YAML files costs more than the whole diagnosis, so the validated entries are
cached as plain data (marshal of dicts, tuples, strings and numbers: loading runs no code)
under `<cache_dir>/kb/`, keyed by a hash of every file's name and content and the engine
version. A changed file changes the key; a corrupt cache file is ignored and rebuilt; up to
CACHE_SLOTS compiled KBs live side by side. A KB that is not the bundled one (`--kb`, a
project's knowledge_dir) must pass the regex-safety check before it is used or cached.
"""

from __future__ import annotations

import marshal
import os
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

from porter.kb.schema import SCHEMA_VERSION, KBEntry, Problem, parse_entry
from porter.record import field, record

ENGINE_VERSION = f"{SCHEMA_VERSION}.16-py{sys.version_info[0]}.{sys.version_info[1]}"  # bump when the cached representation changes


@record
class LoadedKB:
    entries: list[KBEntry]
    problems: list[Problem] = field(default_factory=list)
    files: Sequence[Path] = field(default_factory=list)  # a PathList from load_kb (Paths made on access)
    from_cache: bool = False
    skipped: int = 0  # files that could not be turned into an entry
    plan: dict | None = None  # CompiledKB.plan() of the entries, when it came from the cache
    patterns_dir: Path | None = None
    cache_dir: Path | None = None  # where load_kb keeps its caches (the calibration memo too)

    def compiled(self, calibrated: bool = True):
        from porter.kb.index import CompiledKB

        kb = CompiledKB.build(self.entries, self.plan)
        if calibrated and self.patterns_dir is not None:
            from porter.kb.calibrate import calibration_path, load

            kb.calibration = load(calibration_path(self.patterns_dir), self.cache_dir)
        return kb


def entry_files(patterns_dir: Path) -> list[Path]:
    """The entry files under `patterns_dir`, sorted: what `sorted(rglob("*.yaml"))` lists, less
    hidden files and non-files. os.scandir knows each entry's type from the directory listing,
    so this costs no stat per file (rglob + is_file was half of a warm `porter diagnose`'s KB load)."""
    return [Path(p) for p in _entry_paths(patterns_dir)]


def _entry_paths(patterns_dir: Path) -> list[str]:
    """`entry_files` as strings."""
    if not os.path.isdir(patterns_dir):
        return []
    found: list[str] = []

    def walk(directory: str) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        for entry in entries:
            try:
                if entry.is_dir() and not entry.is_symlink():  # rglob does not follow linked folders
                    walk(entry.path)
                elif entry.name.endswith(".yaml") and not entry.name.startswith(".") and entry.is_file():
                    found.append(entry.path)
            except OSError:
                continue

    walk(str(patterns_dir))
    # by path components, as Paths sort (a plain string sort puts "a-b/x" before "a/x")
    return sorted(found, key=lambda p: p.split(os.sep))


def _display(path: Path, base: Path | None) -> str:
    if base is not None:
        try:
            return str(path.relative_to(base))
        except ValueError:
            pass
    return str(path)


def _yaml_load(text: str, source: str):
    """Safe YAML through the C loader when present; errors name the file and line."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader class
    except yaml.YAMLError:
        from porter.yamlio import load_yaml_text

        return load_yaml_text(text, source)  # re-parse to raise the project's InputError with line info


def load_file(path: Path, patterns_dir: Path, display_base: Path | None = None) -> tuple[KBEntry | None, list[Problem]]:
    from porter.errors import InputError

    shown = _display(path, display_base)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(shown, "", f"cannot read: {exc}", "save the file as UTF-8")]
    try:
        data = _yaml_load(text, shown)
    except InputError as exc:
        return None, [Problem(shown, "", exc.message.split(": ", 1)[-1], "fix the YAML syntax (indentation, quoting, colons)")]
    try:
        layer_dir = path.parent.relative_to(patterns_dir).parts[0]
    except (ValueError, IndexError):
        layer_dir = None
    entry, problems = parse_entry(data, shown, layer_dir)
    if entry is not None and entry.id and path.stem != entry.id:
        problems.append(Problem(shown, "id", f"file name {path.name!r} does not match id {entry.id!r}", f"rename the file to {entry.id}.yaml"))
    return entry, problems


def load_entries(patterns_dir: Path, display_base: Path | None = None) -> LoadedKB:
    """Parse and validate every entry file (no cache). Unusable files are skipped."""
    files = entry_files(patterns_dir)
    entries: list[KBEntry] = []
    problems: list[Problem] = []
    skipped = 0
    for path in files:
        entry, file_problems = load_file(path, patterns_dir, display_base)
        problems.extend(file_problems)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    return LoadedKB(entries, problems, files, from_cache=False, skipped=skipped, patterns_dir=Path(patterns_dir))


def cache_key(files: list[Path]) -> str:
    """64-bit key (crc32 + adler32) of the engine version and every file's path and *content*.

    Content, not mtimes: a checkout, a copy or `touch` must not invalidate the cache, and two
    copies of one KB share one cache file. zlib rather than hashlib: importing hashlib
    initialises OpenSSL, a cost every cold `porter diagnose` would pay.
    """
    crc, adler = zlib.crc32(ENGINE_VERSION.encode()), zlib.adler32(ENGINE_VERSION.encode())
    for path in files:
        try:
            with open(path, "rb", buffering=0) as fh:  # unbuffered: one read, no buffer object
                data = fh.read()
        except OSError:
            continue
        name = path.name.encode() + b"\0"
        crc, adler = zlib.crc32(data, zlib.crc32(name, crc)), zlib.adler32(data, zlib.adler32(name, adler))
    return f"{crc:08x}{adler:08x}{len(files):04x}"


STAT_MEMOS = 16  # stat memos kept per cache dir (one per distinct state of a KB's files)
RACY_NS = 2_000_000_000  # a file changed this recently may change again within one timestamp tick


def stat_key(paths: list[str]) -> tuple[str, int]:
    """(key of every file's path, size, mtime, ctime and inode; the newest of those times in ns).
    A file's content cannot change without changing its ctime, which no tool can set back."""
    parts, newest = [], 0
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            parts.append(f"{path}\0-\n")
            continue
        parts.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\n")
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    blob = (ENGINE_VERSION + "\n" + "".join(parts)).encode("utf-8", "surrogateescape")
    return f"{zlib.crc32(blob):08x}{zlib.adler32(blob):08x}{len(paths):04x}", newest


def content_key(paths: list[str], memo_dir: Path | None) -> str:
    """`cache_key` of the files, through a memo keyed by their stat data (`stat_key`), so a warm
    call reads no entry file (reading ~350 files for their checksum was a third of the KB load).
    A file changed within RACY_NS of the check is read, as git does with racily clean files."""
    import time

    if memo_dir is None:
        return cache_key([Path(p) for p in paths])
    skey, newest = stat_key(paths)
    memo = memo_dir / f"stat-{skey}"
    try:
        with open(memo, "rb", buffering=0) as fh:
            found = fh.read().decode("ascii")
        if len(found) == 20:
            return found
    except (OSError, UnicodeDecodeError):
        pass
    key = cache_key([Path(p) for p in paths])
    if newest < time.time_ns() - RACY_NS:
        try:
            from porter.fsutil import atomic_write_bytes

            atomic_write_bytes(memo, key.encode("ascii"), durable=False)
            others = sorted((p for p in memo_dir.glob("stat-*") if p != memo), key=_mtime, reverse=True)
            for old in others[STAT_MEMOS - 1 :]:
                old.unlink(missing_ok=True)
        except OSError:
            pass
    return key


class PathList(Sequence):
    """Paths made on access: a warm diagnose never looks at them, and making ~360 Path objects
    was about 1 ms of its KB load. A sequence of Path."""

    def __init__(self, paths: list[str]) -> None:
        self._paths = paths

    def __len__(self) -> int:
        return len(self._paths)

    def __getitem__(self, index):  # noqa: ANN001
        if isinstance(index, slice):
            return [Path(p) for p in self._paths[index]]
        return Path(self._paths[index])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, PathList)):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


class LazyEntries(Sequence):
    """The cached entries, each decoded and restored on first access: a diagnosis reads the
    few entries whose signatures hit (the plan carries every signature's kind and pattern),
    and restoring all ~350 was a quarter of a warm call's KB load. A sequence of KBEntry."""

    def __init__(self, blobs: list[bytes]) -> None:
        self._blobs = blobs
        self._made: list[KBEntry | None] = [None] * len(blobs)

    def __len__(self) -> int:
        return len(self._blobs)

    def __getitem__(self, index):  # noqa: ANN001
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._blobs)))]
        entry = self._made[index]
        if entry is None:
            entry = self._made[index] = KBEntry.from_dict(_plain_data(self._blobs[index], dict))
        return entry

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, LazyEntries)):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


def _plain_data(raw: bytes, kind: type):
    """marshal data of type `kind` (ValueError otherwise): marshal, not pickle, because it builds
    only builtin values (no class is looked up or called) and `import pickle` alone is ~3 ms."""
    data = marshal.loads(raw)
    if type(data) is not kind:
        raise ValueError("not KB cache data")
    return data


def _read_cache(path: Path) -> tuple[LazyEntries, dict] | None:
    try:
        data = _plain_data(path.read_bytes(), dict)
        if data.get("engine") != ENGINE_VERSION:
            return None
        blobs = data["entries"]
        # one checksum over the entry blobs: they are decoded later, when a damaged one could no longer mean "rebuild"
        if not isinstance(blobs, list) or zlib.crc32(b"".join(blobs)) != data["entries_crc"]:
            return None
        plan = data["plan"]
        if not isinstance(plan, dict) or len(plan["sigs"]) != len(plan["specs"]) or len({(ei, si) for ei, si, _, _ in plan["sigs"]}) != data["signatures"]:
            return None
        return LazyEntries(blobs), plan
    except Exception:  # noqa: BLE001 - any damage means "rebuild"
        return None


CACHE_SLOTS = 8  # compiled KBs kept per cache dir: processes using different KBs must not evict each other


def _write_cache(path: Path, entries: list[KBEntry], plan: dict, problems: int) -> None:
    from porter.fsutil import atomic_write_bytes

    blobs = [marshal.dumps(e.to_dict()) for e in entries]
    payload = {"engine": ENGINE_VERSION, "entries": blobs, "entries_crc": zlib.crc32(b"".join(blobs)), "plan": plan,
               "signatures": sum(len(e.signatures) for e in entries), "problems": problems}
    try:
        # atomic: a concurrent reader sees the old file or the new one, never half of one
        atomic_write_bytes(path, marshal.dumps(payload))
        others = sorted((p for p in path.parent.glob("kb-*.marshal") if p != path), key=_mtime, reverse=True)
        for old in others[CACHE_SLOTS - 1 :]:
            old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only cache dir only costs speed


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def is_bundled(patterns_dir: Path) -> bool:
    """The knowledge base shipped with porter (its regexes are checked by `porter kb lint` in CI)."""
    from porter.config import bundled_root

    try:
        return Path(patterns_dir).resolve() == (bundled_root() / "knowledge" / "patterns").resolve()
    except OSError:
        return False


def check_regex_safety(entries: list[KBEntry]) -> None:
    """Refuse a KB with a regex that could stall on a crafted line (the bundled KB's lint rule)."""
    from porter.errors import InputError
    from porter.kb.regexsafety import check_regex

    bad = []
    verdicts: dict[str, object] = {}
    for entry in entries:
        for i, sig in enumerate(entry.signatures):
            if sig.kind != "regex":
                continue
            verdict = verdicts.get(sig.pattern) or verdicts.setdefault(sig.pattern, check_regex(sig.pattern))
            if not verdict.ok:
                bad.append(f"{entry.path or entry.id}: signatures.items[{i}]: {verdict.problem}")
    if bad:
        raise InputError(
            f"knowledge base refused: {len(bad)} unsafe regex(es): " + "; ".join(bad[:5]) + (" ..." if len(bad) > 5 else ""),
            hint="bound every repetition (.{0,200} instead of .*) and avoid nested quantifiers; `porter kb lint --kb DIR` lists them all",
        )


def load_kb(patterns_dir: Path, cache_dir: Path | None = None, use_cache: bool = True) -> LoadedKB:
    """Entries for matching. With a cache dir, reuse the compiled entries when no file changed."""
    patterns_dir = Path(patterns_dir)
    paths = _entry_paths(patterns_dir)
    files = PathList(paths)
    cache_path = None
    if use_cache and cache_dir is not None and os.environ.get("PORTER_KB_NO_CACHE") != "1":
        cache_path = Path(cache_dir) / "kb" / f"kb-{content_key(paths, Path(cache_dir) / 'kb')}.marshal"
        cached = _read_cache(cache_path)
        if cached is not None:
            return LoadedKB(cached[0], [], files, from_cache=True, plan=cached[1], patterns_dir=patterns_dir, cache_dir=Path(cache_dir))
    loaded = load_entries(patterns_dir)
    loaded.cache_dir = Path(cache_dir) if cache_path is not None else None
    if not is_bundled(patterns_dir):
        check_regex_safety(loaded.entries)  # once per content: the result is cached with the entries
    if cache_path is not None:
        from porter.kb.index import CompiledKB

        loaded.plan = CompiledKB.plan(loaded.entries)
        _write_cache(cache_path, loaded.entries, loaded.plan, len(loaded.problems))
    return loaded
