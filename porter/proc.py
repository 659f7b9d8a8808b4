"""The one subprocess runner: argument lists only, a timeout, and the whole process group
killed on timeout or interrupt so nothing is left running."""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from porter.errors import EnvironmentProblem

# `porter -v` watchers of every spawn: set for one command by the CLI (porter.cliutil). A list on
# the module rather than a parameter, because every domain module reaches the spawner through its
# own helpers (git, pip, ssh) and threads of a pool must see it too.
_TRACERS: list[Callable[[Sequence[str], str | None], None]] = []


@contextmanager
def tracing(tracer: Callable[[Sequence[str], str | None], None] | None) -> Iterator[None]:
    """Call `tracer(argv, cwd)` before each subprocess starts, inside the block."""
    if tracer is None:
        yield
        return
    _TRACERS.append(tracer)
    try:
        yield
    finally:
        _TRACERS.remove(tracer)


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


def _spawn(
    argv: list[str],
    cwd: str | Path | None,
    env: Mapping[str, str] | None,
    extra_env: Mapping[str, str] | None,
    *,
    stdin_piped: bool,
    text: bool,
) -> subprocess.Popen:
    """Start `argv` in its own session (so its whole process group can be killed)."""
    for tracer in list(_TRACERS):
        tracer(argv, str(cwd) if cwd else None)
    full_env = dict(os.environ if env is None else env)
    if extra_env:
        full_env.update(extra_env)
    try:
        return subprocess.Popen(
            argv,
            cwd=str(cwd) if cwd else None,
            env=full_env,
            stdin=subprocess.PIPE if stdin_piped else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            **({"text": True, "errors": "replace"} if text else {}),
        )
    except FileNotFoundError as exc:
        raise EnvironmentProblem(
            f"cannot run {argv[0]!r}: not found", hint=f"install {argv[0]} or put it on PATH"
        ) from exc
    except PermissionError as exc:
        raise EnvironmentProblem(f"cannot run {argv[0]!r}: permission denied") from exc


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
    proc = _spawn(argv, cwd, env, extra_env, stdin_piped=input_text is not None, text=True)
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


def run_streaming(
    argv: Sequence[str],
    *,
    on_line: Callable[[str, str], None] | None = None,
    input_bytes: bytes | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Completed:
    """Like `run`, but each output line goes to `on_line(stream, line)` as it arrives
    (stream is "stdout" or "stderr") and stdin may carry bytes (an archive).
    On timeout or interrupt the whole process group is killed; output read so far is kept."""
    import threading
    import time

    argv = [str(a) for a in argv]
    proc = _spawn(argv, cwd, env, extra_env, stdin_piped=input_bytes is not None, text=False)

    chunks: dict[str, list[str]] = {"stdout": [], "stderr": []}
    lock = threading.Lock()

    def pump(name: str, pipe) -> None:
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            with lock:
                chunks[name].append(line)
                if on_line is not None:
                    on_line(name, line.rstrip("\r\n"))
        pipe.close()

    def feed() -> None:
        try:
            proc.stdin.write(input_bytes)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass  # the command exited early; its exit status tells why

    threads = [
        threading.Thread(target=pump, args=("stdout", proc.stdout), daemon=True),
        threading.Thread(target=pump, args=("stderr", proc.stderr), daemon=True),
    ]
    if input_bytes is not None:
        threads.append(threading.Thread(target=feed, daemon=True))
    for t in threads:
        t.start()
    timed_out = False
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except BaseException:  # KeyboardInterrupt included: leave nothing running
        _kill_group(proc)
        raise
    for t in threads:
        # Pipes close when the group is gone; a grandchild that escaped the group could hold
        # them open, so never wait forever.
        t.join(timeout=None if deadline is None else max(1.0, deadline - time.monotonic() + 1.0))
    with lock:
        out, err = "".join(chunks["stdout"]), "".join(chunks["stderr"])
    return Completed(tuple(argv), proc.returncode, out, err, timed_out)
