"""Stage 1 of a port: the records every stage shares (request, analysis, result), the version
check and the outcome rules. Pure: nothing here touches git or the disk (the checkpoint test hook aside).
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from porter.errors import EnvironmentProblem, ExitCode, PorterError, UsageError
from porter.upgrade.models import DriftRecord, Outcome, OutcomeDecision


class PortFailed(PorterError):
    """The run finished but its result must not become the branch (validation failed).
    `result` carries the run (tables, record path, the kept `-failed` branch)."""

    exit_code = ExitCode.FINDINGS
    kind = "port_failed"

    def __init__(self, message: str, *, hint: str | None = None, details: dict[str, Any] | None = None,
                 result: Any = None):
        super().__init__(message, hint=hint, details=details)
        self.result = result


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
    entry_points: tuple[str, ...] = ()  # plugin entry points (`module:attr`) the import smoke loads
    plugin_root: str = ""  # the plugin's directory inside the fork ("" = the fork root)


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
    failed_branch: str = ""  # `ascend-port/<slug>-failed` when validation failed and the result was kept
    imports_at_target: dict[str, Any] = field(default_factory=dict)  # the import-smoke verdict

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
            "failed_branch": self.failed_branch or None, "imports_at_target": self.imports_at_target,
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


# ---------------------------------------------------------------- checks before anything is written


def check_versions(baseline: str, target: str) -> None:
    if baseline == target:
        raise UsageError(
            f"target {target} equals the baseline: nothing to port",
            hint="pick a newer target with --to, or another baseline with --from",
        )


# ---------------------------------------------------------------- outcome rules


def no_port_message(outcome: OutcomeDecision, breaking: Sequence[DriftRecord]) -> str:
    if outcome.outcome is Outcome.C_REPORT:
        return "outcome C_REPORT: the fix belongs to a community upstream; no branch was made (see the blocker report)"
    if outcome.outcome is Outcome.B:
        return "outcome B: a consumer-side change (pin) is enough; no branch was made"
    return f"outcome {outcome.outcome.value}: nothing to port ({len(breaking)} breaking finding(s)); no branch was made"


def port_outcome(analysis: OutcomeDecision, plan, validated: bool) -> OutcomeDecision:
    reasons = list(analysis.reasons)
    bridged, human = plan.bridged, plan.needs_human
    reasons.append(f"{len(bridged)} finding(s) bridged by generated shims" + (" (validated)" if validated else ""))
    if human:
        reasons.append(f"{len(human)} finding(s) need a human to finish: {first(human)}")
    review = sorted({k for g in plan.groups for k in g.review})
    if review:
        reasons.append(f"{len(review)} fix(es) chose defaults a maintainer must review: {first(review)}")
    return OutcomeDecision(Outcome.C_PATCH, tuple(reasons))


def first(keys: Sequence[str], shown: int = 5) -> str:
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more (listed below)" if len(keys) > shown else "")


def plan_with_missed(plan, missed: list) -> Any:
    """Move records whose import sites were not all rewritten from bridged to needs-a-human."""
    from porter.shims.model import Unhandled
    from porter.shims.strategies import import_path

    extra = []
    for group, move in missed:
        for record in group.records:
            if import_path(record) == (move.module, move.name) or record.symbol.endswith("." + move.name):
                extra.append(Unhandled(record, "used in a form porter does not rewrite (not a `from ... import` line): "
                                               "adapt it by hand", f"{move.path} uses `{move.module}.{move.name}`"))
    if not extra:
        return plan
    known = {u.record.key for u in plan.unhandled}
    return replace(plan, unhandled=plan.unhandled + tuple(u for u in extra if u.record.key not in known))
