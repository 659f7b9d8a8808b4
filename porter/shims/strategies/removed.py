"""F1 removed: the original at the baseline; at the target a local rebuild (subclass of surviving bases,
literal constant) or a TODO stub that raises, for a human."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from porter.shims.model import ShimGroup, Unhandled
from porter.shims.strategies.common import (
    ShimContext, add_source, count, import_moves, import_path, literal, module_file_name,
    render_pair, stub_class, tops,
)
from porter.upgrade.models import DriftFamily, DriftRecord


def _surviving_base(base: str, ctx: ShimContext) -> str | None:
    """Where a base class of the removed class lives at the target (same path, or same name moved)."""
    if "." not in base:
        return None  # builtins: object/Exception carry no behaviour worth rebuilding on
    if ctx.new_tree.exists(base):
        return base
    return None


def plan_removed(module: str, records: list[DriftRecord], ctx: ShimContext, taken: set[str]) -> ShimGroup:
    shim_path = module_file_name(module, "_fallbacks", ctx, taken)
    shim_module = ctx.convention.module_of(shim_path)
    entries, rationale, todo, checks = [], [], [], {}
    layouts: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    for record in records:
        imp_module, name = import_path(record)
        attr = name
        old_def = ctx.old_tree.find(imp_module, attr)
        original = f"{imp_module}.{attr}"
        entry: dict[str, Any] = {"name": name, "module": imp_module, "attr": attr, "bases": [],
                                 "attributes": [], "value": None, "kind": "function", "old_source": ""}
        bases = [b for b in (old_def.bases if old_def else ()) if b not in ("object",)]
        surviving = [_surviving_base(b, ctx) for b in bases]
        if old_def and old_def.kind == "class" and bases and all(surviving) and old_def.trivial_body:
            entry["mode"] = "subclass"
            entry["bases"] = [tuple(b.rsplit(".", 1)) for b in surviving]  # type: ignore[union-attr]
            entry["attributes"] = _literal_class_attributes(old_def.source)
            entry["summary"] = f"rebuilt as a subclass of {', '.join(f'`{b}`' for b in surviving)}"
            checks[name] = ("subclass", original, list(surviving))
            for base in surviving:
                base_mod, _, base_name = base.rpartition(".")  # type: ignore[union-attr]
                for layout in ("baseline", "target"):
                    if f"class {base_name}" not in layouts[layout].get(base_mod, ""):
                        add_source(layouts[layout], base_mod, stub_class(base_name, layout))
            base_imports = "".join(f"from {b.rpartition('.')[0]} import {b.rpartition('.')[2]}\n" for b in surviving)
            base_names = ", ".join(b.rpartition(".")[2] for b in surviving)
            add_source(layouts["baseline"], imp_module, base_imports + stub_class(attr, "baseline", base_names))
            rationale.append(
                f"`{original}` was removed in {ctx.upstream} {ctx.target}; its body was trivial and its "
                f"bases survive, so `{shim_path}` rebuilds it as a subclass of {', '.join(surviving)} "
                "(isinstance checks keep working)."
            )
        elif old_def and old_def.kind == "assignment" and literal(old_def.value):
            entry["mode"] = "constant"
            entry["value"] = old_def.value
            entry["summary"] = f"rebuilt from the {ctx.baseline} value `{old_def.value}`"
            checks[name] = ("constant", original, ast.literal_eval(old_def.value))
            add_source(layouts["baseline"], imp_module, f"{attr} = {old_def.value}\n")
            rationale.append(
                f"`{original}` (a constant) was removed in {ctx.upstream} {ctx.target}; `{shim_path}` "
                f"keeps the {ctx.baseline} value."
            )
        elif old_def and old_def.kind == "function" and not old_def.decorated and (needed := free_imports(
                old_def.source, attr, module_imports_of(ctx.old_tree, imp_module, imp_module.split(".")[0]))) is not None:
            entry["mode"] = "function"
            entry["old_source"] = _with_imports(_renamed(old_def.source, attr, f"_rebuilt_{attr}"), needed)
            entry["link"] = source_link(ctx.old_tree, imp_module, attr, ctx.baseline)
            entry["summary"] = f"rebuilt from its {ctx.baseline} body ({entry['link']}): it uses nothing but its arguments, builtins and whole-module imports"
            checks[name] = ("rebuilt_function", original, [p.name for p in old_def.params])
            add_source(layouts["baseline"], imp_module, f"def {attr}(*args, **kwargs):\n    return 'baseline'\n")
            rationale.append(
                f"`{original}` was removed in {ctx.upstream} {ctx.target}; it is self-contained (arguments, "
                f"builtins and whole-module imports only), so `{shim_path}` carries its {ctx.baseline} body ({entry['link']}) for the target."
            )
        else:
            kind = "class" if old_def and old_def.kind == "class" else "function"
            entry.update(mode="todo", kind=kind, old_source="",
                         link=source_link(ctx.old_tree, imp_module, attr, ctx.baseline) if old_def else "")
            entry["summary"] = "TODO(porter): no automatic replacement; a human must port it"
            checks[name] = ("todo", original, None)
            stub = stub_class(attr, "baseline") if kind == "class" else f"def {attr}(*args, **kwargs):\n    return 'baseline'\n"
            add_source(layouts["baseline"], imp_module, stub)
            why = "not a class with surviving bases and a trivial body" if old_def else "no definition in the baseline tree"
            todo.append(Unhandled(record, f"removed, and porter cannot rebuild it ({why}): `{shim_path}` keeps the "
                                          "plugin importable with a stub that raises NotImplementedError; port it"))
        if ctx.new_tree.has_module(imp_module):
            add_source(layouts["target"], imp_module, "")
        entries.append(entry)
    shim, test = render_pair(
        ctx, "removed.py.j2", shim_path, {"entries": entries},
        {"strategy": "removed_fallback", "layouts": layouts, "tops": tops(layouts), "checks": checks},
    )
    return ShimGroup(
        name=f"compat/{Path(shim_path).stem}",
        family=DriftFamily.REMOVED,
        strategy="removed_fallback",
        records=tuple(records),
        subject=f"compat: fallbacks for {count(records, 'removed symbol')} of {module}",
        rationale=tuple(rationale),
        files=(shim, test),
        import_moves=import_moves(records, shim_module, ctx),
        todo=tuple(todo),
    )


def _literal_class_attributes(source: str) -> list[tuple[str, str]]:
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return []
    out = []
    for stmt in getattr(node, "body", []):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = ast.unparse(stmt.value)
            if literal(value):
                out.append((stmt.targets[0].id, value))
    return out


def self_contained(source: str, name: str, module_imports: dict[str, str] | None = None) -> bool:
    """A module-level function whose body reads no global name but builtins and modules its module
    imported whole (`import torch`; see free_imports), so its body can be copied."""
    return free_imports(source, name, module_imports or {}) is not None


def free_imports(source: str, name: str, module_imports: dict[str, str]) -> list[str] | None:
    """The `import X` lines the copied body needs, or None when it reads any other global name."""
    import builtins

    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list or node.name != name:
        return None
    bound = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
    bound |= {a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None}
    loads: set[str] = set()
    # The body and the defaults run; annotations stay strings (`from __future__ import annotations`).
    for part in [*node.body, *node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]:
        for sub in _walk_code(part):
            if isinstance(sub, (ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom, ast.ClassDef)):
                return None
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bound.add(sub.name)  # a local helper (`def _wrap(x): return x`); its annotations never run
            elif isinstance(sub, ast.Name):
                (bound.add if isinstance(sub.ctx, (ast.Store, ast.Del)) else loads.add)(sub.id)
            elif isinstance(sub, ast.arg):
                bound.add(sub.arg)
    free = loads - bound - set(dir(builtins))
    if not free <= set(module_imports):
        return None
    return [module_imports[n] for n in sorted(free)]


def _walk_code(node: ast.AST):
    """ast.walk without annotations (`x: T`, `-> T`): they stay strings under `from __future__ import annotations`."""
    yield node
    for field, value in ast.iter_fields(node):
        if field in ("annotation", "returns"):
            continue
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, ast.AST):
                yield from _walk_code(child)


def module_imports_of(tree, module: str, upstream_top: str) -> dict[str, str]:
    """Names bound by whole-module imports at the top of `module` (`import torch`, `import numpy as np`),
    outside the upstream itself: name -> the import line."""
    path = tree.module_file(module)
    if path is None:
        return {}
    try:
        parsed = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return {}
    out = {}
    for stmt in parsed.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name.split(".")[0] == upstream_top:
                    continue
                bound = alias.asname or alias.name.split(".")[0]
                out[bound] = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
    return out


def _with_imports(source: str, imports: list[str]) -> str:
    """Put `imports` first in the function body (after its docstring): the copy stays lazy."""
    if not imports:
        return source
    node = ast.parse(source).body[0]
    first = node.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
        and isinstance(first.value.value, str)
    lines = source.splitlines(keepends=True)
    at = (first.end_lineno if docstring else first.lineno - 1)
    indent = " " * (node.body[0].col_offset)
    return "".join(lines[:at]) + "".join(f"{indent}{line}\n" for line in imports) + "".join(lines[at:])


def _renamed(source: str, old: str, new: str) -> str:
    import re

    return re.sub(rf"^(\s*(?:async\s+)?def\s+){re.escape(old)}\b", rf"\g<1>{new}", source, count=1, flags=re.M)


def source_link(tree, module: str, name: str, version: str) -> str:
    """`pkg/mod.py@version:line` of `name`'s definition in `tree` (a link, instead of quoting it)."""
    import re

    path = tree.module_file(module)
    if path is None or tree.root is None:
        return f"{module}@{version}"
    rel = path.relative_to(tree.root).as_posix()
    pattern = re.compile(rf"^(?:async\s+def|def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*[:=]")
    # The last definition is the one the module binds (`@overload` stubs come before the implementation).
    lines = [n for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if pattern.match(line)]
    return f"{rel}@{version}:{lines[-1]}" if lines else f"{rel}@{version}"
