"""The one place that renders output: JSON documents for machines, rich for people.

Commands build a plain dict payload (their stable schema) and a render function; `Reporter`
decides which to show. Progress and status go to stderr so `--json` stdout stays parseable.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from porter import __version__
from porter.errors import PorterError
from porter.jsonable import plain
from porter.record import field, record
from porter.redact import redact_data, redact_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator
    from rich.console import Console

SCHEMA_VERSION = 1


def schema_id(command: str) -> str:
    return f"porter.{command}/{SCHEMA_VERSION}"


def to_json(payload: dict[str, Any]) -> str:
    import json  # here: a text-mode diagnose never needs it (its module compiles regexes on import)

    return json.dumps(payload, indent=2, default=plain, ensure_ascii=False)


WIDE_TABLE_LIMIT = 240


def print_whole(console: Console, renderable: Any) -> None:
    """Print a table without cutting its no-wrap cells (identifiers, symbol paths, commands):
    wider than the console when it must be, so a piped line is long instead of folded or
    ellipsised, and every name can be copied."""
    from rich.measure import Measurement

    expand = getattr(renderable, "expand", None)
    if expand:
        renderable.expand = False  # an expanding table measures as the whole console width
    try:
        measured = Measurement.get(console, console.options.update(max_width=10_000), renderable)
        # the natural width when it is reasonable (no cell wraps), else the least that cuts nothing
        needed = measured.maximum if measured.maximum <= WIDE_TABLE_LIMIT else measured.minimum + 2
    finally:
        if expand:
            renderable.expand = expand
    if needed <= console.width:
        console.print(renderable)
        return
    saved = console._width  # print(width=) is capped at the console's width: widen it for this table
    console.width = needed
    try:
        console.print(renderable)
    finally:
        console._width = saved


@record
class Reporter:
    json_mode: bool = False
    quiet: bool = False
    format: str = "text"  # text | json | sarif | junit | github (porter.formats)
    # rich consoles are made on first use: a --json run never imports rich (~50 ms per process)
    _console: Any = field(default=None, repr=False)
    _err: Any = field(default=None, repr=False)

    @property
    def console(self) -> "Console":
        if self._console is None:
            from rich.console import Console

            self._console = Console(soft_wrap=False, highlight=False)
        return self._console

    @property
    def err(self) -> "Console":
        if self._err is None:
            from rich.console import Console

            self._err = Console(stderr=True, highlight=False)
        return self._err

    def __post_init__(self) -> None:
        if self.json_mode and self.format == "text":
            self.format = "json"
        self.json_mode = self.format == "json"

    def emit(self, command: str, payload: dict[str, Any], render: Callable[[Console], None],
             plain: Callable[[int], str | None] | None = None) -> None:
        """Secrets are masked on the values before serialising (so the JSON stays valid) and on
        the rendered text for people (tables are built from values the command holds).
        The CI formats (SARIF, JUnit, GitHub annotations) are built from the same redacted document.
        `plain(width)`: the same text as `render` gives on a non-terminal console of that width,
        without rich (porter.plain), or None; used when stdout is not a terminal."""
        machine = False
        if self.format not in ("text", "json"):  # porter.formats (and typing) only for the other formats
            from porter.formats import MACHINE_FORMATS

            machine = self.format in MACHINE_FORMATS
        if machine:
            from porter.errors import UsageError
            from porter.formats import converter, unsupported_message

            convert = converter(command, self.format)
            if convert is None:
                raise UsageError(*unsupported_message(command, self.format))
            import json

            doc = {"schema": schema_id(command), "porter_version": __version__, **payload}
            sys.stdout.write(convert(json.loads(to_json(redact_data(doc)))))
            sys.stdout.flush()
        elif self.json_mode:
            doc = {"schema": schema_id(command), "porter_version": __version__, **payload}
            sys.stdout.write(to_json(redact_data(doc)) + "\n")
            sys.stdout.flush()
        else:
            if plain is not None and self._console is None:
                from porter.plain import plain_width

                width = plain_width()
                text = plain(width) if width is not None else None
                if text is not None:
                    sys.stdout.write(redact_text(text))
                    sys.stdout.flush()
                    return
            with self.console.capture() as captured:
                render(self.console)
            self.console.file.write(redact_text(captured.get()))
            self.console.file.flush()

    def error(self, exc: PorterError, command: str = "error") -> None:
        if self.json_mode:
            doc = {"schema": schema_id(command), "porter_version": __version__, "error": exc.to_dict()}
            sys.stdout.write(to_json(redact_data(doc)) + "\n")
        else:
            if self.format == "github":  # the workflow shows it on the run's summary
                from porter.formats.github import command as annotation

                sys.stdout.write(annotation("error", redact_text(exc.message + (f" (hint: {exc.hint})" if exc.hint else "")),
                                            title=f"porter {command.replace('.', ' ')}") + "\n")
                sys.stdout.flush()
            # soft_wrap: a path or command in the message stays one piece (the terminal wraps it, we never fold it)
            from rich.markup import escape

            self.err.print(f"[bold red]error:[/] {escape(redact_text(exc.message))}", markup=True, soft_wrap=True)
            if exc.hint:
                self.err.print(f"[yellow]hint:[/] {escape(redact_text(exc.hint))}", markup=True, soft_wrap=True)

    def trace(self, argv: Any, cwd: Any = None) -> None:
        """`-v`: one line per subprocess, secrets masked, whole (never wrapped) on stderr."""
        import shlex

        from porter.redact import sanitize_terminal

        line = "porter: $ " + shlex.join(str(a) for a in argv) + (f"   (in {cwd})" if cwd else "")
        self.err.print(sanitize_terminal(redact_text(line)), markup=False, highlight=False, soft_wrap=True)

    def status(self, message: str) -> None:
        if not self.quiet and not self.json_mode:
            self.err.print(f"[dim]{message}[/]")

    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        """Yields `advance(n)`. Silent in JSON mode and when stderr is not a terminal."""
        if self.json_mode or self.quiet or not self.err.is_terminal:
            yield lambda n=1: None
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
        ) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n=1: bar.advance(task, n)
