"""Stage 5 of a port: PR_MATERIAL.md, written for one read.

The first line is the imports-at-target verdict; then a one-screen summary (outcome, counts, what a
human must do first, ranked: real breaks before latent ones), then one section per commit with its
size, upstream code linked as `file@version:line` rather than quoted, relative paths only, and a
reproducer that runs from a fresh clone of the fork.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from porter.redact import redact_text
from porter.upgrade.models import DriftRecord, Severity

if TYPE_CHECKING:
    from porter.port.plan import PortAnalysis, PortRequest

def _site_text(record: DriftRecord) -> str:
    shown = ", ".join(f"{s.path}:{s.line}" for s in record.sites[:2])
    return shown + (f" +{len(record.sites) - 2}" if len(record.sites) > 2 else "")


def upstream_link(record: DriftRecord, upstream: str, baseline: str, target: str, trees: dict[str, Path | None]) -> str:
    """`vllm/a/b.py@0.13.0:42` for where the symbol lives at the target (else at the baseline)."""
    for location, version in ((record.new_location, target), (record.old_location, baseline)):
        if location is None or not location.module:
            continue
        line = _line_of(trees.get(version), location.module, location.qualname)
        if line is not None:
            return f"{line[0]}@{version}:{line[1]}"
    return ""


def _line_of(tree: Path | None, module: str, qualname: str) -> tuple[str, int] | None:
    if tree is None:
        return None
    base = Path(tree) / Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            rel = path.relative_to(tree).as_posix()
            if not qualname:
                return rel, 1
            name = qualname.split(".")[-1]
            pattern = re.compile(rf"^\s*(?:async\s+def|def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*[:=]")
            for number, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if pattern.match(text):
                    return rel, number
            return rel, 1
    return None


def version_gates(root: Path, guard_function: str | None, package: str) -> list[dict[str, Any]]:
    """Calls of the fork's version-guard function per version string (`vllm_version_is("0.11.0")`),
    for the PR material's "drop / bump gates" note."""
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


def group_hand_offs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Members of one class (or names of one module) handed off for the same reason share a line:
    `F1:pkg.mod.Cls.{a,b,c}`, their sites and links joined, in the items' (ranked) order."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in items:
        family, _, dotted = item["key"].partition(":")
        parent, _, leaf = dotted.rpartition(".")
        if not (family and parent and leaf):
            groups[(item["key"], "", "")] = {**item, "members": []}
            continue
        group = groups.setdefault((f"{family}:{parent}", item["weight"], item["reason"]),
                                  {**item, "parent": f"{family}:{parent}", "members": [], "all_sites": [], "links": []})
        group["members"].append(leaf)
        group["all_sites"].extend(s for s in [item["sites"]] if s)
        group["links"].extend(link for link in [item["link"]] if link and link not in group["links"])
    out = []
    for group in groups.values():
        if len(group.get("members", [])) > 1:
            group = {**group, "key": f"{group['parent']}.{{{','.join(group['members'])}}}",
                     "sites": "; ".join(group["all_sites"][:3]) + (" …" if len(group["all_sites"]) > 3 else ""),
                     "link": "`, `".join(group["links"][:3])}  # the template wraps it in one pair of backticks
        out.append({k: group[k] for k in ("key", "weight", "sites", "reason", "link")})
    return out


def compact_diff_stat(stat: str) -> tuple[list[str], str]:
    """`git diff --stat` lines as `path (+-N)` entries plus the totals line: the file view of the PR
    already draws the bars, the material only needs to say what was touched."""
    edited, total = [], ""
    for line in (stat or "").splitlines():
        if line.startswith("all files:"):
            total = line.partition(":")[2].strip()
        elif "|" in line:
            path, _, change = line.partition("|")
            edited.append(f"`{path.strip()}` ({change.split()[0] if change.split() else '?'})")
    return edited, total


def _rank(item: dict[str, Any]) -> tuple[int, str]:
    """Real breaks first: an import failing at the target, then breaking findings, then risky ones."""
    return ({"import fails": 0, "breaking": 1, "risky": 2}.get(item["weight"], 3), item["key"])


def render_pr(request: PortRequest, plan, analysis: PortAnalysis, commits, validation, outcome, changes, fork_ref,
              base_sha, branch, run_id, stat, gates=(), *, formatters: Sequence[str] = (),
              sizes: dict[str, dict[str, int]] | None = None) -> str:
    """`sizes`: per commit sha, {added, deleted, files} (git numstat), shown in its section heading."""
    from porter.shims.render import render

    trees = {request.baseline: request.baseline_tree, request.target: request.target_tree}
    human_reasons = {u.record.key: u.reason for u in plan.unhandled}
    for group in plan.groups:
        for key in group.needs_human:
            human_reasons.setdefault(key, f"{group.strategy}: porter left a stub that raises in "
                                          f"{group.files[0].path if group.files else group.name}")
    review = {k for g in plan.groups for k in g.review}
    by_key = {r.key: r for r in analysis.records}
    smoke = validation.imports_verdict()
    failing_names = " ".join(r.get("error", "") for r in smoke.get("failed", []) + smoke.get("expected", []))
    total = sum(1 for r in analysis.records if r.severity is not Severity.NOTE)
    by_symbol = {r.symbol: r for r in analysis.records}
    commit_views = []
    for commit in commits:
        links = [upstream_link(by_symbol[s], request.upstream, request.baseline, request.target, trees)
                 for s in commit.symbols if s in by_symbol]
        commit_views.append(_commit_view(commit) | {"size": (sizes or {}).get(commit.sha),
                                                    "links": [link for link in dict.fromkeys(links) if link]})
    items = []
    for key, reason in human_reasons.items():
        record = by_key.get(key)
        name = record.symbol.rsplit(".", 1)[-1] if record else key
        weight = ("import fails" if record and f"'{name}'" in failing_names else
                  (record.severity.value if record else "risky"))
        items.append({"key": key, "reason": reason, "sites": _site_text(record) if record else "", "weight": weight,
                      "link": upstream_link(record, request.upstream, request.baseline, request.target, trees) if record else ""})
    items.sort(key=_rank)
    groups = group_hand_offs(items)
    edited_files, diff_total = compact_diff_stat(stat)
    limitations = [
        "No NPU ran this: the import smoke stands in for device and compiled modules (listed under Validation), "
        "and the generated tests run on stub layouts; run `porter smoke` on an NPU host before merging.",
        "Only `from <module> import <name>` lines are rewritten; attribute chains such as `module.name` keep "
        "pointing at the upstream path (listed per fix when found).",
    ]
    if analysis.notes:
        limitations.append(f"{len(analysis.notes)} note(s) under dead guards or import fallbacks were not shimmed.")
    return redact_text(render(
        "pr_material.md.j2",
        plugin=request.fork, upstream=request.upstream, baseline=request.baseline, target=request.target,
        branch=branch, run_id=run_id, created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        fork_ref=fork_ref, base_sha=base_sha, outcome=outcome.outcome.value, reasons=outcome.reasons,
        bridged=plan.bridged, needs_human=plan.needs_human, review=sorted(review), total=total,
        commits=commit_views, human_items=items, human_groups=groups, diff_stat=stat, edited_files=edited_files, diff_total=diff_total,
        reproducer=request.reproducer or f"porter upgrade {request.fork} --to {request.target} --from {request.baseline}",
        generated_tests=[p for g in plan.groups for p in g.test_paths], validation=validation.to_dict(), smoke=smoke,
        changes=changes, limitations=limitations, convention=plan.convention, gates=list(gates),
        formatters=list(formatters),
    ))


def _commit_view(commit) -> dict[str, Any]:
    return commit.to_dict() | {"short": commit.sha[:12]}


def render_edits(request, commits, validation, branch, run_id, base_sha, fork_ref, stat, *, formatters=(),
                 created: str = "") -> str:
    """PR_MATERIAL.md of an edit run (porter.port.edit_port): the same summary-first layout."""
    from porter.shims.render import render

    return render(
        "pr_edits.md.j2", plugin=request.fork, upstream=request.upstream, baseline=request.baseline,
        target=request.target, title=request.title or branch, summary=list(request.summary), branch=branch, run_id=run_id,
        created=created, fork_ref=fork_ref, base_sha=base_sha, commits=[_commit_view(c) for c in commits],
        diff_stat=stat, validation=validation.to_dict(), smoke=validation.imports_verdict(),
        reproducer=request.reproducer, formatters=list(formatters),
    )
