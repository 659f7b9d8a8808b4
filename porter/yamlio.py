"""The one YAML loader: safe loading, errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

from porter.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any

# pyyaml is imported inside the functions: most CLI invocations never read YAML (the KB is
# served from its compiled cache), and the import costs ~20 ms of cold start.


# YAML aliases let a few lines stand for gigabytes ("billion laughs"); configuration and KB files
# need few or none, so more than this many is refused before anything is built.
MAX_ALIASES = 50


def _check_alias_budget(yaml: Any, text: str, loader: Any, source: str) -> None:
    if "*" not in text:
        return  # no alias can occur without its '*'
    aliases = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise InputError(f"{source}: more than {MAX_ALIASES} YAML aliases (*name): refused, "
                                 "an alias tree can expand to gigabytes",
                                 hint="write the values out instead of repeating anchors")


def load_yaml_text(text: str, source: str = "<text>") -> Any:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        _check_alias_budget(yaml, text, loader, source)
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(
            f"{source}: invalid YAML{where}: {problem}",
            hint="fix the YAML syntax in that file (indentation, quoting, colons)",
        ) from exc


def load_yaml_file(path: Path) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise InputError(f"{path}: no such file", hint="check the path") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}", hint="check permissions and encoding (UTF-8)") from exc
    return load_yaml_text(text, str(path))


def dump_yaml(data: Any) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)


def write_yaml_atomic(path: Path, data: Any, header: str = "") -> None:
    """Write YAML through a temporary file and rename, so readers never see half a file."""
    from porter.fsutil import atomic_write_text

    atomic_write_text(Path(path), header + dump_yaml(data))
