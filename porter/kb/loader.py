"""Load knowledge/patterns/**/*.yaml into typed entries, with a compiled cache.

Parsing ~130 YAML files costs more than the whole diagnosis, so the validated entries are
cached as plain data (pickle of dicts, strings and numbers only; loading refuses any class)
under `<cache_dir>/kb/`, keyed by a hash of every file's (path, size, mtime_ns) and the
engine version. A changed file changes the key; a corrupt cache file is ignored and rebuilt.
"""

from __future__ import annotations

import io
import os
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from porter.kb.schema import SCHEMA_VERSION, KBEntry, Problem, parse_entry

ENGINE_VERSION = f"{SCHEMA_VERSION}.6"  # bump when the cached representation changes


@dataclass
class LoadedKB:
    entries: list[KBEntry]
    problems: list[Problem] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    from_cache: bool = False
    skipped: int = 0  # files that could not be turned into an entry
    plan: dict | None = None  # CompiledKB.plan() of the entries, when it came from the cache

    def compiled(self):
        from porter.kb.index import CompiledKB

        return CompiledKB.build(self.entries, self.plan)


def entry_files(patterns_dir: Path) -> list[Path]:
    if not patterns_dir.is_dir():
        return []
    return sorted(p for p in patterns_dir.rglob("*.yaml") if p.is_file() and not p.name.startswith("."))


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
    return LoadedKB(entries, problems, files, from_cache=False, skipped=skipped)


def cache_key(files: list[Path]) -> str:
    """64-bit key (crc32 + adler32) of the engine version and every file's path, size, mtime.

    zlib rather than hashlib: importing hashlib initialises OpenSSL, a cost every cold
    `porter diagnose` would pay; a collision only means one stale rebuild check.
    """
    parts = [ENGINE_VERSION]
    for path in files:
        try:
            st = path.stat()
        except OSError:
            continue
        parts.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}")
    data = "\n".join(parts).encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}{len(files):04x}"


class _PlainUnpickler(pickle.Unpickler):
    """Only builtin containers and scalars: a tampered cache cannot run code."""

    def find_class(self, module, name):  # noqa: ANN001
        raise pickle.UnpicklingError(f"refusing {module}.{name} in the KB cache")


def _read_cache(path: Path) -> tuple[list[KBEntry], dict] | None:
    try:
        raw = path.read_bytes()
        data = _PlainUnpickler(io.BytesIO(raw)).load()
        if not isinstance(data, dict) or data.get("engine") != ENGINE_VERSION:
            return None
        entries = [KBEntry.from_dict(d) for d in data["entries"]]
        plan = data["plan"]
        if not isinstance(plan, dict) or len({(ei, si) for ei, si, _, _ in plan["sigs"]}) != sum(len(e.signatures) for e in entries):
            return None
        return entries, plan
    except Exception:  # noqa: BLE001 - any damage means "rebuild"
        return None


def _write_cache(path: Path, entries: list[KBEntry], plan: dict, problems: int) -> None:
    from porter.fsutil import atomic_write_bytes

    payload = {"engine": ENGINE_VERSION, "entries": [e.to_dict() for e in entries], "plan": plan, "problems": problems}
    try:
        atomic_write_bytes(path, pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
        for old in path.parent.glob("kb-*.pickle"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only cache dir only costs speed


def load_kb(patterns_dir: Path, cache_dir: Path | None = None, use_cache: bool = True) -> LoadedKB:
    """Entries for matching. With a cache dir, reuse the compiled entries when no file changed."""
    patterns_dir = Path(patterns_dir)
    files = entry_files(patterns_dir)
    cache_path = None
    if use_cache and cache_dir is not None and os.environ.get("PORTER_KB_NO_CACHE") != "1":
        cache_path = Path(cache_dir) / "kb" / f"kb-{cache_key(files)}.pickle"
        cached = _read_cache(cache_path)
        if cached is not None:
            return LoadedKB(cached[0], [], files, from_cache=True, plan=cached[1])
    loaded = load_entries(patterns_dir)
    if cache_path is not None:
        from porter.kb.index import CompiledKB

        loaded.plan = CompiledKB.plan(loaded.entries)
        _write_cache(cache_path, loaded.entries, loaded.plan, len(loaded.problems))
    return loaded
