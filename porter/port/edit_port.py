"""A port that is a list of file edits someone else computed (the guard cleanup of
`porter upgrade --drop OLD`): commit them on `ascend-port/<slug>`, validate at the target, write
PR_MATERIAL.md and publish, with the same safety as a shim port (see the package docstring)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from porter.errors import InputError
from porter.fsutil import atomic_write_text
from porter.redact import redact_text
from porter.port import publish as pub
from porter.port import worktree as git_work
from porter.port.plan import CommitInfo, PortFailed, PortResult, checkpoint, new_run_id
from porter.port.worktree import check_fork, failed_branch_name
from porter.upgrade.models import Outcome, OutcomeDecision


@dataclass(frozen=True)
class FileEdit:
    path: str  # relative to the fork root, POSIX separators
    content: str | None  # the whole new text; None deletes the file


@dataclass(frozen=True)
class EditCommit:
    subject: str
    rationale: tuple[str, ...] = ()
    edits: tuple[FileEdit, ...] = ()
    families: tuple[str, ...] = ("guard-cleanup",)  # Porter-Drift-Family trailers
    symbols: tuple[str, ...] = ()  # Porter-Symbol trailers


@dataclass(frozen=True)
class EditRequest:
    fork: str
    fork_path: Path
    upstream: str
    baseline: str
    target: str
    commits: tuple[EditCommit, ...]
    title: str = ""
    slug: str | None = None
    summary: tuple[str, ...] = ()  # lines for the PR material's summary (what a human must do first, ...)
    baseline_tree: Path | None = None
    target_tree: Path | None = None
    upstream_package: str = ""  # top-level import name of the upstream (default: upstream with _ for -)
    entry_points: tuple[str, ...] = ()
    plugin_root: str = ""
    fork_ref: str | None = None
    allow_dirty: bool = False
    force: bool = False
    push: bool = False
    remote: str = "origin"
    work_dir: Path = Path("/tmp/porter-worktrees")
    runs_dir: Path | None = None
    forks_file: Path | None = None
    reproducer: str = ""
    outcome_reasons: tuple[str, ...] = field(default_factory=tuple)


def publish_edits(request: EditRequest, status: Callable[[str], None] = lambda _m: None) -> PortResult:
    from porter.port.pr_material import render_edits
    from porter.port.shims import _committed, plugin_formatters, run_formatters

    if not request.commits or not any(c.edits for c in request.commits):
        raise InputError("no edits to publish", hint="pass at least one EditCommit with a FileEdit")
    for commit in request.commits:
        for edit in commit.edits:
            if edit.path.startswith("/") or ".." in Path(edit.path).parts:
                raise InputError(f"edit path {edit.path!r} is not relative to the fork root")
    root, base_sha, fork_ref = check_fork(request.fork_path, allow_dirty=request.allow_dirty, fork_ref=request.fork_ref)
    start = git_work.start_run(root, base_sha, request)
    slug, branch, existing, identity = start.slug, start.branch, start.existing, start.identity
    run_id = new_run_id()
    upstream_ref = f"{request.upstream} {request.target}"
    status(f"porter run {run_id}: {request.fork} {fork_ref} ({base_sha[:12]}): {request.title or slug}")
    reasons = request.outcome_reasons or (request.title or f"{len(request.commits)} edit commit(s)",)
    base = PortResult(run_id, request.fork, request.upstream, request.baseline, request.target, slug, branch,
                      OutcomeDecision(Outcome.C_PATCH, tuple(reasons)), base_sha=base_sha,
                      previous_sha=existing.sha if existing else None)

    with git_work.worktree(root, base_sha, request.work_dir, run_id) as wt:
        formatters = plugin_formatters(wt.path)
        commits: list[CommitInfo] = []
        changed: set[str] = set()
        for index, commit in enumerate(request.commits, 1):
            paths = []
            for edit in commit.edits:
                target = wt.path / edit.path
                if edit.content is None:
                    if target.exists():
                        wt.git("rm", "-q", "--", edit.path)
                    continue
                atomic_write_text(target, edit.content)
                paths.append(edit.path)
            run_formatters(wt.path, formatters, [p for p in paths if p.endswith(".py")],
                           baseline=lambda path: _committed(wt, path))
            message = f"{commit.subject}\n\n" + "".join(f"- {line}\n" for line in commit.rationale) + "\n" + \
                git_work.trailer_block(commit.families, commit.symbols, upstream_ref, run_id) + "\n"
            staged = [e.path for e in commit.edits]
            wt.git("add", "-A", "--", *staged)
            if wt.git("diff", "--cached", "--quiet", check=False).returncode == 0:
                continue
            sha = wt.commit_index(message, identity)
            changed.update(paths)
            commits.append(CommitInfo(sha, commit.subject, f"edits/{index}", commit.families, commit.symbols,
                                      tuple(staged), commit.rationale))
            checkpoint(f"commit-{index}")
        if not commits:
            return pub.write_record(request.runs_dir, replace(base, message="the edits change nothing: no branch"))
        edits_tip = wt.head()
        control = _unedited_copy(wt, base_sha, request.work_dir)
        try:
            validation = _validate(request, wt, changed, upstream_ref, control)
        finally:
            shutil.rmtree(control, ignore_errors=True)
        text = render_edits(request, commits, validation, branch, run_id, base_sha, fork_ref,
                            git_work.diff_numstat(root, base_sha, edits_tip), formatters=tuple(f[0] for f in formatters),
                            created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
        atomic_write_text(wt.path / "PR_MATERIAL.md", redact_text(text))
        wt.commit(["PR_MATERIAL.md"], f"PR_MATERIAL.md: {request.title or slug}\n\n" + git_work.trailer_block(
            tuple(dict.fromkeys(f for c in commits for f in c.families)), (), upstream_ref, run_id) + "\n", identity)
        tip = wt.head()
        result = replace(base, tip=tip, commits=tuple(commits), validation=validation.to_dict(), pr_material=text,
                         imports_at_target=validation.imports_verdict())
        if not validation.ok:
            failed = pub.keep_failed(root, failed_branch_name(branch), tip, run_id, identity)
            result = pub.write_record(request.runs_dir, replace(result, failed_branch=failed,
                                                                message=f"validation failed: result kept on {failed}"))
            raise PortFailed(
                f"validation failed ({', '.join(c.name for c in validation.failing)}): {branch} was not moved; "
                f"the result is on {failed}" + (f", run record {result.record_dir}/run.json" if result.record_dir else ""),
                hint=f"inspect it with `git log -p {failed}`",
                details={"run_id": run_id, "record_dir": result.record_dir or None, "failed_branch": failed,
                         "checks": [c.to_dict() for c in validation.failing]}, result=result)

        def after_move() -> PortResult:
            pub.record_ledger(request.forks_file, request.fork, slug=slug, branch=branch, upstream=request.upstream,
                              target=request.target, outcome="C_PATCH", run_id=run_id,
                              commits=tuple(c.sha for c in commits) + (tip,), baseline=request.baseline,
                              notes=request.title)
            return pub.write_record(request.runs_dir, replace(
                result, branch_moved=True, message=f"{branch} -> {tip[:12]}: {len(commits)} commit(s) + PR_MATERIAL.md"))

        result = pub.publish(root, branch, tip, existing.sha if existing else None, run_id, identity, after_move)
    if request.push:
        result = pub.write_record(request.runs_dir, replace(result, pushed=pub.push_branch(
            root, request.remote, branch, force=existing is not None)))
    return result


def _unedited_copy(wt, base_sha: str, work_dir: Path) -> Path:
    """The fork's files at the baseline commit (git archive), outside the worktree: the control for
    the import smoke, so a failure the unedited plugin shares at the target is not blamed on the edits."""
    import io
    import tarfile
    import tempfile

    work_dir.mkdir(parents=True, exist_ok=True)
    target = Path(tempfile.mkdtemp(prefix="porter-control-", dir=work_dir))
    result = __import__("subprocess").run(["git", "-C", str(wt.path), "archive", "--format=tar", base_sha],
                                          capture_output=True, timeout=300, check=True)
    with tarfile.open(fileobj=io.BytesIO(result.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


def _validate(request: EditRequest, wt, changed, upstream_ref: str, control: Path):
    from porter.port.validate import validate

    return validate(
        wt.path, changed=changed, generated_tests=None, reanalyze=None, needs_human=(),
        target_tree=request.target_tree, target_label=upstream_ref,
        upstream_package=request.upstream_package or request.upstream.replace("-", "_"),
        entry_points=request.entry_points, plugin_root=request.plugin_root, baseline_tree=None, control_root=control,
        upstream_trees={f"{request.upstream} {request.baseline}": request.baseline_tree} if request.baseline_tree else None,
    )
