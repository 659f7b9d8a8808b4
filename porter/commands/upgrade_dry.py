"""`porter upgrade NAME --to REF --dry-run`: the analysis and its report, without typer.

The typer command (porter.commands.upgrade) and the start-up fast path (porter.fastcli) both run a
plain dry run through `dry_run_analysis`, so there is one implementation; this module imports
neither typer nor click, which a warm (cached) dry run would otherwise spend a third of its time on.
"""

from __future__ import annotations

from pathlib import Path

from porter.errors import ExitCode, UsageError


def parse_upstream_paths(values: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for value in values:
        version, sep, directory = value.partition("=")
        if not sep or not version.strip() or not directory.strip():
            raise UsageError(f"--upstream-path {value!r} is not VERSION=DIR",
                             hint="for example --upstream-path 0.13.0=/tmp/vllm-0.13.0 (a directory, wheel or sdist)")
        out[version.strip()] = Path(directory.strip()).expanduser()
    return out


def analysis_renderer(payload: dict, report, summary: bool):
    """The human rendering of an analysis: the summary (`--summary`) or the full tables."""

    def render(console) -> None:
        if summary:
            from porter.formats.summary import render_upgrade_summary

            render_upgrade_summary(payload, console)
        else:
            from porter.upgrade.report import render_rich

            render_rich(report, console)

    return render


def dry_run_analysis(reporter, request, summary: bool, html: Path | None = None, markdown: Path | None = None) -> int:
    """Analyse, write the --html / --markdown reports asked for, emit the report (tables or the JSON
    document) and return the exit code: 1 when something breaks at the target, else 0."""
    from porter.upgrade.analyze import run_analysis

    report = run_analysis(request, progress=reporter)
    write_reports(reporter, report, html, markdown)
    payload = {"dry_run": True, "analysis": report.to_dict()}
    reporter.emit("upgrade", payload, analysis_renderer(payload, report, summary))
    return int(ExitCode.FINDINGS) if report.breaking else 0


def write_reports(reporter, report, html: Path | None, markdown: Path | None) -> None:
    from porter.upgrade.report import render_html, render_markdown, write_report

    if html is not None:
        write_report(html, render_html(report), "--html")
        reporter.status(f"HTML report: {html}")
    if markdown is not None:
        write_report(markdown, render_markdown(report), "--markdown")
        reporter.status(f"Markdown report: {markdown}")
