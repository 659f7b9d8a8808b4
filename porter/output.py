"""The one place that renders output: JSON documents for machines, rich for people.

Commands build a plain dict payload (their stable schema) and a render function; `Reporter`
decides which to show. Progress and status go to stderr so `--json` stdout stays parseable.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape

from porter import __version__
from porter.errors import PorterError
from porter.redact import redact_data, redact_text

SCHEMA_VERSION = 1


def schema_id(command: str) -> str:
    return f"porter.{command}/{SCHEMA_VERSION}"


def _default(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if hasattr(obj, "__fspath__"):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def to_json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, indent=2, default=_default, ensure_ascii=False)


@dataclass
class Reporter:
    json_mode: bool = False
    quiet: bool = False
    console: Console = field(default_factory=lambda: Console(soft_wrap=False, highlight=False))
    err: Console = field(default_factory=lambda: Console(stderr=True, highlight=False))

    def emit(self, command: str, payload: dict[str, Any], render: Callable[[Console], None]) -> None:
        """Secrets are masked on the values before serialising (so the JSON stays valid) and on
        the rendered text for people (tables are built from values the command holds)."""
        if self.json_mode:
            doc = {"schema": schema_id(command), "porter_version": __version__, **payload}
            sys.stdout.write(to_json(redact_data(doc)) + "\n")
            sys.stdout.flush()
        else:
            with self.console.capture() as captured:
                render(self.console)
            self.console.file.write(redact_text(captured.get()))
            self.console.file.flush()

    def error(self, exc: PorterError, command: str = "error") -> None:
        if self.json_mode:
            doc = {"schema": schema_id(command), "porter_version": __version__, "error": exc.to_dict()}
            sys.stdout.write(to_json(redact_data(doc)) + "\n")
        else:
            self.err.print(f"[bold red]error:[/] {escape(redact_text(exc.message))}", markup=True)
            if exc.hint:
                self.err.print(f"[yellow]hint:[/] {escape(redact_text(exc.hint))}", markup=True)

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
