"""Rendering of shim modules, generated tests and PR material from jinja2 templates.

Templates live in porter/shims/templates (shims, generated tests) and porter/port/templates (PR
material); a directory named by PORTER_SHIM_TEMPLATES overrides
individual files (a maintainer's house style). Undefined variables are errors, and every
template problem becomes an InputError naming the template and line, never a half-rendered file.
"""

from __future__ import annotations

import ast
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from porter.errors import InputError

BUILTIN_TEMPLATES = Path(__file__).resolve().parent / "templates"
BUILTIN_DIRS = (BUILTIN_TEMPLATES, Path(__file__).resolve().parents[1] / "port" / "templates")


@lru_cache(maxsize=4)
def _environment(override: str | None):
    import jinja2

    if override:
        _check_override(Path(override))
    paths = ([override] if override else []) + [str(d) for d in BUILTIN_DIRS]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(paths),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["pyrepr"] = repr
    env.filters["ident"] = lambda text: "".join(c if c.isalnum() else "_" for c in str(text))
    return env


def _check_override(directory: Path) -> None:
    """A mistyped override directory or file name would silently fall back to the built-in template."""
    if not directory.is_dir():
        raise InputError(f"PORTER_SHIM_TEMPLATES={directory} is not a directory",
                         hint="point it at a directory of templates named like the built-in ones, or unset it")
    builtin = {p.name for d in BUILTIN_DIRS for p in d.glob("*.j2")}
    unknown = sorted(p.name for p in directory.glob("*.j2") if p.name not in builtin)
    if unknown:
        raise InputError(f"PORTER_SHIM_TEMPLATES: {', '.join(unknown)} override(s) no built-in template",
                         hint=f"name them like the built-in templates: {', '.join(sorted(builtin))}")


def render(template: str, **context: Any) -> str:
    import jinja2

    env = _environment(os.environ.get("PORTER_SHIM_TEMPLATES") or None)
    try:
        return env.get_template(template).render(**context)
    except jinja2.TemplateSyntaxError as exc:
        raise InputError(
            f"shim template {exc.filename or template}:{exc.lineno}: {exc.message}",
            hint="fix the template syntax (or unset PORTER_SHIM_TEMPLATES to use the built-in templates)",
        ) from exc
    except jinja2.TemplateNotFound as exc:
        raise InputError(f"shim template {template!r} not found", hint="check PORTER_SHIM_TEMPLATES") from exc
    except jinja2.UndefinedError as exc:
        raise InputError(
            f"shim template {template}: {exc.message}",
            hint="the template uses a variable porter does not provide; check PORTER_SHIM_TEMPLATES",
        ) from exc


def render_python(template: str, **context: Any) -> str:
    """Render and prove the result parses, so a broken template never reaches a commit."""
    text = render(template, **context)
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise InputError(
            f"shim template {template} produced invalid Python at line {exc.lineno}: {exc.msg}",
            hint="fix the template; nothing was written",
        ) from exc
    return text
