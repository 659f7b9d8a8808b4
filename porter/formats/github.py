"""GitHub Actions workflow commands (`::error file=F,line=N,title=T::message`) for
`porter upgrade` findings and `porter smoke` verdicts, so they show on the run and the diff.

Paths are made relative to the working directory (the checkout in a workflow) when the plugin
tree lies inside it; GitHub places file annotations only on files of the repository."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

LEVELS = {"breaking": "error", "risky": "warning", "note": "notice"}


def escape_data(text: str) -> str:
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, **props: Any) -> str:
    shown = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v not in (None, ""))
    return f"::{level}{' ' + shown if shown else ''}::{escape_data(message)}"


def _repo_path(plugin_root: str | None, path: str, cwd: Path) -> str:
    if not plugin_root:
        return path
    root = Path(plugin_root)
    try:
        rel = (root.resolve() / path).relative_to(cwd.resolve())
    except ValueError:
        return path  # outside the checkout: GitHub shows it without a file link
    return rel.as_posix()


def upgrade_annotations(doc: dict[str, Any], cwd: Path | None = None) -> str:
    cwd = Path.cwd() if cwd is None else cwd
    analysis = doc.get("analysis") or {}
    root = (analysis.get("plugin_tree") or {}).get("root")
    lines = []
    for record in list(analysis.get("records") or []) + list(analysis.get("notes") or []):
        level = LEVELS.get(str(record.get("severity")), "warning")
        title = f"{record.get('family')} {record.get('family_label', '')}: {record.get('symbol')}".strip()
        message = record.get("message") or title
        sites = record.get("sites") or []
        if not sites:
            lines.append(command(level, message, title=title))
        for site in sites:
            lines.append(command(level, message, file=_repo_path(root, str(site.get("path")), cwd),
                                 line=site.get("line"), title=title))
    outcome = analysis.get("outcome") or {}
    summary = analysis.get("summary") or {}
    text = (f"{analysis.get('plugin')} on {analysis.get('upstream')} {(analysis.get('target') or {}).get('label')}: "
            f"outcome {outcome.get('outcome')}, {summary.get('breaking', 0)} breaking, "
            f"{int(summary.get('records', 0)) - int(summary.get('breaking', 0))} risky, {summary.get('notes', 0)} notes")
    lines.append(command("notice", text, title="porter upgrade"))
    return "\n".join(lines) + "\n"


def smoke_annotations(doc: dict[str, Any]) -> str:
    lines = []
    run = doc.get("run")
    if isinstance(run, dict):
        host = run.get("host")
        for result in (run.get("report") or {}).get("results") or []:
            verdict = result.get("verdict")
            if verdict not in ("fail", "error"):
                continue
            values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in (result.get("values") or {}).items() if not isinstance(v, (dict, list)))
            message = "; ".join(x for x in (result.get("reason"), values) if x) or verdict
            lines.append(command("error", message, title=f"smoke {host} {result.get('gate')} {verdict}"))
        error = run.get("error")
        if isinstance(error, dict):
            message = "; ".join(x for x in (error.get("message"), error.get("hint")) if x)
            lines.append(command("error", message, title=f"smoke {host}: run failed"))
        state = "ok" if run.get("ok") else "FAILED"
        counts: dict[str, int] = {}
        for result in (run.get("report") or {}).get("results") or []:
            counts[result.get("verdict")] = counts.get(result.get("verdict"), 0) + 1
        shown = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        lines.append(command("notice", f"smoke {run.get('level')} on {host}: {state} ({shown or 'no checks'})",
                             title="porter smoke"))
    comparison = doc.get("comparison")
    if isinstance(comparison, dict):
        for gate in comparison.get("new_failures") or []:
            lines.append(command("error", f"{gate} newly failing since {comparison.get('old_run')}",
                                 title="smoke regression"))
        for item in comparison.get("drift") or []:
            lines.append(command("warning", f"{item.get('gate')}.{item.get('metric')}: {item.get('old')} -> {item.get('new')}",
                                 title="smoke metric drift"))
    return "\n".join(lines) + ("\n" if lines else "")
