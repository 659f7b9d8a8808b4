"""The archive shipped to a host: the vime runtime (with its shims) and the stack being verified."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path
from typing import Any, Iterable

STACK_FILE = "porter-stack.json"
ENV_FILE = ".porter-env"  # secret variables for the run; sourced and deleted by the run script
_SKIP_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def runtime_root() -> Path:
    import vime.results  # a module file: `vime` itself may load as a namespace in editable installs

    return Path(vime.results.__file__).resolve().parent


def _walk(root: Path) -> Iterable[Path]:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in _SKIP_DIRS for part in rel.parts) or path.suffix in _SKIP_SUFFIXES:
            continue
        if path.is_file():
            yield path


def build_bundle(stack: dict[str, Any], extra: Iterable[tuple[Path, str]] = (), runtime: Path | None = None,
                 env_file: str | None = None) -> bytes:
    """A tar.gz with `vime/`, `porter-stack.json`, any (source dir, archive name) extras, and
    `env_file` (shell export lines, mode 0600) when given. Members get fixed mtimes and owners,
    so the same inputs give the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:

        def add_bytes(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = mode
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))

        sources = [(runtime or runtime_root(), "vime"), *extra]
        for root, arcname in sources:
            for path in _walk(root):
                add_bytes(f"{arcname}/{path.relative_to(root).as_posix()}", path.read_bytes())
        add_bytes(STACK_FILE, json.dumps(stack, indent=2, sort_keys=True, default=str).encode())
        if env_file is not None:
            add_bytes(ENV_FILE, env_file.encode(), mode=0o600)
    return gzip.compress(buffer.getvalue(), compresslevel=6, mtime=0)  # no timestamp in the gzip header
