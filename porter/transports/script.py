"""Shell scripts porter sends to a host. Every value that comes from a profile or the command
line is quoted once with `shlex.quote`; setup lines are the profile's own shell, run as written."""

from __future__ import annotations

import shlex
from typing import Mapping, Sequence

# Exit statuses the run script uses for problems it detects before python starts.
EXIT_HOST_BUSY = 93
EXIT_TOOLS_MISSING = 94
EXIT_SETUP_FAILED = 95
EXIT_WORKDIR_MISSING = 96
EXIT_PYTHON_MISSING = 97
EXIT_TIMEOUT = 124  # from `timeout`
PGID_FILE = ".porter-pgid"


def q(value: object) -> str:
    return shlex.quote(str(value))


def setup_lines(setup: Sequence[str]) -> list[str]:
    """Each setup line runs in the script's shell (so `source` works); a failure stops the run."""
    return [
        f"{{ {line}\n}} || {{ echo {q('porter: setup line failed: ' + line)} >&2; exit {EXIT_SETUP_FAILED}; }}"
        for line in setup
    ]


def lock_lines(lock_file: str, run_dir: str | None = None, hold_s: float | None = None) -> list[str]:
    """Hold an exclusive lock on `lock_file` for as long as this shell and its children live, so
    two smoke runs never share a host's devices; fail at once (no waiting) when it is taken.
    The holder writes `pid deadline run_dir` into the lock: a later run that finds the lock held
    past the deadline (a run whose porter died and whose processes hang on) kills that run's
    process group and takes the lock over. Hosts without `flock` (util-linux) run unlocked."""
    directory = lock_file.rsplit("/", 1)[0] or "/"
    cannot_open = (f"porter: cannot open the host lock {lock_file} (another user's? make it writable for "
                   "everyone who runs smoke here, or give this profile its own workdir)")
    busy = f"porter: host busy: another porter smoke run holds {lock_file}"
    lines = [
        "if command -v flock >/dev/null 2>&1; then",
        f"  mkdir -p {q(directory)}",
        # Whoever creates the lock makes it writable for all: the devices are shared by every user.
        f"  [ -e {q(lock_file)} ] || {{ : >>{q(lock_file)} && chmod 666 {q(lock_file)}; }} 2>/dev/null",
        f"  exec 9>>{q(lock_file)} || {{ echo {q(cannot_open)} >&2; exit {EXIT_TOOLS_MISSING}; }}",
        "  if ! flock -n 9; then",
        f"    read -r holder deadline holder_dir < {q(lock_file)} 2>/dev/null || true",
        '    case "$deadline" in ""|*[!0-9]*) deadline="";; esac',
        '    if [ -n "$deadline" ] && [ "$(date +%s)" -gt "$deadline" ]; then',
        '      hpg=$(cat "$holder_dir/' + PGID_FILE + '" 2>/dev/null || true)',
        '      case "$hpg" in ""|*[!0-9]*) ;; *) kill -TERM -- "-$hpg" 2>/dev/null;; esac',
        '      case "$holder" in ""|*[!0-9]*) ;; *) kill -TERM "$holder" 2>/dev/null;; esac',
        f"      flock -w 15 9 || {{ echo {q(busy + ' (an overdue run did not let go)')} >&2; exit {EXIT_HOST_BUSY}; }}",
        '      echo "porter: took over the host lock from an overdue run (pid $holder, deadline $deadline passed)" >&2',
        "    else",
        f"      echo {q(busy)} >&2; exit {EXIT_HOST_BUSY}",
        "    fi",
        "  fi",
    ]
    if hold_s is not None:
        lines.append(f"  : > {q(lock_file)}; echo \"$$ $(( $(date +%s) + {int(hold_s) + 1} )) {run_dir or ''}\" >&9")
    lines.append("fi")
    return lines


def export_lines(env: Mapping[str, str]) -> list[str]:
    return [f"export {key}={q(value)}" for key, value in env.items()]


def run_script(
    *,
    setup: Sequence[str],
    cwd: str,
    python: str,
    argv: Sequence[str],
    timeout_s: float,
    remove_after: bool = False,
    env_file: str | None = None,
) -> str:
    """Run the setup lines and then `python argv...` in `cwd` under one `timeout`, in a process
    group of its own whose id is written to cwd/.porter-pgid, so a hung setup line is killed like
    a hung run; the script exits with the run's status (128+N for signal N). `env_file`
    (relative to cwd) holds export and setup lines that are sourced before the setup lines, then
    deleted: secrets reach the run without ever being a command-line argument."""
    inner: list[str] = []
    if env_file:
        path = q(f"{cwd}/{env_file}")
        inner.append(f". {path} && rm -f -- {path} || "
                     f"{{ echo {q('porter: cannot read the shipped environment file in ' + cwd)} >&2; exit {EXIT_WORKDIR_MISSING}; }}")
    inner += setup_lines(setup)
    inner += [
        f"cd {q(cwd)} 2>/dev/null || {{ echo {q('porter: run directory missing on the host: ' + cwd)} >&2; exit {EXIT_WORKDIR_MISSING}; }}",
        # The shipped runtime shadows any installed copy; whatever setup put on the path stays.
        f"export PYTHONPATH={q(cwd)}${{PYTHONPATH:+:$PYTHONPATH}}",
        f"command -v {q(python)} >/dev/null 2>&1 || {{ echo {q('porter: python not found on the host: ' + python)} >&2; exit {EXIT_PYTHON_MISSING}; }}",
        "exec " + " ".join(q(a) for a in (python, *argv)),
    ]
    lines = [
        f"[ -d {q(cwd)} ] || {{ echo {q('porter: run directory missing on the host: ' + cwd)} >&2; exit {EXIT_WORKDIR_MISSING}; }}",
        "for tool in timeout; do command -v $tool >/dev/null 2>&1 || "
        f"{{ echo \"porter: $tool not found on the host (install coreutils)\" >&2; exit {EXIT_TOOLS_MISSING}; }}; done",
        # Job control gives the run its own process group (pgid = its pid), recorded so a second
        # connection can kill the whole group; `timeout` TERMs that group, then KILLs it.
        "set -m",
        f"timeout -k 5 {timeout_s:g} bash -c {q(chr(10).join(inner) + chr(10))} &",
        "pg=$!",
        "set +m",  # the group exists now; without monitor mode bash prints no "[1]+ Done" notice
        f"echo \"$pg\" > {q(cwd + '/' + PGID_FILE)}",
        # A TERM/HUP to this shell (docker kill, a local Ctrl-C) is passed on to the group.
        "trap 'kill -TERM -- \"-$pg\" 2>/dev/null' TERM INT HUP",
        'wait "$pg"; rc=$?',
        'if kill -0 "$pg" 2>/dev/null; then wait "$pg"; rc=$?; fi',
        # Saves the caller a connection for the clean-up when the run ends normally.
        *([f"cd / && rm -rf -- {q(cwd)}"] if remove_after else []),
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def kill_script(cwd: str) -> str:
    """Kill the process group recorded by `run_script`: TERM, a moment, then KILL."""
    pgid_file = q(f"{cwd}/{PGID_FILE}")
    return (
        f"pg=$(cat {pgid_file} 2>/dev/null) || exit 0\n"
        '[ -n "$pg" ] || exit 0\n'
        'kill -TERM -- "-$pg" 2>/dev/null || exit 0\n'
        "for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 -- \"-$pg\" 2>/dev/null || exit 0; sleep 0.2; done\n"
        'kill -KILL -- "-$pg" 2>/dev/null\n'
        "exit 0\n"
    )


def unpack_script(dest: str) -> str:
    return f"mkdir -p {q(dest)} && tar -xzf - -C {q(dest)}\n"


def remove_script(dest: str) -> str:
    return f"rm -rf -- {q(dest)}\n"
