"""The one subprocess runner: argument lists only, a timeout, and the whole process group
killed on timeout or interrupt so nothing is left running."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from porter.errors import EnvironmentProblem


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    input_text: str | None = None,
    check: bool = False,
    what: str | None = None,
) -> Completed:
    """Run `argv` (never through a shell). `check=True` raises EnvironmentProblem on failure."""
    argv = [str(a) for a in argv]
    full_env = dict(os.environ if env is None else env)
    if extra_env:
        full_env.update(extra_env)
    try:
        proc = subprocess.Popen(
            argv,
            cwd=str(cwd) if cwd else None,
            env=full_env,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise EnvironmentProblem(
            f"cannot run {argv[0]!r}: not found", hint=f"install {argv[0]} or put it on PATH"
        ) from exc
    except PermissionError as exc:
        raise EnvironmentProblem(f"cannot run {argv[0]!r}: permission denied") from exc
    timed_out = False
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    except BaseException:  # KeyboardInterrupt included: leave nothing running
        _kill_group(proc)
        raise
    result = Completed(tuple(argv), proc.returncode, out or "", err or "", timed_out)
    if check and not result.ok:
        label = what or " ".join(argv[:3])
        reason = f"timed out after {timeout:g} s" if timed_out else f"exit {result.returncode}"
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise EnvironmentProblem(
            f"{label} failed ({reason})" + (": " + " | ".join(tail) if tail else ""),
            details={"argv": list(argv), "returncode": result.returncode},
        )
    return result
