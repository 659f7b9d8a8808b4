"""The one YAML loader: safe loading, errors that name the file and line."""

from __future__ import annotations

import os
from pathlib import Path

from porter.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any

# pyyaml is imported inside the functions: most CLI invocations never read YAML (the KB is
# served from its compiled cache), and the import costs ~20 ms of cold start.


# YAML aliases let a few lines stand for gigabytes ("billion laughs"); configuration and KB files
# need few or none, so more than this many is refused before anything is built.
MAX_ALIASES = 50


def _check_alias_budget(yaml: Any, text: str, loader: Any, source: str) -> None:
    if "*" not in text:
        return  # no alias can occur without its '*'
    aliases = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise InputError(f"{source}: more than {MAX_ALIASES} YAML aliases (*name): refused, "
                                 "an alias tree can expand to gigabytes",
                                 hint="write the values out instead of repeating anchors")


def load_yaml_text(text: str, source: str = "<text>") -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_alias_budget(yaml, text, loader, source)
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(
            f"{source}: invalid YAML{where}: {problem}",
            hint="fix the YAML syntax in that file (indentation, quoting, colons)",
        ) from exc


def load_yaml_file(path: Path) -> Any:
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            memo = _memo_path(path)
            cached = _memo_read(memo, st)
            if cached is not _MISSING:
                return cached
            text = fh.read().decode("utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file", hint="check the path") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}", hint="check permissions and encoding (UTF-8)") from exc
    data = load_yaml_text(text, str(path))
    _memo_write(memo, st, data)
    return data


# Parsed files are memoized as marshal data (dicts, lists, strings, numbers: loading runs no code)
# under the cache home, keyed by path, size, mtime and inode: a warm `porter upgrade` reads its
# registry and porter.yaml without importing pyyaml (~20 ms). A file changed within the last
# seconds is not memoized (a same-size edit could keep its mtime); data marshal cannot write
# (a YAML date) is not either.
_MISSING = object()
_RACY_SECONDS = 2.0


def _memo_path(path: Path) -> str:
    import hashlib
    import sys

    from porter.cachehome import cache_home

    ident = f"{os.path.abspath(path)}\0{sys.version_info[:2]}".encode()
    return os.path.join(cache_home(), "yaml", hashlib.blake2b(ident, digest_size=12).hexdigest() + ".marshal")


def _memo_stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def _memo_read(memo: str, st: os.stat_result) -> Any:
    from porter import marshalmemo

    found = marshalmemo.load(memo)
    if type(found) is tuple and len(found) == 2 and found[0] == _memo_stamp(st):
        return found[1]
    return _MISSING


def _memo_write(memo: str, st: os.stat_result, data: Any) -> None:
    import time

    from porter import marshalmemo

    if time.time() - st.st_mtime < _RACY_SECONDS:
        return
    marshalmemo.store(memo, (_memo_stamp(st), data))  # not for a value marshal cannot hold (a date): parsed each time


def dump_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def write_yaml_atomic(path: Path, data: Any, header: str = "") -> None:
    """Write YAML through a temporary file and rename, so readers never see half a file."""
    from porter.fsutil import atomic_write_text

    atomic_write_text(Path(path), header + dump_yaml(data))
