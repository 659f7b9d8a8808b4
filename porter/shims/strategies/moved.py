"""F2 moved / F2r renamed: a lazy import fallback module and the plugin's import lines redirected to it."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from porter.shims.lookup import class_member
from porter.shims.model import ShimGroup, Unhandled
from porter.shims.strategies.common import (
    ShimContext, add_source, count, import_moves, import_path, module_file_name,
    render_pair, stub_class, tops,
)
from porter.upgrade.models import DriftFamily, DriftRecord


def _lost_members(record: DriftRecord, old_module: str, name: str, new_module: str, new_name: str,
                  ctx: ShimContext) -> list[str]:
    """Attributes the plugin reads on a moved/renamed class (`Name.attr`) that the old class
    defined and the new one does not (an enum whose members were renamed, say)."""
    new_def = ctx.new_tree.find(new_module, new_name)
    old_def = ctx.old_tree.find(old_module, name)
    if new_def is None or old_def is None or new_def.kind != "class":
        return []
    used: set[str] = set()
    for path in {s.path for s in record.sites}:
        try:
            tree = ast.parse((ctx.plugin_root / path).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        used.update(n.attr for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name)
    return sorted(m for m in used if class_member(ctx.old_tree, old_def.module, old_def.name, m) is not None
                  and class_member(ctx.new_tree, new_def.module, new_def.name, m) is None)


def _fields(source: str) -> set[str]:
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return set()
    return {stmt.target.id for stmt in getattr(node, "body", [])
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)}


def _different_class(old_module: str, name: str, new_module: str, new_name: str, ctx: ShimContext) -> str:
    """Why the class found at the target is not the moved one: its declared fields share less than
    half with the old class's (vllm 0.18's v1.sample.metadata.SamplingMetadata is not the model
    runner v2 SamplingMetadata that 0.13 had in v1.worker.gpu.sample.metadata)."""
    old_def, new_def = ctx.old_tree.find(old_module, name), ctx.new_tree.find(new_module, new_name)
    if old_def is None or new_def is None or old_def.kind != "class" or new_def.kind != "class":
        return ""
    if (old_def.module, old_def.name) == (new_def.module, new_def.name):
        return ""  # one definition, only re-exported elsewhere before (vllm 0.11's `vllm.attention.AttentionBackend`)
    old_fields, new_fields = _fields(old_def.source), _fields(new_def.source)
    if len(old_fields) < 2 or not new_fields:
        return ""
    shared = old_fields & new_fields
    # A small class (vllm 0.33's RoutedExpertsLists, two fields) must share one; a larger one half.
    if (shared if len(old_fields) < 3 else len(shared) * 2 >= len(old_fields | new_fields)):
        return ""
    return f"{len(shared)} of {len(old_fields)} fields in common: missing {', '.join(sorted(old_fields - new_fields)[:4])}"


def _positional_calls_shifted(record: DriftRecord, old_module: str, name: str, new_module: str, new_name: str,
                              ctx: ShimContext) -> list[str]:
    """Plugin calls `name(a, b, ...)` whose positional arguments land on other parameters at the target
    (the moved function reordered them: `register_backend(backend, is_mamba, class_path)` became
    `(backend, class_path, is_mamba)`)."""
    old_def, new_def = ctx.old_tree.find(old_module, name), ctx.new_tree.find(new_module, new_name)
    if old_def is None or new_def is None or old_def.kind != "function" or new_def.kind != "function":
        return []
    positional = ("positional_only", "positional_or_keyword")
    old_names = [p.name for p in old_def.params if p.kind in positional]
    new_names = [p.name for p in new_def.params if p.kind in positional]
    first = next((i for i, (a, b) in enumerate(zip(old_names, new_names)) if a != b), None)
    if first is None:
        return []
    # `kernel[grid](...)`: a triton launch calls it too
    return [f"{path}:{call.lineno}" for path, call in _plugin_calls(record, name, ctx, launches=True)
            if len(call.args) > first]


def _plugin_calls(record: DriftRecord, name: str, ctx: ShimContext, launches: bool = False):
    """(path, call) for each call of the bare name `name` in the files of the record's sites;
    `launches`: also `name[grid](...)`."""
    for path in sorted({s.path for s in record.sites}):
        try:
            tree = ast.parse((ctx.plugin_root / path).read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.value if launches and isinstance(node.func, ast.Subscript) else node.func
            if isinstance(func, ast.Name) and func.id == name:
                yield path, node


def _accepted_keywords(tree, definition) -> set[str] | None:
    """Keywords a call of `definition` accepts (function parameters; a class's declared fields and
    `__init__` parameters), or None when it takes any (`**kwargs`) or porter cannot tell."""
    if definition.kind == "function":
        params = definition.params
    elif definition.kind == "class":
        init = class_member(tree, definition.module, definition.name, "__init__")
        params = init[2] if init and init[0] == "method" else ()
        fields = _fields(definition.source)
        if not params and not fields:
            return None  # inherited constructor: not visible here
        if not params:
            return fields
    else:
        return None
    if any(p.kind == "var_keyword" for p in params):
        return None
    return {p.name for p in params if p.kind != "var_positional"} | (_fields(definition.source) if definition.kind == "class" else set())


def _lost_keywords(record: DriftRecord, old_module: str, name: str, new_module: str, new_name: str,
                   ctx: ShimContext) -> list[str]:
    """`path:line (keyword)` of plugin calls `name(..., kw=...)` that the baseline object accepted and the
    moved one does not (vllm 0.33's TransferResult lost its `transfer_type` field): resolving the name
    does not fix those calls."""
    old_def, new_def = ctx.old_tree.find(old_module, name), ctx.new_tree.find(new_module, new_name)
    if old_def is None or new_def is None:
        return []
    before, after = _accepted_keywords(ctx.old_tree, old_def), _accepted_keywords(ctx.new_tree, new_def)
    if before is None or after is None:
        return []
    return [f"{path}:{call.lineno} (`{keyword.arg}=`)" for path, call in _plugin_calls(record, name, ctx)
            for keyword in call.keywords if keyword.arg and keyword.arg in before and keyword.arg not in after]


def _code_without_docstrings(source: str) -> str:
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        return source
    for sub in ast.walk(node):
        body = getattr(sub, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                isinstance(getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            sub.body = body[1:] or [ast.Pass()]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        node.name = "_"
    return ast.dump(node)


def _unlike_rename(record: DriftRecord, old_module: str, name: str, new_module: str, new_name: str,
                   ctx: ShimContext) -> str:
    """Why a rename rests on body likeness alone and the bodies differ ("" when the rename is plausible).
    vllm 0.13's apply_sampling_constraints is not compute_probs renamed: it returns the constrained
    logits, compute_probs returned their softmax."""
    from rapidfuzz import fuzz

    if record.family is not DriftFamily.RENAMED or name == new_name:
        return ""
    if name in new_name or new_name in name or fuzz.ratio(name, new_name) >= 50:
        return ""
    old_def, new_def = ctx.old_tree.find(old_module, name), ctx.new_tree.find(new_module, new_name)
    if old_def is None or new_def is None or old_def.kind != new_def.kind:
        return ""
    if _code_without_docstrings(old_def.source) == _code_without_docstrings(new_def.source):
        return ""
    return (f"`{new_name}` shares little of the name `{name}` and its code differs (compare "
            f"{source_link_of(ctx.old_tree, old_def, ctx.baseline)} with {source_link_of(ctx.new_tree, new_def, ctx.target)})")


def source_link_of(tree, definition, version: str) -> str:
    from porter.shims.strategies.removed import source_link

    return source_link(tree, definition.module, definition.name, version)


def _top_names(tree, module: str) -> set[str]:
    path = tree.module_file(module)
    if path is None:
        return set()
    try:
        parsed = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return set()
    return {n.name for n in parsed.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _successor_module(old_module: str, proposed: str, ctx: ShimContext) -> tuple[str, str]:
    """(module, why not) for a moved submodule: among the target's modules with the same last name, the
    one that defines most of what the old module defined. vllm 0.33 has twelve `spec_decode.*.speculator`
    modules; the successor of `autoregressive.speculator` is `target_dependent_ar.speculator` (6 of 7
    definitions), not the `xpress.speculator` that ranked first by name."""
    old_names = _top_names(ctx.old_tree, old_module)
    root = ctx.new_tree.root
    if len(old_names) < 2 or root is None:
        return proposed, ""
    leaf = old_module.rpartition(".")[2]
    package = proposed.split(".")[0]
    candidates = {proposed}
    for path in (root / package).rglob(f"{leaf}.py") if (root / package).is_dir() else ():
        candidates.add(".".join(path.relative_to(root).with_suffix("").parts))
    for path in (root / package).rglob(f"{leaf}/__init__.py") if (root / package).is_dir() else ():
        candidates.add(".".join(path.parent.relative_to(root).parts))
    scored = sorted(((len(old_names & _top_names(ctx.new_tree, c)), c != proposed, c) for c in candidates), reverse=True)
    shared, _, best = scored[0]
    if shared * 2 < len(old_names):
        return proposed, (f"no `{leaf}` module at the target defines most of what `{old_module}` did "
                          f"(best: `{best}`, {shared} of {len(old_names)})")
    return best, ""


def plan_moved(module: str, records: list[DriftRecord], ctx: ShimContext, taken: set[str]) -> ShimGroup:
    shim_path = module_file_name(module, "", ctx, taken)
    shim_module = ctx.convention.module_of(shim_path)
    entries, rationale, todo = [], [], []
    layouts: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    expected: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    for record in records:
        imp_module, imp_name = import_path(record)
        new = record.new_location
        assert new is not None
        successor_note = ""
        if not new.qualname and ctx.old_tree.has_module(f"{imp_module}.{imp_name}"):
            module, unsure = _successor_module(f"{imp_module}.{imp_name}", new.module, ctx)
            if unsure:
                todo.append(Unhandled(record, "the submodule's successor is unsure: find the real successor", unsure))
            elif module != new.module:
                successor_note = (f"`{module}` chosen over `{new.module}`: it defines what "
                                  f"`{imp_module}.{imp_name}` defined.")
                new = replace(new, module=module, file=None, line=None)
        # `from a.b import protocol` where the submodule a.b.protocol moved: the target is a module
        # (no qualname), taken whole instead of as an attribute (it used to render `class :`).
        new_attr = new.qualname.split(".")[-1] if new.qualname else ""
        old_is_module = ctx.old_tree.has_module(f"{imp_module}.{imp_name}")
        old_dotted = f"{imp_module}.{imp_name}"
        new_dotted = f"{new.module}.{new_attr}" if new_attr else new.module
        entries.append({
            "name": imp_name,
            "old": old_dotted,
            "new": new_dotted,
            "candidates": [(imp_module, imp_name), (new.module, new_attr)],
        })
        if old_is_module:
            add_source(layouts["baseline"], imp_module, "")
            add_source(layouts["baseline"], old_dotted, "porter_layout = 'baseline'\n")
        else:
            add_source(layouts["baseline"], imp_module, stub_class(imp_name, "baseline"))
        if new_attr:
            add_source(layouts["target"], new.module, stub_class(new_attr, "target"))
        else:
            add_source(layouts["target"], new.module, "porter_layout = 'target'\n")
        if ctx.new_tree.has_module(imp_module):  # the old module survives without the name
            add_source(layouts["target"], imp_module, "")
        expected["baseline"][imp_name] = old_dotted
        expected["target"][imp_name] = new_dotted
        verb = "renamed" if record.family is DriftFamily.RENAMED else "moved"
        confidence = f" (confidence {record.confidence:.2f})" if record.confidence else ""
        rationale.append(
            f"`{old_dotted}` {verb} to `{new_dotted}` in {ctx.upstream} {ctx.target}{confidence}: "
            f"lazy fallback in `{shim_path}` tries the baseline path, then the target path; "
            f"{len(record.sites)} site(s) now import it from the shim."
        )
        if successor_note:
            rationale.append(successor_note)
        lost_keywords = _lost_keywords(record, imp_module, imp_name, new.module, new_attr, ctx) if new_attr else []
        if lost_keywords:
            todo.append(Unhandled(record, "the shim resolves the name, but its new home no longer accepts keywords the "
                                          "plugin passes: those calls raise TypeError",
                                  f"`{new_dotted}` at {', '.join(lost_keywords[:3])}"))
        shifted = _positional_calls_shifted(record, imp_module, imp_name, new.module, new_attr, ctx) if new_attr else []
        if shifted:
            todo.append(Unhandled(record, "the shim resolves the name, but its new home takes its parameters in "
                                          "another order and the plugin passes them by position: pass them by keyword",
                                  f"`{new_dotted}` at {', '.join(shifted[:3])}"))
        renamed_unlike = _unlike_rename(record, imp_module, imp_name, new.module, new_attr, ctx) if new_attr else ""
        if renamed_unlike:
            todo.append(Unhandled(record, "the rename is probably not the same object: find the real successor or "
                                          "port the old behaviour", renamed_unlike))
        unlike = _different_class(imp_module, imp_name, new.module, new_attr, ctx) if new_attr else ""
        if unlike:
            todo.append(Unhandled(record, "the new home has the name but not the shape of the old class: probably "
                                          "another class; find the real successor", f"`{new_dotted}`: {unlike}"))
        lost = _lost_members(record, imp_module, imp_name, new.module, new_attr, ctx)
        if lost:
            todo.append(Unhandled(record, "the shim resolves the class, but members the plugin uses are gone "
                                          "from its new home: those uses still break",
                                  ", ".join(f"`{imp_name}.{m}`" for m in lost)))
    guard = ctx.convention.guard_function if ctx.convention.style == "version_guard" else None
    if guard:  # the stand-in of the fork's gate answers "baseline?" per layout
        guard_module, _, guard_name = guard.rpartition(".")
        for layout, answer in (("baseline", True), ("target", False)):
            add_source(layouts[layout], guard_module, f"def {guard_name}(version):\n    return {answer}\n")
    shim, test = render_pair(
        ctx, "moved.py.j2", shim_path, {"entries": entries},
        {"strategy": "lazy_import_fallback", "layouts": layouts, "tops": tops(layouts), "expected": expected},
    )
    family = records[0].family if len({r.family for r in records}) == 1 else DriftFamily.MOVED
    return ShimGroup(
        name=f"compat/{Path(shim_path).stem}",
        family=family,
        strategy="lazy_import_fallback",
        records=tuple(records),
        subject=f"compat: lazy fallback for {count(records, 'moved symbol')} of {module}",
        rationale=tuple(rationale),
        files=(shim, test),
        import_moves=import_moves(records, shim_module, ctx),
        todo=tuple(todo),
    )
