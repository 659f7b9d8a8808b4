"""Global options anywhere on the line: `porter upgrade x --to y -q --format sarif` means the
same as `porter -q --format sarif upgrade x --to y`. The root command group moves them in
front of the first subcommand before parsing; a command that defines the same option itself
(the per-command `--json`) keeps it."""

from __future__ import annotations

from typing import Any

# option name -> takes a value
GLOBAL_OPTIONS = {"-q": False, "--quiet": False, "-v": False, "--verbose": False, "--json": False,
                  "--format": True}


def _find_option(command: Any, name: str) -> Any | None:
    for param in getattr(command, "params", ()):
        if name in (*getattr(param, "opts", ()), *getattr(param, "secondary_opts", ())):
            return param
    return None


def _takes_value(param: Any) -> bool:
    if param is None or getattr(param, "is_flag", False) or getattr(param, "count", False):
        return False
    return getattr(param, "nargs", 1) != 0


def hoist_global_options(root: Any, args: list[str]) -> list[str]:
    """`args` with the global options that follow a subcommand moved to the front. Values of a
    command's own options (`--to -v` is a value) and everything after `--` stay where they are."""
    front: list[str] = []
    rest: list[str] = []
    command = root
    below_root = False
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            rest.extend(args[i:])
            break
        name = token.split("=", 1)[0]
        if below_root and name in GLOBAL_OPTIONS and _find_option(command, name) is None \
                and _find_option(root, name) is not None:
            width = 2 if GLOBAL_OPTIONS[name] and "=" not in token else 1
            front.extend(args[i:i + width])
            i += width
            continue
        if token.startswith("-") and token != "-":
            rest.append(token)
            if "=" not in token and _takes_value(_find_option(command, name)) and i + 1 < len(args):
                rest.append(args[i + 1])
                i += 2
                continue
            i += 1
            continue
        sub = (getattr(command, "commands", None) or {}).get(token)
        if sub is not None:
            command = sub
            below_root = True
        rest.append(token)
        i += 1
    return front + rest
