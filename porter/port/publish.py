"""Last stage of a port: make the validated tip the branch and say so, as one step.

`publish` moves `ascend-port/<slug>` (compare-and-swap) and writes the run record and the ledger
entry with Ctrl-C and SIGTERM held: an interrupt either lands before the move (nothing changed)
or is reported after the record was written, saying truthfully that the branch moved. A failed
validation keeps its result on `ascend-port/<slug>-failed` instead. Branch-move failures are told
apart: a stale ref lock, a concurrent change, anything else git said.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TypeVar

from porter.errors import EnvironmentProblem, Interrupted
from porter.fsutil import atomic_write_text
from porter.redact import redact_data, redact_text
from porter.port.plan import checkpoint
from porter.port.worktree import ZERO, branch_sha, git, identity_env, interrupts_deferred

T = TypeVar("T")


class RefLocked(EnvironmentProblem):
    """A `<ref>.lock` file is in the way: another git process is writing the ref, or one was killed."""

    kind = "ref_locked"


class ConcurrentChange(EnvironmentProblem):
    """The branch moved between porter's check and its move."""

    kind = "concurrent_change"


_LOCK = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def move_branch(repo: Path, branch: str, new_sha: str, old_sha: str | None, run_id: str,
                identity: tuple[str, str] | None = None) -> None:
    """Compare-and-swap the branch ref: fails if someone moved it since porter looked."""
    result = git(repo, "update-ref", "-m", f"porter: run {run_id}", f"refs/heads/{branch}", new_sha, old_sha or ZERO,
                 check=False, env=identity_env(identity))
    if result.ok:
        return
    said = (result.stderr or result.stdout).strip()
    lock = _LOCK.search(said)
    if lock:
        raise RefLocked(
            f"could not move {branch}: the ref is locked by {lock.group(1)}",
            hint="another git command is updating it, or one was killed while it did; if no git process is running "
                 f"on this repository, delete {lock.group(1)} and run porter again",
            details={"lock": lock.group(1)},
        )
    now = branch_sha(repo, branch)
    if now != old_sha:
        raise ConcurrentChange(
            f"could not move {branch}: it changed while porter was running "
            f"(was {(old_sha or 'absent')[:12]}, now {(now or 'absent')[:12]})",
            hint="someone updated or deleted the branch meanwhile; look at it, then run porter again",
            details={"expected": old_sha, "found": now},
        )
    raise EnvironmentProblem(f"could not move {branch}: {said or 'git update-ref failed'}",
                             hint="check the fork repository (git status, git for-each-ref refs/heads/ascend-port)")


def keep_failed(repo: Path, branch: str, tip: str, run_id: str, identity: tuple[str, str] | None = None) -> str:
    """Point `branch` (porter's `-failed` branch) at a run whose validation failed, for inspection.
    Replaces an earlier failed result of the same slug (compare-and-swap against what it was)."""
    move_branch(repo, branch, tip, branch_sha(repo, branch), run_id, identity)
    return branch


def publish(repo: Path, branch: str, tip: str, old_sha: str | None, run_id: str, identity: tuple[str, str] | None,
            after_move: Callable[[], T]) -> T:
    """Move the branch, then `after_move()` (run record, ledger) with interrupts held.
    An interrupt that arrived meanwhile is raised afterwards as Interrupted, naming what was done."""
    with interrupts_deferred(reraise=False) as pending:
        move_branch(repo, branch, tip, old_sha, run_id, identity)
        checkpoint("moved")  # test hook: the window between the move and its record
        done = after_move()
    if pending:
        raise interrupted_after_move(branch, tip, run_id, getattr(done, "record_dir", None))
    return done


def interrupted_after_move(branch: str, tip: str, run_id: str, record_dir: str | None) -> Interrupted:
    """The truthful Ctrl-C error once the branch moved and its record and ledger entry were written."""
    where = record_dir or "the run record"
    return Interrupted(
        f"interrupted after {branch} moved to {tip[:12]}: the run completed its move; {where} and the ledger say so",
        hint=f"inspect it with git log {branch}; re-run porter to rebuild it if needed",
        details={"branch": branch, "tip": tip, "run_id": run_id, "record_dir": record_dir},
    )


def push_branch(repo: Path, remote: str, branch: str, force: bool) -> str:
    args = ["push", "--porcelain", remote, f"refs/heads/{branch}:refs/heads/{branch}"]
    if force:
        args.insert(1, "--force-with-lease")
    result = git(repo, *args, check=False)
    if not result.ok:
        raise EnvironmentProblem(
            f"push of {branch} to {remote} failed: {(result.stderr or result.stdout).strip()[-300:]}",
            hint="the branch was updated locally; push it by hand once the remote is reachable",
        )
    return result.stdout.strip()


def write_record(runs_dir: Path | None, result: Any, extra: dict[str, Any] | None = None) -> Any:
    """Keep the run record (run.json + PR_MATERIAL.md) in runs_dir/upgrade/<run-id>/, never inside
    the fork; returns the result with `record_dir` set."""
    if runs_dir is None:
        return result
    directory = Path(runs_dir) / "upgrade" / result.run_id
    result = replace(result, record_dir=str(directory))
    # the record quotes plugin code and host output: masked on the values, like every output
    doc = redact_data(result.to_dict() | (extra or {}))
    atomic_write_text(directory / "run.json", json.dumps(doc, indent=2, default=str) + "\n")
    if result.pr_material:
        atomic_write_text(directory / "PR_MATERIAL.md", redact_text(result.pr_material))
    return result


def record_ledger(forks_file: Path | None, fork: str, *, slug: str, branch: str, upstream: str, target: str,
                  outcome: str, run_id: str, commits: tuple[str, ...], baseline: str = "", notes: str = "") -> bool:
    """Append the run to the fork's ledger (porter.registry.ledger_path); False for an ad-hoc fork
    (a --plugin-path checkout that forks.yaml does not name)."""
    from porter.registry import LedgerEntry, append_ledger, load_forks

    if forks_file is None or fork not in load_forks(forks_file):
        return False
    append_ledger(forks_file, fork, LedgerEntry(
        slug=slug, branch=branch, upstream=upstream, target=target, outcome=outcome,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"), baseline=baseline, commits=commits,
        pr_material=f"{branch}:PR_MATERIAL.md", run_id=run_id, notes=notes,
    ))
    return True
