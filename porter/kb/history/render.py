"""Rich rendering of the `history` section of `porter diagnose` (its JSON is HistoryReport.to_dict)."""

from __future__ import annotations

from typing import Any, Sequence


def render_history(console, reports: Sequence[dict[str, Any]]) -> None:
    from rich.markup import escape

    for rep in reports:
        inst = rep["installed"]
        version = f"{inst['version']} ({inst['source']})" if inst.get("version") else "unknown"
        if rep["status"] == "unavailable":
            console.print(f"[yellow]history[/]: {escape(rep['note'])}", soft_wrap=True)
            continue
        head = f"[bold]history[/] {escape(rep['repo'])}: installed version {escape(version)}"
        if rep["status"] == "no-frames":
            console.print(f"{head}; no frame of the trace lies in this repository", soft_wrap=True)
            continue
        console.print(f"{head}; {rep['commits_considered']} commit(s) since it, {len(rep['frames'])} frame(s) in the repository"
                      + ("" if rep["index_used"] else " [dim](no index: run `porter kb mine-history` for speed)[/]"), soft_wrap=True)
        if rep["note"]:
            console.print(f"  [yellow]note[/]: {escape(rep['note'])}", soft_wrap=True)
        if rep.get("gate"):
            console.print(f"  [dim]{escape(rep['gate'])}: only commits that quote the error or change a failing frame count[/]",
                          soft_wrap=True)
        for c in rep["contained"]:
            console.print(f"  [yellow]{escape(c['headline'])}[/]", soft_wrap=True)
            for ev in c["evidence"]:
                console.print(f"      [dim]{escape(ev)}[/]", soft_wrap=True)
        if not rep["candidates"]:
            console.print("  no commit after it looks like a fix for this trace", soft_wrap=True)
        for c in rep["candidates"]:
            console.print(f"  [bold magenta]{escape(c['headline'])}[/] [dim](score {c['score']:.1f})[/]", soft_wrap=True)
            for ev in c["evidence"]:
                console.print(f"      {escape(ev)}", soft_wrap=True)
