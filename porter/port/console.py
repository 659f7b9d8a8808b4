"""Rich rendering of a port run for people (the analysis table is porter.upgrade.report's)."""

from __future__ import annotations

from typing import Any


def render_port(result: Any, console: Any) -> None:
    """Rich summary of a port run (the analysis table is rendered by porter.upgrade.report)."""
    from rich.table import Table

    if hasattr(result, "keys_added"):  # porter.port.transformers_compare.TransformersComparison
        console.print(f"\n[bold]NPU integration[/] transformers {result.baseline} -> {result.target}: "
                      f"outcome [bold]{result.outcome.outcome.value}[/]")
        for reason in result.outcome.reasons:
            console.print(f"  • {reason}")
        for line in result.evidence:
            console.print(f"  [dim]{line}[/]")
        return
    if hasattr(result, "conflicts"):  # a merge (porter.port.fork_merge.MergeResult)
        console.print(f"\n[bold]merge[/] {result.fork}: {result.message}")
        table = Table(title="conflicts")
        for column in ("file", "kind", "resolved by"):
            table.add_column(column)
        for c in result.conflicts:
            table.add_row(c.path, c.kind, c.resolved_by or "[yellow]a human[/]")
        console.print(table)
        if result.branch_moved:
            console.print(f"PR material: git show {result.branch}:PR_MATERIAL.md")
        return

    verdict = (result.imports_at_target or {}).get("line")
    if verdict:
        colour = {"yes": "green", "no": "red"}.get(result.imports_at_target.get("verdict"), "yellow")
        console.print(f"\n[bold {colour}]{verdict}[/]")
    console.print(f"[bold]port[/] {result.fork}: outcome [bold]{result.outcome.outcome.value}[/] — {result.message}")
    if result.commits:
        table = Table(title=f"{result.branch} (run {result.run_id})")
        table.add_column("commit")
        table.add_column("families")
        table.add_column("change")
        for commit in result.commits:
            table.add_row(commit.sha[:12], ", ".join(commit.families), commit.subject)
        console.print(table)
    checks = result.validation.get("checks", [])
    if checks:
        table = Table(title="validation")
        table.add_column("check")
        table.add_column("verdict")
        table.add_column("detail")
        for check in checks:
            colour = {"pass": "green", "fail": "red"}.get(check["verdict"], "yellow")
            table.add_row(check["name"], f"[{colour}]{check['verdict']}[/]", check["detail"])
        console.print(table)
    if result.needs_human:
        console.print(f"[yellow]needs a human[/]: {', '.join(result.needs_human)}")
    if result.changes:
        stat = (result.changes.get("tree_stat") or "").strip().splitlines()
        console.print(f"replaced previous series {result.changes['previous_sha'][:12]}: "
                      f"new fixes {result.changes['added'] or 'none'}, dropped {result.changes['dropped'] or 'none'}; "
                      f"files {stat[-1].strip() if stat else 'identical to the previous tip (PR_MATERIAL.md aside)'}")
    if result.branch_moved:
        console.print(f"PR material: git show {result.branch}:PR_MATERIAL.md"
                      + (f"  (copy in {result.record_dir})" if result.record_dir else ""))
    if result.failed_branch:
        console.print(f"[red]validation failed[/]: result kept on {result.failed_branch}"
                      + (f"; run record {result.record_dir}/run.json" if result.record_dir else ""))
        for check in checks:
            if check["verdict"] != "pass" and (check.get("required") or check["verdict"] == "fail"):
                console.print(f"  [red]{check['name']}[/]: {check['detail']}")
                for item in check.get("items", [])[:10]:
                    console.print(f"    {item}")
    if result.pushed:
        console.print(f"pushed: {result.pushed}")
