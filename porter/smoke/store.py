"""Stored smoke runs: `<runs_dir>/<host>/<run id>/result.json` plus the raw log (redacted).

A run id is the UTC start time (`20261129T091500Z`, with `-2`, `-3` ... when two runs of one
host start in the same second), so a directory listing is already in time order."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from porter.errors import EnvironmentProblem, InputError
from porter.fsutil import atomic_write_text
from porter.redact import Redactor, redact_data, sanitize_terminal

RESULT_FILE = "result.json"
LOG_FILE = "log.txt"


def run_stamp(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


@dataclass
class StoredRun:
    host: str
    run_id: str
    path: Path
    data: dict[str, Any]

    @property
    def result_path(self) -> Path:
        return self.path / RESULT_FILE

    @property
    def log_path(self) -> Path:
        return self.path / LOG_FILE


class LogWriter:
    """Appends redacted lines to the run's log as they arrive, so a partial log survives anything."""

    def __init__(self, path: Path):
        self.path = path
        self._fh: TextIO = open(path, "a", encoding="utf-8")
        self._redactor = Redactor()

    def line(self, text: str) -> str | None:
        """Store one line; returns it redacted and with terminal control sequences neutralised
        (None inside a private key block) for display."""
        red = self._redactor.line(sanitize_terminal(text))
        if red is not None:
            self._fh.write(red + "\n")
            self._fh.flush()
        return red

    def close(self) -> None:
        self._fh.close()


class RunStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def create(self, host: str, when: datetime) -> tuple[str, Path]:
        base = run_stamp(when)
        host_dir = self.root / host
        try:
            host_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EnvironmentProblem(f"cannot create the run record directory {host_dir}: {exc.strerror or exc}",
                                     hint="set `runs_dir` in porter.yaml to a writable directory") from None
        for n in range(1, 1000):
            run_id = base if n == 1 else f"{base}-{n}"
            try:
                (host_dir / run_id).mkdir()
                return run_id, host_dir / run_id
            except FileExistsError:
                continue
        raise InputError(f"too many runs of host {host} in one second under {host_dir}")

    def save(self, run_dir: Path, payload: dict[str, Any]) -> Path:
        path = run_dir / RESULT_FILE
        atomic_write_text(path, json.dumps(redact_data(payload), indent=2, sort_keys=False, default=str) + "\n")
        return path

    def _load_dir(self, path: Path) -> StoredRun:
        result = path / RESULT_FILE
        try:
            data = json.loads(result.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: no {RESULT_FILE} (not a smoke run directory)") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise InputError(f"{result}: unreadable run record: {exc}") from None
        return StoredRun(str(data.get("host", path.parent.name)), str(data.get("run_id", path.name)), path, data)

    def runs(self, host: str | None = None) -> list[StoredRun]:
        if not self.root.is_dir():
            return []
        hosts = [self.root / host] if host else sorted(p for p in self.root.iterdir() if p.is_dir())
        found = []
        for host_dir in hosts:
            if not host_dir.is_dir():
                continue
            for run_dir in sorted(p for p in host_dir.iterdir() if (p / RESULT_FILE).is_file()):
                try:
                    found.append(self._load_dir(run_dir))
                except InputError:
                    continue  # a damaged record does not hide the others
        return found

    def resolve(self, ref: str) -> StoredRun:
        """A run from a path (run directory or result.json), `HOST/RUN_ID`, or `HOST` (its latest run)."""
        path = Path(ref).expanduser()
        if path.is_file() and path.name == RESULT_FILE:
            return self._load_dir(path.parent)
        if path.is_dir() and (path / RESULT_FILE).is_file():
            return self._load_dir(path)
        candidate = self.root / ref
        if "/" in ref and (candidate / RESULT_FILE).is_file():
            return self._load_dir(candidate)
        if "/" not in ref and candidate.is_dir():
            runs = self.runs(ref)
            if runs:
                return runs[-1]
        raise InputError(
            f"no stored smoke run {ref!r}",
            hint=f"pass a run directory, a result.json, HOST/RUN_ID or HOST (runs live under {self.root})",
        )
