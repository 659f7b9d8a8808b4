"""Machine formats for CI systems, built from a command's JSON payload (its stable schema):
SARIF 2.1.0 and GitHub annotations for `porter upgrade`, JUnit XML and GitHub annotations for
`porter smoke`. Each converter is a pure function `payload dict -> text`.

`--format text|json` work for every command; the CI formats only where they mean something.
"""

from __future__ import annotations

from typing import Any, Callable

FORMATS = ("text", "json", "sarif", "junit", "github")
MACHINE_FORMATS = ("sarif", "junit", "github")

# (command, format) -> converter; commands are the schema names Reporter.emit receives.
_CONVERTERS: dict[tuple[str, str], str] = {
    ("upgrade", "sarif"): "porter.formats.sarif:upgrade_sarif_text",
    ("upgrade", "github"): "porter.formats.github:upgrade_annotations",
    ("smoke", "junit"): "porter.formats.junit:smoke_junit",
    ("smoke", "github"): "porter.formats.github:smoke_annotations",
}


def supported_commands(fmt: str) -> list[str]:
    return sorted({command for command, f in _CONVERTERS if f == fmt})


def is_supported(command: str, fmt: str) -> bool:
    return fmt in ("text", "json") or (command, fmt) in _CONVERTERS


def converter(command: str, fmt: str) -> Callable[[dict[str, Any]], str] | None:
    import importlib

    target = _CONVERTERS.get((command, fmt))
    if target is None:
        return None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def unsupported_message(command: str, fmt: str) -> tuple[str, str]:
    """(message, hint) for a CI format asked of a command it means nothing for."""
    shown = "porter " + command.replace(".", " ")
    where = ", ".join(f"porter {c}" for c in supported_commands(fmt))
    return (f"--format {fmt} has no meaning for `{shown}` (it is for {where})",
            f"use --format json (or --json) for a machine-readable `{shown}`")
