"""Helpers for the host tests (a copy of tests/smoke/smoke_helpers.py: test dirs do not import each other): config writing, CLI invocation, fake interpreters, process checks."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import yaml
from typer.testing import CliRunner

from porter.cli import app

STALL_BODY = """echo $$ > "{pids}/main.pid"
sleep 300 &
echo $! > "{pids}/child.pid"
echo "vime.smoke: L0.python pass (0.00 s)" >&2
echo '{{"schema":"vime.smoke/1","level":"L0","resu'
sleep 300
"""


def write_config(root: Path, hosts: dict, **extra) -> None:
    doc = {"runs_dir": "runs", **extra}
    if hosts:
        doc["hosts"] = hosts
    (root / "porter.yaml").write_text(yaml.safe_dump(doc))


def invoke(*args: str) -> tuple[int, dict | None, str]:
    result = CliRunner().invoke(app, list(args))
    doc = None
    if "--json" in args:
        try:
            doc = json.loads(result.stdout)
        except json.JSONDecodeError:
            doc = None
    return result.exit_code, doc, result.output


def fake_python(path: Path, body: str, shebang: str = "#!/bin/bash") -> Path:
    """An executable that stands in for python (or docker) on a host."""
    path.write_text(shebang + "\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def process_gone(pid: int, wait_s: float = 8.0) -> bool:
    """True once `pid` has exited (a zombie counts as gone: it runs nothing)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False
