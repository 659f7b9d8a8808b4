"""`porter upgrade NAME --to REF` for real: analysis -> shims -> commits -> validation ->
PR material -> branch move -> ledger.

The run happens in a detached worktree of the fork at its baseline commit. The branch
`ascend-port/<slug>` moves (compare-and-swap) only after every commit was made and validation
passed; any failure or Ctrl-C leaves the fork exactly as it was (the worktree is removed and
no ref changed). A record of every run that got as far as validation is kept in runs_dir.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from porter.errors import EnvironmentProblem, ExitCode, InputError, PorterError, UsageError
from porter.fsutil import atomic_write_text
from porter.slug import port_branch, slugify
from porter.upgrade.models import DriftRecord, Outcome, OutcomeDecision, Severity


class PortFailed(PorterError):
    """The run finished but its result must not become the branch (validation failed)."""

    exit_code = ExitCode.FINDINGS
    kind = "port_failed"


@dataclass(frozen=True)
class PortAnalysis:
    """What the port needs from the drift analysis of one plugin tree."""

    records: tuple[DriftRecord, ...]
    notes: tuple[DriftRecord, ...] = ()
    outcome: OutcomeDecision = field(default_factory=lambda: OutcomeDecision(Outcome.A, ("no findings",)))
    facts: dict[str, Any] = field(default_factory=dict)  # summary for the PR material (usage counts, timings)


AnalyzeFn = Callable[[Path], PortAnalysis]


@dataclass(frozen=True)
class PortRequest:
    fork: str  # name in forks/forks.yaml (ledger key); also used in titles
    fork_path: Path  # the user's checkout of the fork (read only for porter)
    upstream: str
    baseline: str  # upstream version the plugin is validated on
    target: str
    baseline_tree: Path | None = None  # materialized upstream trees (for shim facts and plugin tests)
    target_tree: Path | None = None
    fork_ref: str | None = None  # fork commit-ish to start from; default: the checked-out branch
    package: str | None = None
    convention_hint: dict[str, Any] = field(default_factory=dict)
    slug: str | None = None
    plugin_tests: tuple[str, ...] = ()  # plugin test paths to run against both upstream trees
    push: bool = False
    remote: str = "origin"
    allow_dirty: bool = False
    force: bool = False
    work_dir: Path = Path("/tmp/porter-worktrees")
    runs_dir: Path | None = None
    forks_file: Path | None = None  # ledger; None = do not record
    reproducer: str = ""


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str
    group: str
    families: tuple[str, ...]
    symbols: tuple[str, ...]
    files: tuple[str, ...]
    rationale: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"sha": self.sha, "subject": self.subject, "group": self.group, "families": list(self.families),
                "symbols": list(self.symbols), "files": list(self.files), "rationale": list(self.rationale)}


@dataclass(frozen=True)
class PortResult:
    run_id: str
    fork: str
    upstream: str
    baseline: str
    target: str
    slug: str
    branch: str
    outcome: OutcomeDecision
    branch_moved: bool = False
    previous_sha: str | None = None
    tip: str | None = None
    base_sha: str = ""
    commits: tuple[CommitInfo, ...] = ()
    plan: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, Any] = field(default_factory=dict)
    pr_material: str = ""  # text
    record_dir: str = ""
    pushed: str = ""
    message: str = ""
    bridged: tuple[str, ...] = ()
    needs_human: tuple[str, ...] = ()
    total: int = 0

    @property
    def exit_code(self) -> int:
        """0 when the run did its job (branch made, or nothing to port); 1 when the fix belongs upstream.
        Findings left for a human are part of a successful C_PATCH outcome and its PR material."""
        if self.outcome.outcome is Outcome.C_REPORT:
            return int(ExitCode.FINDINGS)
        return int(ExitCode.OK)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "fork": self.fork, "upstream": self.upstream, "baseline": self.baseline,
            "target": self.target, "slug": self.slug, "branch": self.branch, "branch_moved": self.branch_moved,
            "previous_sha": self.previous_sha, "tip": self.tip, "base_sha": self.base_sha,
            "outcome": self.outcome.to_dict(), "commits": [c.to_dict() for c in self.commits], "plan": self.plan,
            "validation": self.validation, "changes": self.changes, "record_dir": self.record_dir,
            "pushed": self.pushed, "message": self.message, "bridged": list(self.bridged),
            "needs_human": list(self.needs_human), "total_findings": self.total,
        }


# ---------------------------------------------------------------- test hooks


def checkpoint(stage: str) -> None:
    """Test hook: PORTER_TEST_HOOK=fail:<stage> raises there; pause:<stage>:<file> writes <file>
    and sleeps, so a test can interrupt the run at a known point."""
    spec = os.environ.get("PORTER_TEST_HOOK")
    if not spec:
        return
    action, _, rest = spec.partition(":")
    at, _, arg = rest.partition(":")
    if at != stage:
        return
    if action == "fail":
        raise EnvironmentProblem(f"injected failure at {stage} (PORTER_TEST_HOOK)")
    if action == "pause":
        Path(arg).write_text(stage, encoding="utf-8")
        time.sleep(float(os.environ.get("PORTER_TEST_PAUSE_S", "30")))


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


# ---------------------------------------------------------------- the run


def check_versions(baseline: str, target: str) -> None:
    if baseline == target:
        raise UsageError(
            f"target {target} equals the baseline: nothing to port",
            hint="pick a newer target with --to, or another baseline with --from",
        )


def check_fork(fork_path: Path, *, allow_dirty: bool = False, fork_ref: str | None = None) -> tuple[Path, str, str]:
    """The fork checkout is one porter may start from: (repository root, baseline sha, ref name).
    Read only; also run before the analysis so a bad fork fails before any download."""
    from porter import forks

    fork = forks.inspect_fork(fork_path)
    root = fork.root
    if fork.dirty and not allow_dirty:
        shown = "; ".join(fork.dirty[:3]) + (" ..." if len(fork.dirty) > 3 else "")
        raise InputError(
            f"the fork checkout {root} has uncommitted changes ({shown})",
            hint="commit or stash them first (porter works from committed history and never touches the checkout), "
                 "or pass --allow-dirty to port the committed baseline anyway",
        )
    if fork_ref:
        return root, forks.resolve_commit(root, fork_ref), fork_ref
    if fork.head_branch is None:
        raise InputError(
            f"HEAD is detached in {root} ({fork.head_sha[:12]}): porter cannot tell which branch is the baseline",
            hint="check out the plugin's branch, or name the baseline commit with --fork-ref",
        )
    return root, fork.head_sha, fork.head_branch


def run_port(request: PortRequest, analyze: AnalyzeFn, status: Callable[[str], None] = lambda _m: None) -> PortResult:
    from porter import forks
    from porter.port_validation import validate
    from porter.pr_material import render_pr, version_gates
    from porter.shims.apply import apply_group
    from porter.shims.convention import detect
    from porter.shims.lookup import UpstreamTree
    from porter.shims.strategies import ShimContext, plan_shims

    check_versions(request.baseline, request.target)
    root, base_sha, fork_ref = check_fork(request.fork_path, allow_dirty=request.allow_dirty, fork_ref=request.fork_ref)
    slug = request.slug or slugify(request.upstream, request.target)
    branch = port_branch(slug)
    existing = forks.check_branch(root, branch, base_sha, force=request.force)
    run_id = new_run_id()
    identity = forks.commit_identity(root)
    upstream_ref = f"{request.upstream} {request.target}"
    status(f"porter run {run_id}: {request.fork} {fork_ref} ({base_sha[:12]}) for {upstream_ref}")

    with forks.worktree(root, base_sha, request.work_dir, run_id) as wt:
        checkpoint("worktree")
        status("analysing the baseline tree")
        analysis = analyze(wt.path)
        breaking = [r for r in analysis.records if r.severity is not Severity.NOTE]
        base = PortResult(run_id, request.fork, request.upstream, request.baseline, request.target, slug, branch,
                          analysis.outcome, base_sha=base_sha, previous_sha=existing.sha if existing else None,
                          total=len(breaking))
        if analysis.outcome.outcome is not Outcome.C_PATCH or not breaking:
            message = _no_port_message(analysis.outcome, breaking)
            return _record(request, replace(base, message=message), analysis)

        convention = detect(wt.path, request.package, request.convention_hint)
        ctx = ShimContext(
            plugin_root=wt.path, convention=convention, upstream=request.upstream, baseline=request.baseline,
            target=request.target, old_tree=UpstreamTree(request.baseline_tree), new_tree=UpstreamTree(request.target_tree),
            run_id=run_id, existing=frozenset(_tracked(wt)),
        )
        plan = plan_shims(breaking, ctx)
        gates = version_gates(wt.path, convention.guard_function, convention.package)
        commits: list[CommitInfo] = []
        changed_all: set[str] = set()
        missed_moves: list = []
        for index, group in enumerate(plan.groups, 1):
            status(f"[{index}/{len(plan.groups)}] {group.subject}")
            applied = apply_group(wt.path, group)
            missed_moves.extend((group, move) for move in applied.missed_moves)
            families = tuple(dict.fromkeys(r.family.value for r in group.records))
            message = f"{group.subject}\n\n" + "\n".join(f"- {line}" for line in group.rationale) + "\n\n" + \
                forks.trailer_block(families, group.symbols, upstream_ref, run_id) + "\n"
            sha = wt.commit(applied.changed, message, identity)
            if sha is None:  # the baseline already holds exactly these files
                status(f"    already on the baseline: {group.name}")
                continue
            changed_all.update(applied.changed)
            commits.append(CommitInfo(sha, group.subject, group.name, families, group.symbols, applied.changed,
                                      group.rationale + tuple(f"not rewritten (not a plain `from ... import` line): "
                                                              f"{m.path} imports {m.module}.{m.name}" for m in applied.missed_moves)))
            checkpoint(f"commit-{index}")
        shim_tip = wt.head() if commits else base_sha
        # A record with a use the rewrite could not reach still breaks there: it is a human's.
        plan = plan_with_missed(plan, missed_moves)

        status("validating the branch")
        needs_human = plan.needs_human
        trees = {f"{request.upstream} {label}": tree for label, tree in
                 ((request.baseline, request.baseline_tree), (request.target, request.target_tree)) if tree is not None}
        validation = validate(
            wt.path, changed=changed_all, generated_tests=[p for g in plan.groups for p in g.test_paths],
            reanalyze=lambda path: analyze(path).records, needs_human=needs_human,
            plugin_tests=request.plugin_tests, upstream_trees=trees,
        )
        checkpoint("validated")

        outcome = _port_outcome(analysis.outcome, plan, validation.ok)
        changes = _changes_since(root, existing, commits, shim_tip)
        pr_text = render_pr(request, plan, analysis, commits, validation, outcome, changes, fork_ref, base_sha,
                             branch, run_id, forks.diff_stat(root, base_sha, shim_tip), root, gates)
        atomic_write_text(wt.path / "PR_MATERIAL.md", pr_text)
        families = tuple(dict.fromkeys(c for commit in commits for c in commit.families))
        symbols = tuple(dict.fromkeys(s for commit in commits for s in commit.symbols))
        wt.commit(["PR_MATERIAL.md"], f"PR_MATERIAL.md: {outcome.outcome.value} for {upstream_ref}\n\n"
                  + forks.trailer_block(families, symbols, upstream_ref, run_id) + "\n", identity)
        tip = wt.head()
        checkpoint("pr-material")
        result = replace(
            base, outcome=outcome, tip=tip, commits=tuple(commits), plan=plan.to_dict(), validation=validation.to_dict(),
            changes=changes, pr_material=pr_text, bridged=plan.bridged, needs_human=needs_human,
        )
        if not validation.ok:
            failed = validation.failing
            _record(request, replace(result, message="validation failed: branch not moved"), analysis)
            raise PortFailed(
                f"validation failed ({', '.join(c.name for c in failed)}): {branch} was not moved",
                hint="see the validation section of the run record; fix the fork or the shim templates and run again",
                details={"run_id": run_id, "checks": [c.to_dict() for c in failed]},
            )
        forks.move_branch(root, branch, tip, existing.sha if existing else None, run_id)
        result = replace(result, branch_moved=True)
        checkpoint("branch-moved")

    if request.forks_file is not None:
        _ledger(request, result)
    if request.push:
        result = replace(result, pushed=forks.push_branch(root, request.remote, branch, force=existing is not None))
    message = f"{branch} -> {tip[:12]}: {len(commits)} shim commit(s) + PR_MATERIAL.md"
    if changes:
        message += f"; replaced the previous series ({changes['previous_sha'][:12]})"
    return _record(request, replace(result, message=message), analysis)


def plan_with_missed(plan, missed: list) -> Any:
    """Move records whose import sites were not all rewritten from bridged to needs-a-human."""
    from porter.shims.model import Unhandled
    from porter.shims.strategies import import_path

    extra = []
    for group, move in missed:
        for record in group.records:
            if import_path(record) == (move.module, move.name) or record.symbol.endswith("." + move.name):
                extra.append(Unhandled(record, f"{move.path} uses `{move.module}.{move.name}` in a form porter does not "
                                               "rewrite (not a `from ... import` line): adapt it by hand"))
    if not extra:
        return plan
    known = {u.record.key for u in plan.unhandled}
    return replace(plan, unhandled=plan.unhandled + tuple(u for u in extra if u.record.key not in known))


def _tracked(wt) -> list[str]:
    return wt.git("ls-files").stdout.splitlines()


def _no_port_message(outcome: OutcomeDecision, breaking: Sequence[DriftRecord]) -> str:
    if outcome.outcome is Outcome.C_REPORT:
        return "outcome C_REPORT: the fix belongs to a community upstream; no branch was made (see the blocker report)"
    if outcome.outcome is Outcome.B:
        return "outcome B: a consumer-side change (pin) is enough; no branch was made"
    return f"outcome {outcome.outcome.value}: nothing to port ({len(breaking)} breaking finding(s)); no branch was made"


def _port_outcome(analysis: OutcomeDecision, plan, validated: bool) -> OutcomeDecision:
    reasons = list(analysis.reasons)
    bridged, human = plan.bridged, plan.needs_human
    reasons.append(f"{len(bridged)} finding(s) bridged by generated shims" + (" (validated)" if validated else ""))
    if human:
        reasons.append(f"{len(human)} finding(s) need a human to finish: {_first(human)}")
    review = sorted({k for g in plan.groups for k in g.review})
    if review:
        reasons.append(f"{len(review)} fix(es) chose defaults a maintainer must review: {_first(review)}")
    return OutcomeDecision(Outcome.C_PATCH, tuple(reasons))


def _first(keys: Sequence[str], shown: int = 5) -> str:
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more (listed below)" if len(keys) > shown else "")


def _changes_since(root: Path, existing, commits: Sequence[CommitInfo], tip: str) -> dict[str, Any]:
    if existing is None:
        return {}
    from porter import forks

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
        "tree_stat": forks.git(root, "diff", "--stat=100", existing.sha, tip, "--", ".", ":(exclude)PR_MATERIAL.md").stdout.rstrip(),
    }


def _record(request: PortRequest, result: PortResult, analysis: PortAnalysis) -> PortResult:
    """Keep the run record (JSON + PR material) in runs_dir; never inside the fork."""
    if request.runs_dir is None:
        return result
    directory = Path(request.runs_dir) / "upgrade" / result.run_id
    result = replace(result, record_dir=str(directory))
    doc = result.to_dict() | {"analysis": {"records": [r.to_dict() for r in analysis.records],
                                           "notes": [r.to_dict() for r in analysis.notes], "facts": analysis.facts}}
    atomic_write_text(directory / "run.json", json.dumps(doc, indent=2, default=str) + "\n")
    if result.pr_material:
        atomic_write_text(directory / "PR_MATERIAL.md", result.pr_material)
    return result


def _ledger(request: PortRequest, result: PortResult) -> None:
    from porter.registry import LedgerEntry, append_ledger, load_forks

    if request.fork not in load_forks(request.forks_file):
        return  # an ad-hoc fork (--plugin-path): nothing to record it under
    append_ledger(request.forks_file, request.fork, LedgerEntry(
        slug=result.slug, branch=result.branch, upstream=result.upstream, target=result.target,
        outcome=result.outcome.outcome.value, created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        baseline=result.baseline, commits=tuple(c.sha for c in result.commits) + ((result.tip,) if result.tip else ()),
        pr_material=f"{result.branch}:PR_MATERIAL.md", run_id=result.run_id,
        notes=f"{len(result.bridged)} bridged, {len(result.needs_human)} need a human",
    ))
