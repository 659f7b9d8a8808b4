"""The porter command line: global options and command registration. Commands live in
`porter/commands/`; the work lives in the domain packages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from enum import Enum

import typer
from typer.core import TyperGroup

from porter import __version__
from porter.cliargs import hoist_global_options
from porter.cliutil import app_state
from porter.commands import register_all
from porter.errors import ExitCode, Interrupted, PorterError, UsageError
from porter.output import Reporter

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 findings, failed checks or unknown diagnosis; 2 usage or input error; "
    "3 environment or host error; 4 internal error (a porter bug); 130 interrupted.\n\n"
    "--json, --format, -q and -v may also follow the command (porter smoke --host a3 -q --format junit)."
)

class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    junit = "junit"
    github = "github"


class PorterGroup(TyperGroup):
    """The root group: global options may follow the subcommand (porter.cliargs), and every
    command lists `--format` in its own help (a copy of the global option that sets the same state)."""

    def __init__(self, *args, **kwargs):  # noqa: ANN002, ANN003 - click's signature
        super().__init__(*args, **kwargs)
        root_format = next((p for p in self.params if "--format" in getattr(p, "opts", ())), None)
        if root_format is not None:
            _add_format_option(self, root_format)

    def parse_args(self, ctx, args):  # noqa: ANN001 - click's signature
        return super().parse_args(ctx, hoist_global_options(self, list(args)))


def _set_format(ctx, param, value):  # noqa: ANN001, ARG001 - a click option callback
    if value is not None:
        app_state(ctx).format = getattr(value, "value", str(value)).lower()
    return value


def _add_format_option(group, root_format) -> None:
    import copy

    for command in (getattr(group, "commands", None) or {}).values():
        if getattr(command, "commands", None):
            _add_format_option(command, root_format)
        elif not any("--format" in getattr(p, "opts", ()) for p in command.params):
            option = copy.copy(root_format)
            option.default, option.expose_value, option.callback = None, False, _set_format
            option.help = "text, json (same as --json), sarif, junit or github; see `porter --help`."
            command.params.append(option)


app = typer.Typer(
    name="porter",
    cls=PorterGroup,
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
    json_: bool = typer.Option(False, "--json", help="JSON output for every command (same as --format json)."),
    format_: OutputFormat = typer.Option(
        OutputFormat.text, "--format", case_sensitive=False,
        help="text (tables), json, sarif (upgrade findings), junit (smoke checks), github (Actions annotations "
             "for upgrade and smoke)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress or status lines on stderr."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every command porter runs (git, pip, ssh, ...) on stderr."),
    config: Optional[Path] = typer.Option(None, "--config", help="Use this porter.yaml instead of searching upward."),
    trust_project: bool = typer.Option(
        False, "--trust-project",
        help="Run the setup lines of hosts defined in the project's porter.yaml (and let it replace `local`); "
             "remembered for that file's current content."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    state = app_state(ctx)
    state.json_mode = json_
    state.format = format_.value
    state.verbose = verbose
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


def _wants_json(argv: list[str]) -> bool:
    if "--json" in argv or "--format=json" in argv:
        return True
    return any(a == "--format" and b.lower() == "json" for a, b in zip(argv, argv[1:]))


def main() -> None:
    argv = sys.argv[1:]
    json_mode = _wants_json(argv)
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
        from porter.cliutil import internal_error

        sys.exit(internal_error())


if __name__ == "__main__":
    main()
