"""`porter status [NAME]`: for each plugin's upstream, the baseline, the newest release, the head of
the default branch, how far apart they are, and whether the plugin already adapted."""

from __future__ import annotations

from typing import Optional

import typer

from porter.cliutil import command_context, json_option


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        ctx: typer.Context,
        name: Optional[str] = typer.Argument(None, help="A plugin (vllm-ascend, torch-npu, ...); default: every plugin."),
        all_upstreams: bool = typer.Option(False, "--all-upstreams", help="Every upstream of the plugin, not only its primary one."),
        offline: bool = typer.Option(False, "--offline", help="Use only porter's cache (no network)."),
        json_: bool = json_option(),
    ) -> None:
        """Where each upstream stands relative to the plugin's baseline. Works offline from the cache."""
        with command_context(ctx, "status", json_) as (reporter, state):
            from porter.upgrade.status import collect_status, render_status

            config = state.config()
            with reporter.progress("checking upstreams", None):
                result = collect_status(config, name, all_upstreams=all_upstreams, offline=True if offline else None)
            reporter.emit("status", result.to_dict(), lambda console: render_status(result, console))
