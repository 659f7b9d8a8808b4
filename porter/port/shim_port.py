"""A plugin that follows its upstream through shims (vllm-ascend, torch-npu): the pipeline
plan -> worktree -> shims -> validate -> pr_material -> publish, in that order.

The run happens in a detached worktree of the fork at its baseline commit. The branch
`ascend-port/<slug>` moves (compare-and-swap) only after every commit was made and validation
passed; a failed validation keeps the result on `ascend-port/<slug>-failed` and names the run
record; any other failure or Ctrl-C leaves the fork exactly as it was.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from porter.fsutil import atomic_write_text
from porter.port import publish as pub
from porter.port import worktree as git_work
from porter.port.plan import (AnalyzeFn, CommitInfo, PortAnalysis, PortFailed, PortRequest, PortResult, check_versions,
                              checkpoint, new_run_id, no_port_message, plan_with_missed, port_outcome)
from porter.port.worktree import check_fork, failed_branch_name
from porter.upgrade.models import Outcome, Severity


def run_port(request: PortRequest, analyze: AnalyzeFn, status: Callable[[str], None] = lambda _m: None, *,
             analysis: PortAnalysis | None = None) -> PortResult:
    """Port the fork. `analysis` is the drift analysis of the committed baseline when the caller
    already has it (the checkout was clean at that commit); else `analyze` runs on the worktree.
    `analyze` also re-checks the result tree for residual drift."""
    check_versions(request.baseline, request.target)
    root, base_sha, fork_ref = check_fork(request.fork_path, allow_dirty=request.allow_dirty, fork_ref=request.fork_ref)
    start = git_work.start_run(root, base_sha, request)
    run_id = new_run_id()
    status(f"porter run {run_id}: {request.fork} {fork_ref} ({base_sha[:12]}) for {request.upstream} {request.target}")

    moved: list[PortResult] = []  # set once the branch moved: a later Ctrl-C must say so
    try:
        return _run_in_worktree(request, analyze, status, analysis, root, base_sha, fork_ref, start, run_id, moved)
    except KeyboardInterrupt:
        if not moved:
            raise
        done = moved[0]
        raise pub.interrupted_after_move(done.branch, done.tip or "", done.run_id, done.record_dir or None) from None


def _run_in_worktree(request: PortRequest, analyze: AnalyzeFn, status: Callable[[str], None],
                     analysis: PortAnalysis | None, root: Path, base_sha: str, fork_ref: str, start, run_id: str,
                     moved: list[PortResult]) -> PortResult:
    from porter.port.pr_material import render_pr, version_gates
    from porter.port.shims import commit_groups
    from porter.port.validate import validate
    from porter.shims.convention import detect
    from porter.shims.lookup import UpstreamTree
    from porter.shims.strategies import ShimContext, plan_shims

    slug, branch, existing, identity = start.slug, start.branch, start.existing, start.identity
    upstream_ref = f"{request.upstream} {request.target}"
    with git_work.worktree(root, base_sha, request.work_dir, run_id) as wt:
        checkpoint("worktree")
        if analysis is None:
            status("analysing the baseline tree")
            analysis = analyze(wt.path)
        breaking = [r for r in analysis.records if r.severity is not Severity.NOTE]
        base = PortResult(run_id, request.fork, request.upstream, request.baseline, request.target, slug, branch,
                          analysis.outcome, base_sha=base_sha, previous_sha=existing.sha if existing else None,
                          total=len(breaking))
        if analysis.outcome.outcome is not Outcome.C_PATCH or not breaking:
            return _record(request, replace(base, message=no_port_message(analysis.outcome, breaking)), analysis)

        convention = detect(wt.path, request.package, request.convention_hint)
        ctx = ShimContext(
            plugin_root=wt.path, convention=convention, upstream=request.upstream, baseline=request.baseline,
            target=request.target, old_tree=UpstreamTree(request.baseline_tree), new_tree=UpstreamTree(request.target_tree),
            run_id=run_id, existing=frozenset(wt.git("ls-files").stdout.splitlines()),
        )
        plan = plan_shims(breaking, ctx)
        gates = version_gates(wt.path, convention.guard_function, convention.package)
        done = commit_groups(wt, plan.groups, identity=identity, upstream_ref=upstream_ref, run_id=run_id, status=status)
        commits = list(done.commits)
        shim_tip = wt.head() if commits else base_sha
        # A record with a use the rewrite could not reach still breaks there: it is a human's.
        plan = plan_with_missed(plan, list(done.missed_moves))

        status("validating the branch at the target")
        trees = {f"{request.upstream} {label}": tree for label, tree in
                 ((request.baseline, request.baseline_tree), (request.target, request.target_tree)) if tree is not None}
        validation = validate(
            wt.path, changed=done.changed, generated_tests=[p for g in plan.groups for p in g.test_paths],
            reanalyze=lambda path: analyze(path).records, needs_human=plan.needs_human,
            plugin_tests=request.plugin_tests, upstream_trees=trees, target_tree=request.target_tree,
            target_label=f"{request.upstream} {request.target}", upstream_package=_upstream_package(request, analysis),
            entry_points=request.entry_points, plugin_root=request.plugin_root, baseline_tree=request.baseline_tree,
            human_symbols=_human_symbols(analysis, plan.needs_human),
        )
        checkpoint("validated")

        outcome = port_outcome(analysis.outcome, plan, validation.ok)
        changes = _changes_since(root, existing, commits, shim_tip)
        pr_text = render_pr(request, plan, analysis, commits, validation, outcome, changes, fork_ref, base_sha,
                            branch, run_id, git_work.diff_numstat(root, base_sha, shim_tip), gates,
                            formatters=done.formatters, sizes=git_work.commit_sizes(root, [c.sha for c in commits]))
        atomic_write_text(wt.path / "PR_MATERIAL.md", pr_text)
        families = tuple(dict.fromkeys(c for commit in commits for c in commit.families))
        symbols = tuple(dict.fromkeys(s for commit in commits for s in commit.symbols))
        wt.commit(["PR_MATERIAL.md"], f"PR_MATERIAL.md: {outcome.outcome.value} for {upstream_ref}\n\n"
                  + git_work.trailer_block(families, symbols, upstream_ref, run_id) + "\n", identity)
        tip = wt.head()
        checkpoint("pr-material")
        result = replace(
            base, outcome=outcome, tip=tip, commits=tuple(commits), plan=plan.to_dict(), validation=validation.to_dict(),
            changes=changes, pr_material=pr_text, bridged=plan.bridged, needs_human=plan.needs_human,
            imports_at_target=validation.imports_verdict(),
        )
        if not validation.ok:
            raise _failed(request, root, result, validation, analysis, identity)

        def after_move() -> PortResult:
            moved = replace(result, branch_moved=True, message=_done_message(branch, tip, commits, changes))
            pub.record_ledger(request.forks_file, request.fork, slug=slug, branch=branch, upstream=request.upstream,
                              target=request.target, outcome=outcome.outcome.value, run_id=run_id,
                              commits=tuple(c.sha for c in commits) + (tip,), baseline=request.baseline,
                              notes=f"{len(plan.bridged)} bridged, {len(plan.needs_human)} need a human")
            return _record(request, moved, analysis)

        result = pub.publish(root, branch, tip, existing.sha if existing else None, run_id, identity, after_move)
        moved.append(result)
        checkpoint("branch-moved")

    if request.push:
        result = replace(result, pushed=pub.push_branch(root, request.remote, branch, force=existing is not None))
        result = _record(request, result, analysis)
    return result


def _failed(request: PortRequest, root: Path, result: PortResult, validation, analysis: PortAnalysis,
            identity) -> PortFailed:
    """Keep the failed result on `<branch>-failed`, record it, and build the error naming both."""
    failed_branch = pub.keep_failed(root, failed_branch_name(result.branch), result.tip, result.run_id, identity)
    failing = validation.failing
    result = _record(request, replace(result, failed_branch=failed_branch,
                                      message=f"validation failed: {result.branch} not moved; result kept on {failed_branch}"),
                     analysis)
    where = f"{result.record_dir}/run.json" if result.record_dir else "(no run record: runs_dir is unset)"
    return PortFailed(
        f"validation failed ({', '.join(c.name for c in failing)}): {result.branch} was not moved; "
        f"the result is on {failed_branch}, run record {where}",
        hint=f"inspect it with `git log -p {failed_branch}` and the failing checks below; fix the fork or the shim "
             "templates and run again",
        details={"run_id": result.run_id, "record_dir": result.record_dir or None, "failed_branch": failed_branch,
                 "checks": [c.to_dict() for c in failing]},
        result=result,
    )


def _done_message(branch: str, tip: str, commits: Sequence[CommitInfo], changes: dict[str, Any]) -> str:
    message = f"{branch} -> {tip[:12]}: {len(commits)} shim commit(s) + PR_MATERIAL.md"
    if changes:
        message += f"; replaced the previous series ({changes['previous_sha'][:12]})"
    return message


def _human_symbols(analysis: PortAnalysis, keys: Sequence[str]) -> list[str]:
    """Upstream names of the findings left to a human: an import failing on one of them is expected."""
    wanted = set(keys)
    return [r.old_location.dotted for r in analysis.records if r.key in wanted]


def _upstream_package(request: PortRequest, analysis: PortAnalysis) -> str:
    """Top-level package of the upstream (vllm) whose tree the import smoke puts first on sys.path."""
    for record in analysis.records:
        if record.old_location.module:
            return record.old_location.module.split(".")[0]
    return request.upstream.replace("-", "_")


def _changes_since(root: Path, existing, commits: Sequence[CommitInfo], tip: str) -> dict[str, Any]:
    if existing is None:
        return {}
    before = {s for c in existing.series for s in c.trailers.get("Porter-Symbol", ())}
    after = {s for c in commits for s in c.symbols}
    runs = [c.run for c in existing.series if c.run]
    return {
        "previous_sha": existing.sha,
        "previous_commits": len(existing.series),
        "previous_run": runs[-1] if runs else None,
        "added": sorted(after - before),
        "dropped": sorted(before - after),
        "kept": sorted(before & after),
        "tree_stat": git_work.git(root, "diff", "--stat=100", existing.sha, tip, "--", ".",
                                  ":(exclude)PR_MATERIAL.md").stdout.rstrip(),
    }


def _record(request: PortRequest, result: PortResult, analysis: PortAnalysis) -> PortResult:
    return pub.write_record(request.runs_dir, result, {"analysis": {
        "records": [r.to_dict() for r in analysis.records], "notes": [r.to_dict() for r in analysis.notes],
        "facts": analysis.facts}})
