"""`porter upgrade --summary`: the outcome, counts per drift family and the top findings, in a
screenful instead of every table. Built from the `porter.upgrade/1` payload (the stable schema),
so it shows exactly what `--json` says."""

from __future__ import annotations

from typing import Any

SEVERITY_ORDER = {"breaking": 0, "risky": 1, "note": 2}
TOP_FINDINGS = 10


def top_findings(analysis: dict[str, Any], limit: int = TOP_FINDINGS) -> list[dict[str, Any]]:
    """Breaking before risky; within a severity, the finding with the most sites first."""
    records = list(analysis.get("records") or [])
    records.sort(key=lambda r: (SEVERITY_ORDER.get(str(r.get("severity")), 3), -len(r.get("sites") or []),
                                str(r.get("family")), str(r.get("symbol"))))
    return records[:limit]


def family_counts(analysis: dict[str, Any]) -> list[tuple[str, str, int, int, int]]:
    """(family, label, breaking, risky, notes) in the order families first appear, breaking first."""
    rows: dict[str, list[Any]] = {}
    for key, severity_of in (("records", None), ("notes", "note")):
        for record in analysis.get(key) or []:
            family = str(record.get("family"))
            row = rows.setdefault(family, [family, str(record.get("family_label", family)), 0, 0, 0])
            severity = severity_of or str(record.get("severity"))
            row[2 + min(SEVERITY_ORDER.get(severity, 1), 2)] += 1
    return sorted((tuple(r) for r in rows.values()), key=lambda r: (-r[2], -r[3], r[0]))  # type: ignore[misc]


def render_upgrade_summary(payload: dict[str, Any], console: Any, limit: int = TOP_FINDINGS) -> None:
    from rich.table import Table
    from rich.text import Text

    from porter.output import print_whole

    analysis = payload.get("analysis") or {}
    outcome = analysis.get("outcome") or {}
    summary = analysis.get("summary") or {}
    baseline = (analysis.get("baseline") or {}).get("label") or "(no baseline)"
    target = (analysis.get("target") or {}).get("label")
    console.print(Text.assemble((str(analysis.get("plugin")), "bold"), f" on {analysis.get('upstream')} ",
                                (f"{baseline} → {target}", "bold")))
    breaking = int(summary.get("breaking", 0))
    risky = int(summary.get("records", 0)) - breaking
    style = "bold red" if outcome.get("outcome") in ("C_PATCH", "C_REPORT") else "bold green"
    console.print(Text.assemble(("outcome ", "dim"), (str(outcome.get("outcome")), style),
                                f"   {breaking} breaking, {risky} risky, {summary.get('notes', 0)} notes"))
    for reason in outcome.get("reasons") or []:
        console.print(f"  • {reason}", markup=False, soft_wrap=True)
    counts = family_counts(analysis)
    if counts:
        table = Table(title="per family", title_justify="left")
        for name, justify in (("family", "left"), ("", "left"), ("breaking", "right"), ("risky", "right"), ("notes", "right")):
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        for family, label, b, r, n in counts:
            table.add_row(family, label, Text(str(b), style="red" if b else "dim"), str(r), str(n))
        print_whole(console, table)
    top = top_findings(analysis, limit)
    if top:
        table = Table(title=f"top findings ({len(top)} of {summary.get('records', len(top))}; all of them: without --summary)",
                      title_justify="left")
        table.add_column("sev", no_wrap=True)
        table.add_column("family", no_wrap=True)
        table.add_column("symbol", no_wrap=True, overflow="ignore")
        table.add_column("first site", no_wrap=True, overflow="ignore")
        table.add_column("new home", no_wrap=True, overflow="ignore")
        for record in top:
            sites = record.get("sites") or []
            site = f"{sites[0]['path']}:{sites[0]['line']}" + (f" +{len(sites) - 1}" if len(sites) > 1 else "") if sites else "—"
            home = (record.get("new_location") or {}).get("dotted") or "—"
            table.add_row(str(record.get("severity")), str(record.get("family")), str(record.get("symbol")), site, home)
        print_whole(console, table)
