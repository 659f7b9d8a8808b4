"""Shared plumbing for command modules: the global state, the `--json` option, and the
context that turns PorterErrors into a rendered message and a documented exit code."""

from __future__ import annotations

import errno

from contextlib import contextmanager
from pathlib import Path

from porter.config import PorterConfig, load_config
from porter.errors import EnvironmentProblem, ExitCode, Interrupted, PorterError, UsageError
from porter.output import Reporter
from porter.record import field, record

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Iterator
    import typer

# typer is imported inside the functions that need it: `porter diagnose`'s fast path
# (porter.fastcli) shares this module without paying for the typer app.
JSON_HELP = "Print one JSON document with a stable, versioned schema instead of tables."


def json_option() -> bool:
    import typer

    return typer.Option(False, "--json", help=JSON_HELP)


@record
class AppState:
    json_mode: bool = False
    quiet: bool = False
    format: str = "text"  # --format; --json is its alias
    verbose: bool = False  # -v: every subprocess porter runs, on stderr
    config_path: Path | None = None
    trust_project: bool = False
    _config: PorterConfig | None = field(default=None, repr=False)

    def config(self) -> PorterConfig:
        if self._config is None:
            from porter.record import replace

            self._config = replace(load_config(explicit=self.config_path), trust_project=self.trust_project)
        return self._config


def app_state(ctx: typer.Context) -> AppState:
    root = ctx.find_root()
    if not isinstance(root.obj, AppState):
        root.obj = AppState()
    return root.obj


class CommandExit(Exception):
    """The exit code of a command whose error `reported` has already rendered."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextmanager
def reported(reporter: Reporter, command: str) -> Iterator[None]:
    """A PorterError (or a storage OSError, or Ctrl-C) inside is rendered, then CommandExit(code)."""
    try:
        yield
    except PorterError as exc:
        reporter.error(exc, command)
        raise CommandExit(int(exc.exit_code)) from None
    except OSError as exc:
        problem = storage_problem(exc)
        if problem is None:
            raise
        reporter.error(problem, command)
        raise CommandExit(int(problem.exit_code)) from None
    except KeyboardInterrupt:
        exc = Interrupted("interrupted: nothing was left half-written")
        if reporter.json_mode:
            reporter.error(exc, command)
        else:
            reporter.err.print(f"[red]{exc.message}[/]")
        raise CommandExit(int(exc.exit_code)) from None


@contextmanager
def command_context(ctx: typer.Context, command: str, json_flag: bool = False) -> Iterator[tuple[Reporter, AppState]]:
    """Yields (reporter, state); a PorterError inside becomes an error report and its exit code."""
    import typer

    from porter.formats import MACHINE_FORMATS, is_supported, unsupported_message
    from porter.proc import tracing

    state = app_state(ctx)
    fmt = state.format
    if json_flag or state.json_mode:
        fmt = "json" if fmt in ("text", "json") else fmt
    reporter = Reporter(format="json" if (json_flag or state.json_mode) and fmt == "json" else fmt, quiet=state.quiet)
    try:
        with reported(reporter, command):
            if (json_flag or state.json_mode) and fmt in MACHINE_FORMATS:
                raise UsageError(f"--json and --format {fmt} ask for two different outputs", hint="pass one of them")
            if not is_supported(command, fmt):
                raise UsageError(*unsupported_message(command, fmt))
            with tracing(reporter.trace if state.verbose else None):
                yield reporter, state
    except CommandExit as exc:
        raise typer.Exit(exc.code) from None


# A full disk, a read-only or foreign-owned cache or runs directory: the machine's state, not a bug.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.EIO}


def storage_problem(exc: OSError) -> EnvironmentProblem | None:
    """An OSError from writing porter's own files, as an exit-3 problem naming the path."""
    if exc.errno not in _STORAGE_ERRNOS:
        return None
    where = exc.filename or "a file porter writes"
    return EnvironmentProblem(
        f"cannot write {where}: {exc.strerror or exc}",
        hint="free disk space or make that directory writable (cache: PORTER_CACHE_DIR or `cache_dir`; "
             "runs: `runs_dir` in porter.yaml), then run again",
        details={"failure": "storage", "path": str(where), "errno": errno.errorcode.get(exc.errno or 0, "")},
    )


def exit_with(code: ExitCode | int) -> None:
    import typer

    raise typer.Exit(int(code))


def internal_error() -> int:
    """Print the traceback of the exception being handled as a porter bug; its exit code."""
    import sys
    import traceback

    traceback.print_exc()
    sys.stderr.write("porter: internal error (exit 4); please report it with the traceback above\n")
    return int(ExitCode.INTERNAL)
