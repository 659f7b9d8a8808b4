"""`porter upgrade NAME --to REF`: what of the plugin breaks at the target, where each symbol went,
and the outcome. `--dry-run` stops after the analysis and the report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from porter.cliutil import command_context, exit_with, json_option
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


def register(app: typer.Typer) -> None:
    @app.command("upgrade")
    def upgrade(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="Plugin name from knowledge/upstreams.yaml (vllm-ascend, torch-npu, vime, ...)."),
        to: str = typer.Option(..., "--to", help="Target: a release (0.13.0), tag (v0.13.0), branch (main) or commit."),
        from_: Optional[str] = typer.Option(None, "--from", help="Baseline ref; default: the fork's baseline in forks/forks.yaml."),
        plugin_path: Optional[Path] = typer.Option(None, "--plugin-path", help="Plugin tree to scan (read only)."),
        upstream_path: List[str] = typer.Option([], "--upstream-path", help="VERSION=DIR: use this tree (dir, wheel, sdist) for VERSION. Repeatable."),
        upstream: Optional[str] = typer.Option(None, "--upstream", help="Which of the plugin's upstreams (default: its primary one)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Analyse and report only; change nothing."),
        html: Optional[Path] = typer.Option(None, "--html", help="Also write a self-contained HTML report to FILE."),
        markdown: Optional[Path] = typer.Option(None, "--markdown", help="Also write a Markdown report to FILE."),
        push: bool = typer.Option(False, "--push", help="Push the port branch to the fork's remote after a successful run."),
        force: bool = typer.Option(False, "--force", help="Replace a port branch that has commits porter did not make."),
        allow_dirty: bool = typer.Option(False, "--allow-dirty", help="Port the committed baseline even if the fork checkout has uncommitted changes (they stay untouched)."),
        fork_ref: Optional[str] = typer.Option(None, "--fork-ref", help="Fork commit or branch to start from (default: the checked-out branch)."),
        json_: bool = json_option(),
    ) -> None:
        """Analyse a plugin against a new upstream version: every use that breaks, where it went, the outcome.

        Without --dry-run, shims are committed on ascend-port/<slug> with PR_MATERIAL.md (docs/port.md).

        Exit 0: nothing breaks (dry run), or the port branch was made and validated (what a human must finish is listed in PR_MATERIAL.md).
        1: breaking drift (dry run), a fix that belongs upstream (C_REPORT), failed validation, or merge conflicts left for a human.
        2: bad input (names, versions, refs, archives, a missing, dirty or detached fork, a diverged branch).
        3: a source failed (network with nothing cached, git, filesystem)."""
        with command_context(ctx, "upgrade", json_) as (reporter, state):
            from porter.upgrade.analyze import AnalysisRequest, run_analysis
            from porter.upgrade.report import check_report_path, render_html, render_markdown, render_rich, write_report

            for option, path in (("--html", html), ("--markdown", markdown)):
                if path is not None:
                    check_report_path(path, option)

            request = AnalysisRequest(
                plugin=name,
                target=to,
                baseline=from_,
                plugin_path=plugin_path,
                upstream_paths=parse_upstream_paths(upstream_path),
                upstream=upstream,
                config=state.config(),
            )
            if not dry_run:
                from porter.port.dispatch import preflight

                preflight(name, state.config(), plugin_path=plugin_path, upstream=upstream, baseline=from_, target=to,
                          allow_dirty=allow_dirty, fork_ref=fork_ref, push=push)
            report = run_analysis(request, progress=reporter)
            if html is not None:
                write_report(html, render_html(report), "--html")
                reporter.status(f"HTML report: {html}")
            if markdown is not None:
                write_report(markdown, render_markdown(report), "--markdown")
                reporter.status(f"Markdown report: {markdown}")
            payload = {"dry_run": dry_run, "analysis": report.to_dict()}
            if not dry_run:
                from porter.port.console import render_port
                from porter.port.dispatch import port_after_analysis
                from porter.port.plan import PortFailed

                try:
                    port_result = port_after_analysis(
                        request, report, state.config(), reporter.status,
                        push=push, force=force, allow_dirty=allow_dirty, fork_ref=fork_ref,
                    )
                except PortFailed as failed:  # still show what was analysed and ported, then the error
                    if failed.result is not None and not reporter.json_mode:
                        reporter.emit("upgrade", payload, lambda console: (render_rich(report, console),
                                                                           render_port(failed.result, console)))
                    raise
                payload["port"] = port_result.to_dict()

                def render_both(console) -> None:
                    render_rich(report, console)
                    render_port(port_result, console)

                reporter.emit("upgrade", payload, render_both)
                exit_with(port_result.exit_code)
            reporter.emit("upgrade", payload, lambda console: render_rich(report, console))
            if report.breaking:
                exit_with(ExitCode.FINDINGS)
