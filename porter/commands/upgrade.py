"""`porter upgrade NAME --to REF`: what of the plugin breaks at the target, where each symbol went,
and the outcome. `--dry-run` stops after the analysis and the report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from porter.cliutil import command_context, exit_with, json_option
from porter.commands.upgrade_dry import (analysis_renderer, dry_run_analysis, parse_upstream_paths,  # noqa: F401 (re-exported)
                                         write_reports)
from porter.errors import ExitCode, UsageError


def _drop_target(name: str, config, plugin_path: Optional[Path]) -> Optional[str]:
    """The release lane after a drop: the plugin's release-tag file (`.github/vllm-release-tag.commit`)."""
    from porter.registry import load_registry
    from porter.upgrade.lanes import read_release_tag

    spec = load_registry(config.upstreams_file).plugin(name)
    tag_file = (spec.raw.get("lanes") or {}).get("release_tag_file")
    roots = [plugin_path] if plugin_path else []
    if not roots:
        from porter.registry import load_forks

        roots = [f.path for f in load_forks(config.forks_file).values() if f.plugin == name]
    for root in roots:
        version = read_release_tag(Path(root), tag_file) if tag_file and root else None
        if version is not None:
            return str(version)
    return None


def _run_drop(request, drop: str, dry_run: bool, reporter, state, *, force: bool, allow_dirty: bool,
              fork_ref: Optional[str], html, markdown) -> None:
    """--drop OLD: the analysis at the target, the guard cleanup, and (without --dry-run) its branch."""
    from dataclasses import replace

    from porter.upgrade.analyze import run_analysis
    from porter.upgrade.drop_run import plan_drop
    from porter.upgrade.report import render_html, render_markdown, render_rich, write_report
    from porter.upgrade.sources import parse_release

    if parse_release(drop) is None:
        raise UsageError(f"--drop {drop!r} is not a release", hint="name the release lane to drop, e.g. --drop 0.18.0")
    report = run_analysis(request, progress=reporter)
    spec = report.plugin_spec
    functions = tuple(spec.guards.version_functions) if spec else ("vllm_version_is",)
    target = str(report.target.version or report.target.label)
    for path, render in ((html, render_html), (markdown, render_markdown)):
        if path is not None:
            write_report(path, render(report), "--html" if render is render_html else "--markdown")
    payload = {"dry_run": dry_run, "analysis": report.to_dict()}

    def plan_for(root: Path):
        return plan_drop(report.dead_guards, root, drop, target, functions)

    if dry_run:
        plan = plan_for(report.plugin_tree.root)
        payload["drop"] = plan.to_dict()
    else:
        payload["drop"], payload["port"] = _publish_drop(report, request, drop, target, functions, state.config(),
                                                         reporter.status, force=force, allow_dirty=allow_dirty,
                                                         fork_ref=fork_ref)

    def render(console) -> None:
        render_rich(report, console)
        edits = payload["drop"]["edits"]
        console.print(f"drop {drop}: {len(edits)} edit(s) in {len(payload['drop']['files'])} file(s)"
                      + (f", {len(payload['drop']['removed_files'])} orphaned module(s) deleted"
                         if payload["drop"].get("removed_files") else ""))
        for edit in edits[:60]:
            console.print(f"  {edit['path']}:{edit['line']} {edit['action']} {edit.get('guard', '')}"
                          + (f" -> {edit['retarget_to']}" if edit.get("retarget_to") else ""))
        if "port" in payload:
            console.print(payload["port"]["message"])

    reporter.emit("upgrade", payload, render)


def _publish_drop(report, request, drop: str, target: str, functions, config, status, *, force: bool,
                  allow_dirty: bool, fork_ref: Optional[str]):
    """The drop's edits on `ascend-port/<upstream>-drop-OLD` through the port pipeline's entry point
    (porter.port.edit_port.publish_edits: worktree at the committed baseline, validation, PR material)."""
    from porter.errors import InputError
    from porter.port.dispatch import _fork_of
    from porter.port.edit_port import EditCommit, EditRequest, FileEdit, publish_edits
    from porter.port.worktree import check_fork
    from porter.proc import run
    from porter.slug import slugify
    from porter.upgrade.drop_run import plan_drop, pr_summary

    fork_name, fork_path, registered, _remote = _fork_of(request.plugin, request.plugin_path, config)
    root, base_sha, _ref = check_fork(fork_path, allow_dirty=allow_dirty, fork_ref=fork_ref)
    plan = plan_drop(report.dead_guards, report.plugin_tree.root, drop, target, functions)
    prefix = _relative_to(report.plugin_tree.root, root)
    edits = []
    for result in plan.results:
        path = f"{prefix}/{result.path}" if prefix else result.path
        committed = run(["git", "-C", str(root), "show", f"{base_sha}:{path}"], timeout=60)
        current = (root / path).read_text(encoding="utf-8")
        if not committed.ok or committed.stdout != current:
            raise InputError(f"{path} differs from the committed baseline {base_sha[:12]}: the drop edits what was analysed",
                             hint="commit or stash the change first, then run the drop again")
        edits.append(FileEdit(path, result.source))
    for removed in plan.removed:  # modules nothing imports after the drop
        path = f"{prefix}/{removed}" if prefix else removed
        committed = run(["git", "-C", str(root), "show", f"{base_sha}:{path}"], timeout=60)
        if not committed.ok or committed.stdout != (root / path).read_text(encoding="utf-8"):
            raise InputError(f"{path} differs from the committed baseline {base_sha[:12]}: the drop edits what was analysed",
                             hint="commit or stash the change first, then run the drop again")
        edits.append(FileEdit(path, None))
    if not edits:
        return plan.to_dict(), {"branch": None, "branch_moved": False, "message": "no guard to drop: branch not made"}
    name = {"vllm": "vLLM"}.get(report.upstream, report.upstream)
    commit = EditCommit(
        f"Drop {name} {drop} version guards", families=("guard-cleanup",),
        rationale=tuple(f"{e.path}:{e.line} {e.action} {e.guard}" + (f" -> {e.retarget_to}" if e.retarget_to else "")
                        for e in plan.edits[:200]),
        edits=tuple(edits))
    edit_request = EditRequest(
        fork=fork_name, fork_path=root, upstream=report.upstream,
        baseline=str(report.baseline.version) if report.baseline and report.baseline.version else drop, target=target,
        commits=(commit,), title=f"[Misc] Drop {name} {drop} support", slug=slugify(report.upstream, "drop", drop),
        summary=pr_summary(plan, report.upstream), target_tree=report.target.root,
        baseline_tree=report.baseline.root if report.baseline else None, fork_ref=fork_ref, allow_dirty=allow_dirty,
        force=force, work_dir=Path(config.cache_dir) / "worktrees", runs_dir=Path(config.runs_dir),
        forks_file=Path(config.forks_file) if registered else None,
        reproducer=f"porter upgrade {request.plugin} --to {target} --drop {drop}",
        outcome_reasons=(f"{len(plan.edits)} guard edit(s) for dropping {name} {drop}",))
    return plan.to_dict(), publish_edits(edit_request, status).to_dict()


def _relative_to(path: Path, root: Path) -> str:
    try:
        rel = Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return ""
    return "" if str(rel) == "." else rel.as_posix()


def register(app: typer.Typer) -> None:
    @app.command("upgrade")
    def upgrade(
        ctx: typer.Context,
        name: str = typer.Argument(..., help="Plugin name from knowledge/upstreams.yaml (vllm-ascend, torch-npu, vime, ...)."),
        to: Optional[str] = typer.Option(None, "--to", help="Target: a release (0.13.0), tag (v0.13.0), branch (main) or commit. With --drop: default the plugin's release-tag file."),
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
        summary: bool = typer.Option(False, "--summary", help="Only the outcome, counts per family and the top findings."),
        drop: Optional[str] = typer.Option(None, "--drop", help="Drop the release lane OLD: collapse its dead version guards, retarget the ones the target still needs, remove imports only they used (branch ascend-port/<upstream>-drop-OLD)."),
        offline: bool = typer.Option(False, "--offline", help="Use only porter's cache (no network)."),
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
            from porter.upgrade.report import check_report_path, render_rich

            for option, path in (("--html", html), ("--markdown", markdown)):
                if path is not None:
                    check_report_path(path, option)

            if to is None:
                to = _drop_target(name, state.config(), plugin_path) if drop else None
            if to is None:
                raise UsageError("missing --to REF", hint="give the target: a release (0.13.0), tag, branch (main) or commit"
                                 + ("; with --drop it defaults to the plugin's release-tag file, which was not found" if drop else ""))
            request = AnalysisRequest(
                offline=True if offline else None,
                plugin=name,
                target=to,
                baseline=from_,
                plugin_path=plugin_path,
                upstream_paths=parse_upstream_paths(upstream_path),
                upstream=upstream,
                config=state.config(),
            )
            if drop is not None:
                _run_drop(request, drop, dry_run, reporter, state, force=force, allow_dirty=allow_dirty, fork_ref=fork_ref,
                          html=html, markdown=markdown)
                return
            if dry_run:
                code = dry_run_analysis(reporter, request, summary, html, markdown)
                if code:
                    exit_with(code)
                return
            from porter.port.dispatch import preflight

            preflight(name, state.config(), plugin_path=plugin_path, upstream=upstream, baseline=from_, target=to,
                      allow_dirty=allow_dirty, fork_ref=fork_ref, push=push)
            report = run_analysis(request, progress=reporter)
            write_reports(reporter, report, html, markdown)
            payload = {"dry_run": dry_run, "analysis": report.to_dict()}
            render_analysis = analysis_renderer(payload, report, summary)
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
                render_analysis(console)
                render_port(port_result, console)

            reporter.emit("upgrade", payload, render_both)
            exit_with(port_result.exit_code)
