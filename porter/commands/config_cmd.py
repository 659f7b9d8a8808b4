"""`porter config`: show the effective configuration and where it came from."""

from __future__ import annotations

import typer

from porter.cliutil import command_context, json_option


def register(app: typer.Typer) -> None:
    @app.command("config")
    def config_show(ctx: typer.Context, json_: bool = json_option()) -> None:
        """Show the effective configuration: project root, knowledge, cache, runs, hosts, sources."""
        with command_context(ctx, "config", json_) as (reporter, state):
            from porter.hosts import host_sources

            cfg = state.config()
            sources = host_sources(cfg)
            payload = {"config": cfg.to_dict(), "host_sources": sources}

            def render(console) -> None:
                from rich.table import Table

                table = Table(title="porter configuration", show_header=False)
                for key, value in cfg.to_dict().items():
                    table.add_row(key, ", ".join(value) if isinstance(value, list) else str(value))
                console.print(table)
                hosts = Table(title="host profiles, later sources override earlier ones by name")
                for column in ("source", "file", "hosts"):
                    hosts.add_column(column, no_wrap=column != "hosts", overflow="ignore" if column == "file" else "ellipsis")
                for src in sources:
                    where = src["path"] or ("(built in)" if src["kind"] == "bundled" else "(none)")
                    if src["path"] and not src["exists"]:
                        where += " (absent)"
                    hosts.add_row(src["kind"], where, src.get("error") or ", ".join(src["hosts"]) or "-")
                from porter.output import print_whole

                print_whole(console, hosts)

            reporter.emit("config", payload, render)
