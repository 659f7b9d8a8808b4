"""The porter command line: global options and command registration. Commands live in
`porter/commands/`; the work lives in the domain packages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from porter import __version__
from porter.cliutil import app_state
from porter.commands import register_all
from porter.errors import ExitCode, Interrupted, PorterError, UsageError
from porter.output import Reporter

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 findings, failed checks or unknown diagnosis; 2 usage or input error; "
    "3 environment or host error; 4 internal error (a porter bug); 130 interrupted."
)

app = typer.Typer(
    name="porter",
    help="Keep AI software running on Huawei Ascend NPUs while its upstreams move.\n\n" + EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"porter {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    json_: bool = typer.Option(False, "--json", help="JSON output for every command (same as the per-command flag)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress or status lines on stderr."),
    config: Optional[Path] = typer.Option(None, "--config", help="Use this porter.yaml instead of searching upward."),
    trust_project: bool = typer.Option(
        False, "--trust-project",
        help="Run the setup lines of hosts defined in the project's porter.yaml (and let it replace `local`); "
             "remembered for that file's current content."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    state = app_state(ctx)
    state.json_mode = json_
    state.quiet = quiet
    state.config_path = config
    state.trust_project = trust_project


register_all(app)


def _is_click_error(exc: BaseException, name: str) -> bool:
    """typer vendors click in newer releases and uses click itself in older ones: match by class name."""
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def _command_name(argv: list[str]) -> str:
    """The dotted command path in argv (`kb.search`), for the schema of a JSON error."""
    import typer.main

    command = typer.main.get_command(app)
    parts: list[str] = []
    for token in argv:
        sub = getattr(command, "commands", {}).get(token) if not token.startswith("-") else None
        if sub is not None:
            parts.append(token)
            command = sub
    return ".".join(parts) or "error"


def main() -> None:
    argv = sys.argv[1:]
    json_mode = "--json" in argv
    try:
        if not json_mode:
            app()  # standalone: typer renders usage errors for people
            return
        # With --json even a parse-time usage error must come out as one JSON document.
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except PorterError as exc:  # raised outside a command context (e.g. while loading config)
        Reporter(json_mode=json_mode).error(exc, _command_name(argv))
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        exc = Interrupted("interrupted: nothing was left half-written")
        Reporter(json_mode=json_mode).error(exc, _command_name(argv))
        sys.exit(int(exc.exit_code))
    except Exception as exc:  # noqa: BLE001
        if _is_click_error(exc, "UsageError"):
            name = _command_name(argv)
            path = "porter" if name == "error" else "porter " + name.replace(".", " ")
            Reporter(json_mode=True).error(UsageError(exc.format_message(), hint=f"see `{path} --help`"), name)
            sys.exit(int(ExitCode.USAGE))
        if _is_click_error(exc, "Abort"):
            exc = Interrupted("interrupted: nothing was left half-written")
            Reporter(json_mode=True).error(exc, _command_name(argv))
            sys.exit(int(exc.exit_code))
        import traceback

        traceback.print_exc()
        sys.stderr.write("porter: internal error (exit 4); please report it with the traceback above\n")
        sys.exit(int(ExitCode.INTERNAL))


if __name__ == "__main__":
    main()
