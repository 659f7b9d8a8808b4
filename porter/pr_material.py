"""PR_MATERIAL.md of a port run, rendered from the run record with porter/shims/templates/pr_material.md.j2:
outcome and reasons, drift table, per-fix rationale, hand-offs, diff stat, commits, reproducer,
validation, changes since the previous run, limitations, notes (including the fork's version gates)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from porter.upgrade.models import DriftRecord, Severity

if TYPE_CHECKING:
    from porter.port import PortAnalysis, PortRequest


def _site_text(record: DriftRecord) -> str:
    shown = ", ".join(f"{s.path}:{s.line}" for s in record.sites[:2])
    return shown + (f" +{len(record.sites) - 2}" if len(record.sites) > 2 else "")


_FIX_LABEL = {
    "lazy_import_fallback": "lazy import fallback",
    "signature_adapter": "call adapter",
    "removed_fallback": "local fallback",
    "member_default": "member with default",
    "override_params": "override accepts new parameters",
}


def version_gates(root: Path, guard_function: str | None, package: str) -> list[dict[str, Any]]:
    """Calls of the fork's version-guard function per version string (`vllm_version_is("0.11.0")`),
    for the PR material's "drop / bump gates" note."""
    import re

    if not guard_function:
        return []
    name = guard_function.rpartition(".")[2]
    call = re.compile(rf"\b{re.escape(name)}\(\s*['\"]([^'\"]+)['\"]")
    found: dict[str, list[str]] = {}
    for path in sorted((root / package).rglob("*.py")) if (root / package).is_dir() else []:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for match in call.finditer(line):
                found.setdefault(match.group(1), []).append(f"{path.relative_to(root).as_posix()}:{number}")
    return [{"version": v, "count": len(sites), "sites": sites[:5]} for v, sites in sorted(found.items())]


def render_pr(request: PortRequest, plan, analysis: PortAnalysis, commits, validation, outcome, changes, fork_ref,
               base_sha, branch, run_id, stat, root, gates=()) -> str:
    from porter.shims.render import render

    human_reasons = {u.record.key: u.reason for u in plan.unhandled}
    for group in plan.groups:
        for key in group.needs_human:
            human_reasons.setdefault(key, f"{group.strategy}: porter left a TODO stub in {group.files[0].path if group.files else group.name}")
    review = {k for g in plan.groups for k in g.review}
    fix_of = {r.key: (_FIX_LABEL.get(g.strategy, g.strategy), g.name) for g in plan.groups for r in g.records}
    rows = []
    for record in analysis.records:
        if record.severity is Severity.NOTE:
            continue
        fix, group = fix_of.get(record.key, ("—", ""))
        state = "needs a human" if record.key in human_reasons else ("bridged, review" if record.key in review else "bridged")
        rows.append({
            "family": f"{record.family.value} {record.family.label}", "symbol": record.symbol,
            "old": record.old_location.dotted, "new": record.new_location.dotted if record.new_location else "",
            "sites": _site_text(record), "fix": f"{fix} ({group})" if group else fix, "status": state,
        })
    by_key = {r.key: r for r in analysis.records}
    items = [{"key": k, "reason": v, "sites": _site_text(by_key[k]) if k in by_key else ""} for k, v in human_reasons.items()]
    limitations = [
        "Validation runs without an NPU: shims are checked against stub layouts of both upstream versions, "
        "not against a device run; run `porter smoke` on an NPU host before merging.",
        "Only `from <module> import <name>` lines are rewritten; attribute chains such as `module.name` keep "
        "pointing at the upstream path (listed per fix when found).",
    ]
    if analysis.notes:
        limitations.append(f"{len(analysis.notes)} note(s) under dead guards or import fallbacks were not shimmed.")
    if any(g.strategy == "signature_adapter" for g in plan.groups):
        limitations.append("Call adapters remap keywords only; positional calls and methods are left as they are.")
    reproducer = request.reproducer or (
        f"porter upgrade {request.fork} --to {request.target} --from {request.baseline}"
    )
    return render(
        "pr_material.md.j2",
        plugin=request.fork, upstream=request.upstream, baseline=request.baseline, target=request.target,
        branch=branch, run_id=run_id, created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        fork_ref=fork_ref, base_sha=base_sha, outcome=outcome.outcome.value, reasons=outcome.reasons,
        bridged=plan.bridged, needs_human=plan.needs_human, review=sorted(review), total=len(rows),
        drift_rows=rows, commits=[c.to_dict() for c in commits], human_items=items, diff_stat=stat,
        reproducer=reproducer, fork_path=str(root), generated_tests=[p for g in plan.groups for p in g.test_paths],
        validation=validation.to_dict(), changes=changes, limitations=limitations, convention=plan.convention,
        gates=list(gates),
    )
