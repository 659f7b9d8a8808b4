"""Render an AnalysisReport for people: rich tables grouped by family, Markdown, and a
self-contained HTML page (inline CSS, no external assets). JSON is `AnalysisReport.to_dict()`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from porter.errors import UsageError
from porter.fsutil import atomic_write_text
from porter.output import print_whole
from porter.redact import redact_text
from porter.upgrade.analyze import AnalysisReport
from porter.upgrade.models import DriftFamily, DriftRecord, Outcome

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
OUTCOME_STYLE = {
    Outcome.A: "bold green",
    Outcome.A_WITH_NOTE: "green",
    Outcome.B: "yellow",
    Outcome.C_PATCH: "bold dark_orange",
    Outcome.C_REPORT: "bold red",
}
SEVERITY_STYLE = {"breaking": "red", "risky": "dark_orange", "note": "dim"}


SEVERITY_ORDER = {"breaking": 0, "risky": 1, "note": 2}


def grouped(records: list[DriftRecord]) -> list[tuple[str, list[DriftRecord]]]:
    """Records grouped by family, breaking first: families with a breaking finding before the
    others (taxonomy order within each), and breaking rows first inside a family."""
    out = []
    for family in DriftFamily:
        members = sorted((r for r in records if r.family == family), key=lambda r: SEVERITY_ORDER.get(r.severity.value, 3))
        if members:
            out.append((family.value, members))
    out.sort(key=lambda group: min(SEVERITY_ORDER.get(r.severity.value, 3) for r in group[1]))
    return out


def _sites(record: DriftRecord, limit: int = 3) -> str:
    shown = ", ".join(f"{s.path}:{s.line}" for s in record.sites[:limit])
    extra = len(record.sites) - limit
    return shown + (f" +{extra}" if extra > 0 else "")


def render_rich(report: AnalysisReport, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    d = report.to_dict()
    header = Text()
    header.append(f"{report.plugin}", style="bold")
    header.append(f" on {report.upstream} ")
    header.append(f"{report.baseline.label if report.baseline else '(no baseline)'} → {report.target.label}", style="bold")
    console.print(header)
    outcome = report.outcome.outcome
    console.print(Text.assemble(("outcome ", "dim"), (outcome.value, OUTCOME_STYLE[outcome]),
                                (f"   {d['summary']['breaking']} breaking, {d['summary']['records'] - d['summary']['breaking']} risky, "
                                 f"{d['summary']['notes']} notes; {d['usage']['uses']} uses in {d['usage']['files_using']} files", "dim")))
    for reason in report.outcome.reasons:
        console.print(f"  • {reason}", markup=False)
    for family, records in grouped(report.records):
        table = Table(title=f"{family} {records[0].family.label} ({len(records)})", title_justify="left", expand=True)
        # identifiers and paths are never folded or cut (porter.output.print_whole); the prose wraps
        table.add_column("symbol", no_wrap=True, overflow="ignore")
        table.add_column("sev", no_wrap=True)
        table.add_column("new home", no_wrap=True, overflow="ignore")
        table.add_column("sites", no_wrap=True, overflow="ignore")
        table.add_column("finding", min_width=30)
        for rec in records:
            home = f"{rec.new_location.dotted} ({rec.confidence:.2f})" if rec.new_location else "—"
            table.add_row(rec.symbol, Text(rec.severity.value, style=SEVERITY_STYLE[rec.severity.value]), home, _sites(rec),
                          Text(rec.message))
        print_whole(console, table)
    if report.notes:
        table = Table(title=f"notes: dead guards and absorbed fallbacks ({len(report.notes)})", title_justify="left", expand=True)
        table.add_column("family", no_wrap=True)
        table.add_column("symbol", no_wrap=True, overflow="ignore")
        table.add_column("sites", no_wrap=True, overflow="ignore")
        table.add_column("why", min_width=30)
        for rec in report.notes:
            table.add_row(rec.family.value, rec.symbol, _sites(rec), Text(rec.message))
        print_whole(console, table)
    for notice in report.notices:
        console.print(f"[yellow]notice:[/] {notice}")
    timings = ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items())
    console.print(f"[dim]{timings}[/]")


def _environment():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html", "html.j2"]),
        trim_blocks=False,
        lstrip_blocks=False,
    )


def render_markdown(report: AnalysisReport) -> str:
    template = _environment().get_template("upgrade_report.md.j2")
    return redact_text(template.render(r=report, d=report.to_dict(), families=grouped(report.records)).strip()) + "\n"


def render_html(report: AnalysisReport) -> str:
    template = _environment().get_template("upgrade_report.html.j2")
    return redact_text(template.render(r=report, d=report.to_dict(), families=grouped(report.records)))


def check_report_path(path: Path, option: str) -> None:
    """Refuse a report path that cannot be written, before the analysis runs (not after)."""
    import os

    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{option} {path} is a directory", hint=f"give a file name, e.g. {option} {path / 'report'}")
    parent = path.parent
    if not parent.is_dir():  # a typo in a directory name must not become a new directory tree
        raise UsageError(f"{option} {path}: directory {parent} does not exist",
                         hint=f"create it first (mkdir -p {parent}) or pick an existing directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: cannot write under {parent}", hint="pick a writable location")


def write_report(path: Path, text: str, option: str = "report") -> None:
    import os

    try:
        atomic_write_text(Path(path), text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(path, 0o666 & ~umask)  # a report is for sharing: the temporary file's 0600 would hide it
    except OSError as exc:
        raise UsageError(f"cannot write the {option} {path}: {exc.strerror or exc}",
                         hint="pick a writable file path") from exc
