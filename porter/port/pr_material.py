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

from porter.port.worktree import FileChange
from porter.redact import redact_text
from porter.upgrade.models import DriftRecord, Severity

if TYPE_CHECKING:
    from porter.port.plan import PortAnalysis, PortRequest

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


_FAMILY_ORDER = ("F11", "F1", "F2", "F2r", "F3", "F7", "F8", "F4", "F10")  # surest breaks first


def fold_refs(refs: Sequence[str], files: int = 3, lines: int = 6) -> str:
    """`a.py:1, 5, 9; b.py:4 (+3 more)` from `path:line` references (plugin sites or upstream links):
    one path per file, its line numbers after it, the first `files` files and `lines` lines each."""
    by_file: dict[str, list[str]] = {}
    for ref in dict.fromkeys(refs):
        path, _, line = ref.rpartition(":")
        if not path or not line.isdigit():
            path, line = ref, ""
        numbers = by_file.setdefault(path, [])
        if line and line not in numbers:
            numbers.append(line)
    shown, hidden = [], 0
    for index, (path, numbers) in enumerate(by_file.items()):
        if index >= files:
            hidden += max(len(numbers), 1)
            continue
        hidden += max(len(numbers) - lines, 0)
        shown.append(f"{path}:{', '.join(numbers[:lines])}" if numbers else path)
    return "; ".join(shown) + (f" (+{hidden} more)" if hidden else "")


def group_hand_offs(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per class (or module) and reason: the members handed off there for that reason share
    it, `F1:pkg.mod.Cls.{a,b,c}`, with their plugin sites and upstream links folded per file and each
    member's own detail beside its name. A risky (latent) finding shares its line with every risky
    one of its family and reason, `F10:{pkg.a.Cls,pkg.b.Other}`, its own sites in its detail. Ranked:
    imports failing at the target, then breaking, then risky findings; within a weight the surest
    breaks (a monkeypatch target gone, a removal) first, then the ones with the most plugin sites.

    Each item: key, weight, reason, detail, sites (`path:line` list), link (`file@version:line` or "")."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in items:
        family, _, dotted = item["key"].partition(":")
        parent, _, leaf = dotted.rpartition(".")
        sites, detail = list(item.get("sites") or ()), item.get("detail") or ""
        all_sites = list(sites)
        if item["weight"] == "risky":  # latent: one line per reason, each finding's sites beside it
            parent, leaf, label = "", dotted, dotted.rpartition(".")[2]
            detail = "; ".join(x for x in (f"at {fold_refs(sites)}" if sites else "", detail) if x)
            sites = []
        elif not (family and parent and leaf):
            parent, leaf, label = dotted or item["key"], "", ""
        else:
            label = leaf
        group = groups.setdefault((f"{family}:{parent}", item["weight"], item["reason"]),
                                  {"family": family, "parent": parent, "weight": item["weight"],
                                   "reason": item["reason"], "members": [], "labels": [], "details": [], "sites": [],
                                   "all_sites": [], "links": []})
        group["members"].append(leaf)
        group["labels"].append(label)
        group["details"].append(detail)
        group["sites"].extend(sites)
        group["all_sites"].extend(all_sites)
        if item.get("link"):
            group["links"].append(item["link"])
    out = []
    for group in groups.values():
        members = [m for m in group["members"] if m]
        prefix = f"{group['family']}:{group['parent']}" + ("." if group["parent"] else "")
        if len(members) > 1:
            key = f"{prefix}{{{','.join(members)}}}"
            details = "; ".join(f"`{m}` {d}" if d.startswith("at ") else f"`{m}`: {d}"
                                for m, d in zip(group["labels"], group["details"]) if d)
        else:
            key = f"{prefix}{members[0]}" if members else f"{group['family']}:{group['parent']}"
            details = "; ".join(d for d in group["details"] if d)
        out.append({"key": key, "weight": group["weight"], "reason": group["reason"], "detail": details,
                    "count": len(group["members"]), "family": group["family"],
                    "spread": len(set(group["all_sites"])),
                    "sites": fold_refs(group["sites"]), "link": fold_refs(group["links"])})
    out.sort(key=_rank)
    return out


def _rank(group: dict[str, Any]) -> tuple[int, int, int, str]:
    """Real breaks first: an import failing at the target, then breaking findings, then risky ones;
    within those, by family (surest break first), then the most plugin sites first."""
    weight = {"import fails": 0, "breaking": 1, "risky": 2}.get(group["weight"], 3)
    family = _FAMILY_ORDER.index(group["family"]) if group["family"] in _FAMILY_ORDER else len(_FAMILY_ORDER)
    return weight, family, -group["spread"], group["key"]


def compact_diff_stat(changes: Sequence[FileChange]) -> tuple[list[str], str]:
    """(`path` (+a/-d) for each plugin file that existed before, the totals): the PR's file view draws
    the bars, the material only says what was touched; new shim and test files are named per commit."""
    edited = [f"`{c.path}` (+{c.added}/-{c.deleted})" for c in changes if not c.created]
    if not changes:
        return edited, ""
    added, deleted = sum(c.added for c in changes), sum(c.deleted for c in changes)
    return edited, f"{len(changes)} file(s) changed, +{added}/-{deleted}"


def render_pr(request: PortRequest, plan, analysis: PortAnalysis, commits, validation, outcome, changes, fork_ref,
              base_sha, branch, run_id, stat: Sequence[FileChange], gates=(), *, formatters: Sequence[str] = (),
              sizes: dict[str, dict[str, int]] | None = None) -> str:
    """`stat`: the series' files (worktree.diff_numstat); `sizes`: per commit sha, {added, deleted,
    files} (git numstat), shown in its line."""
    from porter.shims.render import render

    trees = {request.baseline: request.baseline_tree, request.target: request.target_tree}
    review = sorted({k for g in plan.groups for k in g.review})
    by_key = {r.key: r for r in analysis.records}
    smoke = validation.imports_verdict()
    failing_names = " ".join(r.get("error", "") for r in smoke.get("failed", []) + smoke.get("expected", []))
    total = sum(1 for r in analysis.records if r.severity is not Severity.NOTE)
    by_symbol = {r.symbol: r for r in analysis.records}
    human_keys = set(plan.needs_human)
    commit_views = []
    for commit in commits:
        links = [upstream_link(by_symbol[s], request.upstream, request.baseline, request.target, trees)
                 for s in commit.symbols if s in by_symbol]
        left = [s.rsplit(".", 1)[-1] for s in commit.symbols if s in by_symbol and by_symbol[s].key in human_keys]
        commit_views.append(_commit_view(commit) | {"size": (sizes or {}).get(commit.sha), "left": left,
                                                    "links": fold_refs([link for link in links if link])})
    items = []
    for left in plan.hand_offs:
        record = by_key.get(left.record.key, left.record)
        name = record.symbol.rsplit(".", 1)[-1]
        weight = "import fails" if f"'{name}'" in failing_names else record.severity.value
        items.append({"key": record.key, "reason": left.reason, "detail": left.detail, "weight": weight,
                      "sites": [f"{s.path}:{s.line}" for s in record.sites],
                      "link": upstream_link(record, request.upstream, request.baseline, request.target, trees)})
    groups = group_hand_offs(items)
    edited_files, diff_total = compact_diff_stat(stat)
    limitations = [
        "No NPU ran this: the import smoke stands in for device and compiled modules (listed in the summary), "
        "and the generated tests run on stub layouts; run `porter smoke` on an NPU host before merging.",
        "Only `from <module> import <name>` lines are rewritten; attribute chains such as `module.name` keep "
        "pointing at the upstream path (listed under Needs a human when found).",
    ]
    if analysis.notes:
        limitations.append(f"{len(analysis.notes)} note(s) under dead guards or import fallbacks were not shimmed.")
    return redact_text(render(
        "pr_material.md.j2",
        plugin=request.fork, upstream=request.upstream, baseline=request.baseline, target=request.target,
        branch=branch, run_id=run_id, created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        fork_ref=fork_ref, base_sha=base_sha, outcome=outcome.outcome.value, reasons=analysis.outcome.reasons,
        bridged=plan.bridged, needs_human=plan.needs_human, review=review, total=total,
        commits=commit_views, human_groups=groups, edited_files=edited_files, diff_total=diff_total,
        reproducer=request.reproducer or f"porter upgrade {request.fork} --to {request.target} --from {request.baseline}",
        generated_tests=[p for g in plan.groups for p in g.test_paths], validation=validation.to_dict(), smoke=smoke,
        changes=changes, limitations=limitations, convention=plan.convention, gates=list(gates),
        formatters=list(formatters),
    ))


def _commit_view(commit) -> dict[str, Any]:
    return commit.to_dict() | {"short": commit.sha[:12]}


def render_edits(request, commits, validation, branch, run_id, base_sha, fork_ref, stat: Sequence[FileChange], *,
                 formatters=(), created: str = "") -> str:
    """PR_MATERIAL.md of an edit run (porter.port.edit_port): the same summary-first layout."""
    from porter.shims.render import render

    edited_files, diff_total = compact_diff_stat(stat)

    return render(
        "pr_edits.md.j2", plugin=request.fork, upstream=request.upstream, baseline=request.baseline,
        target=request.target, title=request.title or branch, summary=list(request.summary), branch=branch, run_id=run_id,
        created=created, fork_ref=fork_ref, base_sha=base_sha, commits=[_commit_view(c) for c in commits],
        edited_files=edited_files, diff_total=diff_total, validation=validation.to_dict(),
        smoke=validation.imports_verdict(), reproducer=request.reproducer, formatters=list(formatters),
    )
