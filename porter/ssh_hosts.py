"""Hosts from the user's OpenSSH config: `porter smoke --host a3` works for a `Host a3` entry
without a porter profile (transport ssh, address = the name, so ssh applies that entry), and
`porter hosts check a3` remembers the device kind it probed for such a derived profile."""

from __future__ import annotations

import glob
import os
import shlex
from pathlib import Path
from typing import Any

PROBED_FILE = "probed-hosts.yaml"
_MAX_INCLUDE_DEPTH = 8  # OpenSSH's own limit on nested Include


def default_ssh_config() -> Path:
    return Path(os.path.expanduser("~")) / ".ssh" / "config"


def ssh_config_hosts(path: Path | None = None) -> list[str]:
    """The literal names of `Host` lines (patterns with * ? ! are not names), following `Include`."""
    path = default_ssh_config() if path is None else Path(path)
    names: list[str] = []
    _collect(path, names, depth=0)
    return list(dict.fromkeys(names))


def _collect(path: Path, names: list[str], depth: int) -> None:
    if depth > _MAX_INCLUDE_DEPTH:
        return
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, rest = line.replace("=", " ", 1).partition(" ")
        try:
            values = shlex.split(rest, comments=True)
        except ValueError:
            continue
        if key.lower() == "host":
            names.extend(v for v in values if not any(c in v for c in "*?!"))
        elif key.lower() == "include":
            for pattern in values:
                pattern = os.path.expanduser(pattern)
                if not os.path.isabs(pattern):
                    pattern = str(Path(os.path.expanduser("~")) / ".ssh" / pattern)
                for included in sorted(glob.glob(pattern)):
                    _collect(Path(included), names, depth + 1)


def probed_kinds(config_dir: Path) -> dict[str, str]:
    from porter.yamlio import load_yaml_file

    path = Path(config_dir) / PROBED_FILE
    if not path.is_file():
        return {}
    data = load_yaml_file(path) or {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def remember_kind(config_dir: Path, name: str, kind: str) -> Path:
    from porter.yamlio import write_yaml_atomic

    path = Path(config_dir) / PROBED_FILE
    write_yaml_atomic(path, {**probed_kinds(config_dir), name: kind},
                      header="# device kinds `porter hosts check` probed for hosts taken from ~/.ssh/config\n")
    return path


def derived_profile_data(name: str, device_kind: str | None) -> dict[str, Any]:
    return {"transport": "ssh", "address": name, "device_kind": device_kind or "cpu",
            "description": f"derived from `Host {name}` in ~/.ssh/config"}
