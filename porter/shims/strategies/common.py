"""What every shim strategy shares: the planning context, where files go, how the plugin imported
a name, and the stub layouts the generated tests install."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from porter.shims.convention import Convention
from porter.shims.lookup import UpstreamTree
from porter.shims.model import ImportMove, NewFile
from porter.shims.render import render_python
from porter.upgrade.models import DriftRecord


@dataclass(frozen=True)
class ShimContext:
    plugin_root: Path  # the fork tree the plan is for (a worktree at the baseline)
    convention: Convention
    upstream: str  # e.g. vllm
    baseline: str
    target: str
    old_tree: UpstreamTree
    new_tree: UpstreamTree
    run_id: str = "dry-run"
    existing: frozenset[str] = field(default_factory=frozenset)  # fork paths already taken

    def template_vars(self) -> dict[str, Any]:
        return {
            "upstream": self.upstream,
            "baseline": self.baseline,
            "target": self.target,
            "run_id": self.run_id,
            "convention": self.convention,
        }


def leaf(module: str) -> str:
    return module.rsplit(".", 1)[-1].lstrip("_") or "root"


def test_file_name(kind: str, plugin_path: str, ctx: ShimContext, taken: set[str]) -> str:
    """`<test_dir>/test_<kind>_<stem>.py`, numbered when another group already took it."""
    stem = Path(plugin_path).stem
    path = f"{ctx.convention.test_dir}/test_{kind}_{stem}.py"
    counter = 2
    while path in taken:
        path = f"{ctx.convention.test_dir}/test_{kind}_{stem}_{counter}.py"
        counter += 1
    taken.add(path)
    return path


def module_file_name(module: str, suffix: str, ctx: ShimContext, taken: set[str]) -> str:
    parts = module.split(".")
    stem = leaf(module) + suffix
    path = f"{ctx.convention.compat_dir}/{stem}.py"
    index = len(parts) - 2
    while path in taken and index > 0:  # a.utils and b.utils: prefix the parent
        stem = f"{parts[index].lstrip('_')}_{stem}"
        path = f"{ctx.convention.compat_dir}/{stem}.py"
        index -= 1
    counter = 2
    base = stem
    while path in taken:
        stem = f"{base}_{counter}"
        path = f"{ctx.convention.compat_dir}/{stem}.py"
        counter += 1
    taken.add(path)
    return path


def test_path_for(shim_path: str, ctx: ShimContext) -> tuple[str, int]:
    stem = Path(shim_path).stem
    test_path = f"{ctx.convention.test_dir}/test_{stem}.py"
    return test_path, len(Path(test_path).parts) - 1


def import_path(record: DriftRecord) -> tuple[str, str]:
    """(module, name) as the plugin imported it at the baseline: the path that worked then.

    `symbol` is the dotted name the plugin uses; its module part is the longest prefix that is a
    module at the baseline (the definition may live deeper, behind a re-export)."""
    old = record.old_location
    symbol = record.symbol
    if old.qualname and symbol == old.dotted:
        return old.module, old.qualname
    module, _, name = symbol.rpartition(".")
    if old.qualname and "." in old.qualname and symbol.endswith("." + old.qualname):
        return symbol[: -len(old.qualname) - 1], old.qualname
    return (module, name) if module else (old.module, old.qualname)


def is_member(record: DriftRecord, ctx: ShimContext) -> bool:
    """A class attribute or method (`module.Class.name`), not a module-level name an import can bring."""
    module, name = import_path(record)
    if "." in name:
        return True
    if ctx.old_tree.root is None:
        return False
    return not ctx.old_tree.has_module(module) and ctx.old_tree.exists(module)


def imported_somewhere(record: DriftRecord) -> bool:
    """Does any site import the name (the only kind of use the shims rewrite)? Unknown code counts."""
    codes = [s.code.strip() for s in record.sites]
    return not codes or any(not c or c.startswith(("from ", "import ")) or " import " in c for c in codes)


def local_name(record: DriftRecord) -> str:
    """The name the plugin imports."""
    return import_path(record)[1].split(".")[-1]


def import_moves(records: list[DriftRecord], shim_module: str, ctx: ShimContext) -> tuple[ImportMove, ...]:
    moves = []
    for record in records:
        module, name = import_path(record)
        for path in sorted({s.path for s in record.sites}):
            if path.endswith(".py") and (ctx.plugin_root / path).is_file():
                moves.append(ImportMove(path, module, name, shim_module))
    return tuple(dict.fromkeys(moves))


def stub_class(name: str, layout: str, base: str | None = None) -> str:
    parent = f"({base})" if base else ""
    return f"class {name}{parent}:\n    porter_layout = {layout!r}\n"


def add_source(layout: dict[str, str], module: str, text: str) -> None:
    layout[module] = layout.get(module, "") + text


def tops(layouts: dict[str, dict[str, str]]) -> list[str]:
    return sorted({m.split(".")[0] for modules in layouts.values() for m in modules})


def render_pair(ctx: ShimContext, shim_template: str, shim_path: str, shim_vars: dict[str, Any],
                 test_vars: dict[str, Any]) -> tuple[NewFile, NewFile]:
    test_path, depth = test_path_for(shim_path, ctx)
    shim = render_python(shim_template, **ctx.template_vars(), **shim_vars)
    test = render_python(
        "test_shim.py.j2", **ctx.template_vars(), shim_path=shim_path, test_path=test_path, depth=depth, **test_vars
    )
    return NewFile(shim_path, shim, "shim"), NewFile(test_path, test, "test")


def count(records: list, noun: str) -> str:
    return f"{len(records)} {noun}{'s' if len(records) != 1 else ''}"


def sites_text(record: DriftRecord) -> str:
    return ", ".join(f"{s.path}:{s.line}" for s in record.sites[:3]) + (" ..." if len(record.sites) > 3 else "")


def literal(text: str | None) -> bool:
    if text is None:
        return False
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def class_at(root: Path, path: str, line: int | None) -> str | None:
    try:
        tree = ast.parse((root / path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    if line is not None:
        containing = [n for n in classes if n.lineno <= line <= (n.end_lineno or n.lineno)]
        if containing:
            return max(containing, key=lambda n: n.lineno).name  # the innermost class
    return classes[0].name if len(classes) == 1 else None


def signature_text(params) -> str:
    out, star = [], False
    for p in params:
        # Upstream defaults may name things the plugin does not import: keep literals only.
        default = (f"={p.default}" if literal(p.default) else "=None") if p.has_default else ""
        if p.kind == "var_positional":
            out.append(f"*{p.name}")
            star = True
        elif p.kind == "var_keyword":
            out.append(f"**{p.name}")
        elif p.kind == "keyword_only":
            if not star:
                out.append("*")
                star = True
            out.append(f"{p.name}{default}")
        else:
            out.append(f"{p.name}{default}")
    text = ", ".join(out)
    try:
        ast.parse(f"def f({text}): pass")
    except SyntaxError:
        return ""
    return text
