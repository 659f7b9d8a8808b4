"""Stage 2 of a port: fork work in git without touching the user's checkout.

Everything happens in a detached `git worktree` under porter's cache, from the fork's baseline
commit. Commits land in the shared object store but no ref moves until porter.port.publish, which
is a compare-and-swap on `ascend-port/<slug>` done only after the whole run succeeded. The user's
HEAD, index, stash and working files are never written; the worktree is removed on success,
failure and Ctrl-C alike, and one left behind by a killed run (SIGKILL, power loss) is pruned by
the next run: each porter worktree is locked with its owner's pid. Git hooks, auto-gc and signing
are switched off for porter's commands so nothing outside the worktree changes behind our back;
every commit and merge carries porter's fallback identity when the fork has none (CI machines).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from porter import proc
from porter.errors import EnvironmentProblem, InputError, UsageError
from porter.slug import port_branch, slugify

# Settings that keep porter's git commands from touching anything outside the worktree.
_SAFE = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "gc.auto=0",
    "-c", "maintenance.auto=false",
    "-c", "commit.gpgSign=false",
    "-c", "core.fsmonitor=false",
)
PORTER_IDENTITY = ("porter", "porter@localhost")
TRAILER_KEYS = ("Porter-Drift-Family", "Porter-Symbol", "Upstream-Ref", "Porter-Run")
ZERO = "0" * 40


def git(repo: Path | str, *args: str, check: bool = True, env: dict[str, str] | None = None, timeout: float = 120) -> proc.Completed:
    result = proc.run(
        ["git", *_SAFE, *args], cwd=repo, timeout=timeout,
        extra_env={"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", **(env or {})},
    )
    if check and not result.ok:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise EnvironmentProblem(
            f"git {' '.join(args[:2])} failed in {repo}: {' | '.join(tail) or f'exit {result.returncode}'}",
            hint="check the fork repository (git status, git worktree list)",
        )
    return result


@dataclass(frozen=True)
class ForkState:
    root: Path
    head_branch: str | None  # None when HEAD is detached
    head_sha: str
    dirty: tuple[str, ...]  # porcelain lines of uncommitted changes


def inspect_fork(path: Path | str) -> ForkState:
    """Check that `path` is the top of a git checkout and read its state (read-only)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise InputError(f"fork checkout {path} does not exist",
                         hint="clone the fork there, fix its path in forks/forks.yaml, or pass --plugin-path DIR")
    if not path.is_dir():
        raise InputError(f"fork path {path} is not a directory",
                         hint="porter ports a git checkout of the fork; to only analyse a wheel or archive, add --dry-run")
    top = git(path, "rev-parse", "--show-toplevel", check=False)
    if not top.ok:
        raise InputError(f"{path} is not a git repository", hint="porter works on a git clone of the fork")
    root = Path(top.stdout.strip())
    if root.resolve() != path.resolve():
        raise InputError(f"{path} is inside the git repository {root}, not its top", hint=f"use {root}")
    head = git(root, "rev-parse", "--verify", "-q", "HEAD", check=False)
    if not head.ok:
        raise InputError(f"{root} has no commits", hint="commit the plugin first")
    branch = git(root, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    status = git(root, "status", "--porcelain", "--untracked-files=normal")
    return ForkState(
        root=root,
        head_branch=branch.stdout.strip() if branch.ok else None,
        head_sha=head.stdout.strip(),
        dirty=tuple(line for line in status.stdout.splitlines() if line.strip()),
    )


def valid_branch_name(repo: Path, branch: str) -> bool:
    return git(repo, "check-ref-format", f"refs/heads/{branch}", check=False).ok


def resolve_commit(repo: Path, ref: str) -> str:
    if ref.startswith("-"):
        raise UsageError(f"invalid ref {ref!r}")
    result = git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False)
    if not result.ok:
        raise InputError(f"ref {ref!r} does not exist in {repo}", hint="check the baseline ref (git branch -a, git tag)")
    return result.stdout.strip()


def branch_sha(repo: Path, branch: str) -> str | None:
    result = git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False)
    return result.stdout.strip() if result.ok else None


def checked_out_in(repo: Path, branch: str) -> list[str]:
    """Worktrees (paths) that have `branch` checked out."""
    out = git(repo, "worktree", "list", "--porcelain").stdout
    paths, current = [], None
    for line in out.splitlines():
        if line.startswith("worktree "):
            current = line[len("worktree "):]
        elif line == f"branch refs/heads/{branch}" and current:
            paths.append(current)
    return paths


@dataclass(frozen=True)
class SeriesCommit:
    sha: str
    subject: str
    trailers: dict[str, tuple[str, ...]]

    @property
    def run(self) -> str | None:
        values = self.trailers.get("Porter-Run")
        return values[0] if values else None


def read_series(repo: Path, base: str, tip: str) -> list[SeriesCommit]:
    """Commits base..tip (oldest first) with their porter trailers."""
    fmt = "%H%x1f%s%x1f%(trailers:only,unfold)%x1e"
    out = git(repo, "log", "--reverse", f"--format={fmt}", f"{base}..{tip}").stdout
    commits = []
    for chunk in out.split("\x1e"):
        chunk = chunk.strip("\n")
        if not chunk:
            continue
        sha, subject, trailer_text = (chunk.split("\x1f") + ["", ""])[:3]
        trailers: dict[str, list[str]] = {}
        for line in trailer_text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                trailers.setdefault(key.strip(), []).append(value.strip())
        commits.append(SeriesCommit(sha.strip(), subject, {k: tuple(v) for k, v in trailers.items()}))
    return commits


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", ancestor, descendant, check=False).returncode == 0


@dataclass(frozen=True)
class ExistingBranch:
    name: str
    sha: str
    series: tuple[SeriesCommit, ...]  # porter commits on it since the baseline


def check_branch(repo: Path, branch: str, baseline_sha: str, *, force: bool = False) -> ExistingBranch | None:
    """The port branch as porter left it, or an error when someone else's work would be lost."""
    sha = branch_sha(repo, branch)
    if sha is None:
        return None
    holders = checked_out_in(repo, branch)
    if holders:
        raise InputError(
            f"branch {branch} is checked out in {', '.join(holders)}; porter will not move a checked-out branch",
            hint="switch that checkout to another branch and run again",
        )
    # Porter's series starts where the branch left the baseline's history (the baseline may have
    # moved on since): every commit after that point must be porter's, or re-running loses work.
    fork_point = git(repo, "merge-base", baseline_sha, sha, check=False).stdout.strip()
    if not fork_point:
        if force:
            return ExistingBranch(branch, sha, ())
        raise InputError(
            f"branch {branch} exists and shares no history with the baseline {baseline_sha[:12]}",
            hint="rename or delete that branch, or pass --force to replace it",
        )
    series = tuple(read_series(repo, fork_point, sha))
    foreign = [c for c in series if c.run is None]
    if foreign and not force:
        listed = ", ".join(f"{c.sha[:10]} {c.subject!r}" for c in foreign[:3])
        raise InputError(
            f"branch {branch} exists and diverged: {len(foreign)} commit(s) not made by porter ({listed}) "
            "would be dropped by re-running",
            hint="move those commits to another branch, or pass --force to replace the branch anyway",
        )
    return ExistingBranch(branch, sha, series)


@contextmanager
def interrupts_deferred(pending: list[int] | None = None, *, reraise: bool = True) -> Iterator[list[int]]:
    """Run a block that must not be cut in two (cleanup; the branch move with its record): Ctrl-C
    and SIGTERM arriving inside are held and, with `reraise`, raised as KeyboardInterrupt after it.
    Yields the list of held signals, so a caller can say what happened instead."""
    pending = [] if pending is None else pending
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield pending
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if pending and reraise:
        raise KeyboardInterrupt


@dataclass
class Worktree:
    repo: Path
    path: Path
    base_sha: str

    def git(self, *args: str, check: bool = True, env: dict[str, str] | None = None) -> proc.Completed:
        return git(self.path, *args, check=check, env=env)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").stdout.strip()

    def commit(self, paths: Sequence[str], message: str, identity: tuple[str, str] | None = None) -> str | None:
        """Stage exactly `paths` and commit; returns the new commit sha, or None when the files
        already had that content (nothing to commit)."""
        if not paths:
            return None
        self.git("add", "--", *paths)
        if self.git("diff", "--cached", "--quiet", check=False).returncode == 0:
            return None
        return self.commit_index(message, identity)

    def commit_index(self, message: str, identity: tuple[str, str] | None = None) -> str:
        """Commit what is staged (also concludes a merge in progress); returns the new sha."""
        result = proc.run(
            ["git", *_SAFE, "commit", "-q", "--no-verify", "-F", "-"], cwd=self.path, input_text=message,
            extra_env={"GIT_TERMINAL_PROMPT": "0", **identity_env(identity)}, timeout=120,
        )
        if not result.ok:
            raise EnvironmentProblem(f"git commit failed in the porter worktree: {(result.stderr or result.stdout).strip()[-300:]}")
        return self.head()


def identity_env(identity: tuple[str, str] | None) -> dict[str, str]:
    """Environment that makes git use `identity` for author and committer ({} = git's own config).
    Every git command that writes a commit or a merge runs with it: CI machines have no identity."""
    if identity is None:
        return {}
    name, email = identity
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def commit_identity(repo: Path) -> tuple[str, str] | None:
    """None when the fork has a git identity configured (use it), else porter's own."""
    name = git(repo, "config", "--get", "user.name", check=False)
    email = git(repo, "config", "--get", "user.email", check=False)
    if name.ok and email.ok and name.stdout.strip() and email.stdout.strip():
        return None
    return PORTER_IDENTITY


_LOCK_PREFIX = "porter run pid "


def _lock_reason() -> str:
    return f"{_LOCK_PREFIX}{os.getpid()} on {socket.gethostname()}"


def _owner_alive(reason: str) -> bool:
    """False when the lock names a process on this host that no longer exists."""
    pid_text, _, host = reason[len(_LOCK_PREFIX):].partition(" on ")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True  # another machine's run (a shared filesystem): not ours to judge
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune_stale(repo: Path, parent: Path) -> list[str]:
    """Remove porter worktrees under `parent` whose run was killed (owner pid gone), and git's
    records of worktree directories that no longer exist. Returns the paths removed."""
    removed: list[str] = []
    listing = git(repo, "worktree", "list", "--porcelain", check=False).stdout
    parent = parent.resolve() if parent.exists() else parent
    for block in listing.split("\n\n"):
        fields = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        path, reason = fields.get("worktree", ""), fields.get("locked", "")
        if not path or not reason.startswith(_LOCK_PREFIX) or _owner_alive(reason):
            continue
        if Path(path).parent.resolve() != parent:
            continue  # another cache's worktree: leave it
        git(repo, "worktree", "remove", "--force", "--force", path, check=False)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    git(repo, "worktree", "prune", check=False)
    return removed


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so the worktree is still removed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def worktree(repo: Path, base_sha: str, parent: Path, run_id: str) -> Iterator[Worktree]:
    """A detached worktree of `repo` at `base_sha` under `parent`; always removed afterwards."""
    with _sigterm_as_interrupt():
        with _worktree(repo, base_sha, parent, run_id) as wt:
            yield wt


@contextmanager
def _worktree(repo: Path, base_sha: str, parent: Path, run_id: str) -> Iterator[Worktree]:
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=f"porter-{run_id}-", dir=parent))
    path.rmdir()  # git creates it
    created = False
    try:
        git(repo, "worktree", "add", "--detach", "-q", str(path), base_sha)
        created = True
        # The lock keeps `git worktree prune` (ours or the user's) off a live run and names the
        # owner, so the next run can tell a killed run's worktree from a concurrent one.
        git(repo, "worktree", "lock", "--reason", _lock_reason(), str(path), check=False)
        yield Worktree(repo, path, base_sha)
    finally:
        with interrupts_deferred():
            if created:
                git(repo, "worktree", "remove", "--force", "--force", str(path), check=False)
            shutil.rmtree(path, ignore_errors=True)
            git(repo, "worktree", "prune", check=False)


# ---------------------------------------------------------------- checks before a run writes anything


def check_fork(fork_path: Path, *, allow_dirty: bool = False, fork_ref: str | None = None) -> tuple[Path, str, str]:
    """The fork checkout is one porter may start from: (repository root, baseline sha, ref name).
    Read only; also run before the analysis so a bad fork fails before any download."""
    fork = inspect_fork(fork_path)
    root = fork.root
    if fork.dirty and not allow_dirty:
        shown = "; ".join(fork.dirty[:3]) + (" ..." if len(fork.dirty) > 3 else "")
        raise InputError(
            f"the fork checkout {root} has uncommitted changes ({shown})",
            hint="commit or stash them first (porter works from committed history and never touches the checkout), "
                 "or pass --allow-dirty to port the committed baseline anyway",
        )
    if fork_ref:
        return root, resolve_commit(root, fork_ref), fork_ref
    if fork.head_branch is None:
        raise InputError(
            f"HEAD is detached in {root} ({fork.head_sha[:12]}): porter cannot tell which branch is the baseline",
            hint="check out the plugin's branch, or name the baseline commit with --fork-ref",
        )
    return root, fork.head_sha, fork.head_branch


def branch_for(root: Path, slug: str | None, upstream: str, target: str) -> tuple[str, str]:
    """(slug, branch) after checking that git accepts the branch name (an invalid slug is a usage
    error before anything is written, not a failed branch move at the end)."""
    slug = slug or slugify(upstream, target)
    branch = port_branch(slug)
    if not valid_branch_name(root, branch) or not valid_branch_name(root, failed_branch_name(branch)):
        raise UsageError(f"invalid slug {slug!r}: git refuses the branch name {branch!r}",
                         hint="use lowercase letters, digits, dots and hyphens (for example vllm-0.13.0)")
    return slug, branch


@dataclass(frozen=True)
class RunStart:
    slug: str
    branch: str
    existing: ExistingBranch | None  # the branch as a previous run left it
    identity: tuple[str, str] | None  # porter's fallback commit identity, when the repo has none


def start_run(root: Path, base_sha: str, request) -> RunStart:
    """What every branch-writing run (shim port, edit run, fork merge) checks and cleans before it
    writes: the branch name git accepts, the branch porter may replace, worktrees of killed runs,
    the identity its commits get. `request` carries slug, upstream, target, force and work_dir."""
    slug, branch = branch_for(root, request.slug, request.upstream, request.target)
    existing = check_branch(root, branch, base_sha, force=request.force)
    prune_stale(root, request.work_dir)
    return RunStart(slug, branch, existing, commit_identity(root))


def failed_branch_name(branch: str) -> str:
    return f"{branch}-failed"


@dataclass(frozen=True)
class FileChange:
    """One file of a series, from `git diff --numstat` (a binary file counts 0 lines)."""

    path: str
    added: int
    deleted: int
    created: bool  # the file did not exist at the base


def _numstat(output: str, separator: str) -> list[tuple[int, int, str]]:
    """(added, deleted, path) rows of `git ... --numstat` output; a binary file (`-`) counts 0 lines."""
    rows = []
    for entry in output.split(separator):
        parts = entry.split("\t")
        if len(parts) == 3:
            added, deleted, path = parts
            rows.append((int(added) if added.isdigit() else 0, int(deleted) if deleted.isdigit() else 0, path))
    return rows


def diff_numstat(repo: Path, base: str, tip: str) -> tuple[FileChange, ...]:
    """The files `base..tip` touched with their lines added and deleted, renames as delete + add."""
    created = set(git(repo, "diff", "--no-renames", "--name-only", "-z", "--diff-filter=A", f"{base}..{tip}")
                  .stdout.split("\0"))
    numstat = git(repo, "diff", "--no-renames", "--numstat", "-z", f"{base}..{tip}").stdout
    return tuple(FileChange(path, added, deleted, path in created) for added, deleted, path in _numstat(numstat, "\0"))


def commit_sizes(repo: Path, shas: Sequence[str]) -> dict[str, dict[str, int]]:
    """Lines added and deleted and files touched per commit (for the PR material's section headings)."""
    sizes = {}
    for sha in shas:
        rows = _numstat(git(repo, "show", "--numstat", "--format=", sha).stdout, "\n")
        sizes[sha] = {"added": sum(r[0] for r in rows), "deleted": sum(r[1] for r in rows), "files": len(rows)}
    return sizes


def trailer_block(families: Sequence[str], symbols: Sequence[str], upstream_ref: str, run_id: str) -> str:
    lines = [f"Porter-Drift-Family: {f}" for f in dict.fromkeys(families)]
    lines += [f"Porter-Symbol: {s}" for s in dict.fromkeys(symbols)]
    lines += [f"Upstream-Ref: {upstream_ref}", f"Porter-Run: {run_id}"]
    return "\n".join(lines)

