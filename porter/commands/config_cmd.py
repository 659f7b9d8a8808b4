"""`porter config`: show the effective configuration and where it came from."""

from __future__ import annotations

import typer

from porter.cliutil import command_context, json_option


def register(app: typer.Typer) -> None:
    @app.command("config")
    def config_show(ctx: typer.Context, json_: bool = json_option()) -> None:
        """Show the effective configuration: project root, knowledge, cache, runs, hosts, sources."""
        with command_context(ctx, "config", json_) as (reporter, state):
            cfg = state.config()
            payload = {"config": cfg.to_dict()}

            def render(console) -> None:
                from rich.table import Table

                table = Table(title="porter configuration", show_header=False)
                for key, value in cfg.to_dict().items():
                    table.add_row(key, ", ".join(value) if isinstance(value, list) else str(value))
                console.print(table)

            reporter.emit("config", payload, render)
