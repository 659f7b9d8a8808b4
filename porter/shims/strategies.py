"""One strategy per drift family: DriftRecords + upstream facts -> ShimGroups (pure planning).

- moved / renamed (F2, F2r): lazy import fallback module + rewrite of the plugin's import lines;
- signature changed (F3): call adapter that inspects the upstream signature once;
- removed (F1): local rebuild where the old object can be rebuilt from what remains (a subclass
  of surviving bases, a literal constant), else a TODO stub that raises and needs a human;
- new required attribute / method (F7, F8): the member on the plugin's subclass with a commented
  default, flagged for review.
Anything else (F4, F9, F10, F11, other) is listed for a human.
"""

from __future__ import annotations

import ast
import keyword
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from porter.shims.convention import Convention
from porter.shims.lookup import Definition, UpstreamTree, class_member
from porter.shims.model import ImportMove, MemberAdd, NewFile, ParamAdd, ShimGroup, ShimPlan, Unhandled
from porter.shims.render import render_python
from porter.upgrade.models import DriftFamily, DriftRecord, Severity


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


def plan_shims(records: Iterable[DriftRecord], ctx: ShimContext) -> ShimPlan:
    """Group findings per family and upstream module and plan one ShimGroup per group."""
    by_kind: dict[tuple[str, str], list[DriftRecord]] = defaultdict(list)
    members_by_path: dict[str, list[tuple[DriftRecord, Any]]] = defaultdict(list)
    overrides_by_path: dict[str, list[tuple[DriftRecord, ParamAdd, list[str]]]] = defaultdict(list)
    unhandled: list[Unhandled] = []
    for record in records:
        if record.severity is Severity.NOTE:
            continue  # dead-guard or additive: nothing to bridge
        family = record.family
        if family in (DriftFamily.MOVED, DriftFamily.RENAMED) and record.new_location is None:
            family = DriftFamily.REMOVED  # no new home found: treat as removed
        if family in (DriftFamily.MOVED, DriftFamily.RENAMED, DriftFamily.REMOVED) and not record.old_location.qualname:
            unhandled.append(Unhandled(record, "a whole module moved or went away: rewrite its `import` lines by hand"))
        elif family in (DriftFamily.MOVED, DriftFamily.RENAMED, DriftFamily.REMOVED) and _is_member(record, ctx):
            unhandled.append(Unhandled(record, "a class member moved or went away: adapt the attribute uses by hand"))
        elif family in (DriftFamily.MOVED, DriftFamily.RENAMED, DriftFamily.REMOVED) and not _imported_somewhere(record):
            unhandled.append(Unhandled(record, "used through an attribute chain (`module.name`), not imported by name: "
                                               "adapt those uses by hand"))
        elif family in (DriftFamily.MOVED, DriftFamily.RENAMED):
            by_kind[("moved", _import_path(record)[0])].append(record)
        elif family is DriftFamily.SIGNATURE and _is_override(record):
            fixes, reason = _override_fixes(record, ctx)
            if reason:
                unhandled.append(Unhandled(record, reason))
            for path, fix, expected in fixes:
                overrides_by_path[path].append((record, fix, expected))
        elif family is DriftFamily.SIGNATURE:
            reason = _signature_unhandled(record, ctx)
            if reason:
                unhandled.append(Unhandled(record, reason))
            else:
                by_kind[("signature", _import_path(record)[0])].append(record)
        elif family is DriftFamily.REMOVED:
            by_kind[("removed", _import_path(record)[0])].append(record)
        elif family in (DriftFamily.NEW_ATTRIBUTE, DriftFamily.NEW_METHOD):
            # One record can name several plugin subclasses (one site each): each gets the member.
            for site in record.sites or (None,):
                members_by_path[site.path if site else _subclass_site(record)[0]].append((record, site))
        else:
            unhandled.append(Unhandled(record, _UNHANDLED_REASON.get(family, "no automatic strategy for this family")))

    taken = set(ctx.existing)
    groups: list[ShimGroup] = []
    for (kind, key), items in sorted(by_kind.items()):
        items = sorted(items, key=lambda r: r.symbol)
        if kind == "moved":
            groups.append(_plan_moved(key, items, ctx, taken))
        elif kind == "signature":
            group, skipped = _plan_signature(key, items, ctx, taken)
            unhandled.extend(skipped)
            if group is not None:
                groups.append(group)
        elif kind == "removed":
            groups.append(_plan_removed(key, items, ctx, taken))
    for path, fixes in sorted(overrides_by_path.items()):
        groups.append(_plan_overrides(path, fixes, ctx, taken))
    for path, pairs in sorted(members_by_path.items()):
        group, skipped = _plan_members(path, pairs, ctx, taken)
        unhandled.extend(skipped)
        if group is not None:
            groups.append(group)
    return ShimPlan(tuple(groups), tuple(unhandled), ctx.convention.to_dict())


_UNHANDLED_REASON = {
    DriftFamily.RETURN: "the return shape changed: adapt every caller by hand (unpack by field, not by index)",
    DriftFamily.BINARY: "binary/ABI drift: rebuild the extension against the target",
    DriftFamily.BASE_CHANGED: "the base class of a plugin subclass changed: review the MRO and overridden hooks",
    DriftFamily.MONKEYPATCH: "the monkeypatch target is gone: move or delete the patch",
    DriftFamily.OTHER: "no automatic strategy for this finding",
}


# ---------------------------------------------------------------- helpers


def _leaf(module: str) -> str:
    return module.rsplit(".", 1)[-1].lstrip("_") or "root"


def _module_file_name(module: str, suffix: str, ctx: ShimContext, taken: set[str]) -> str:
    parts = module.split(".")
    stem = _leaf(module) + suffix
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


def _test_path(shim_path: str, ctx: ShimContext) -> tuple[str, int]:
    stem = Path(shim_path).stem
    test_path = f"{ctx.convention.test_dir}/test_{stem}.py"
    return test_path, len(Path(test_path).parts) - 1


def _import_path(record: DriftRecord) -> tuple[str, str]:
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


def _is_member(record: DriftRecord, ctx: ShimContext) -> bool:
    """A class attribute or method (`module.Class.name`), not a module-level name an import can bring."""
    module, name = _import_path(record)
    if "." in name:
        return True
    if ctx.old_tree.root is None:
        return False
    return not ctx.old_tree.has_module(module) and ctx.old_tree.exists(module)


def _imported_somewhere(record: DriftRecord) -> bool:
    """Does any site import the name (the only kind of use the shims rewrite)? Unknown code counts."""
    codes = [s.code.strip() for s in record.sites]
    return not codes or any(not c or c.startswith(("from ", "import ")) or " import " in c for c in codes)


import_path = _import_path  # public name for callers outside the shim planner


def _local_name(record: DriftRecord) -> str:
    """The name the plugin imports."""
    return _import_path(record)[1].split(".")[-1]


def _import_moves(records: list[DriftRecord], shim_module: str, ctx: ShimContext) -> tuple[ImportMove, ...]:
    moves = []
    for record in records:
        module, name = _import_path(record)
        for path in sorted({s.path for s in record.sites}):
            if path.endswith(".py") and (ctx.plugin_root / path).is_file():
                moves.append(ImportMove(path, module, name, shim_module))
    return tuple(dict.fromkeys(moves))


def _stub_class(name: str, layout: str, base: str | None = None) -> str:
    parent = f"({base})" if base else ""
    return f"class {name}{parent}:\n    porter_layout = {layout!r}\n"


def _add_source(layout: dict[str, str], module: str, text: str) -> None:
    layout[module] = layout.get(module, "") + text


def _tops(layouts: dict[str, dict[str, str]]) -> list[str]:
    return sorted({m.split(".")[0] for modules in layouts.values() for m in modules})


def _render_pair(ctx: ShimContext, shim_template: str, shim_path: str, shim_vars: dict[str, Any],
                 test_vars: dict[str, Any]) -> tuple[NewFile, NewFile]:
    test_path, depth = _test_path(shim_path, ctx)
    shim = render_python(shim_template, **ctx.template_vars(), **shim_vars)
    test = render_python(
        "test_shim.py.j2", **ctx.template_vars(), shim_path=shim_path, test_path=test_path, depth=depth, **test_vars
    )
    return NewFile(shim_path, shim, "shim"), NewFile(test_path, test, "test")


# ---------------------------------------------------------------- moved / renamed


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


def _plan_moved(module: str, records: list[DriftRecord], ctx: ShimContext, taken: set[str]) -> ShimGroup:
    shim_path = _module_file_name(module, "", ctx, taken)
    shim_module = ctx.convention.module_of(shim_path)
    entries, rationale, needs_human = [], [], []
    layouts: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    expected: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    for record in records:
        imp_module, imp_name = _import_path(record)
        new = record.new_location
        assert new is not None
        new_attr = new.qualname.split(".")[-1]
        old_dotted, new_dotted = f"{imp_module}.{imp_name}", f"{new.module}.{new_attr}"
        entries.append({
            "name": imp_name,
            "old": old_dotted,
            "new": new_dotted,
            "candidates": [(imp_module, imp_name), (new.module, new_attr)],
        })
        _add_source(layouts["baseline"], imp_module, _stub_class(imp_name, "baseline"))
        _add_source(layouts["target"], new.module, _stub_class(new_attr, "target"))
        if ctx.new_tree.has_module(imp_module):  # the old module survives without the name
            _add_source(layouts["target"], imp_module, "")
        expected["baseline"][imp_name] = old_dotted
        expected["target"][imp_name] = new_dotted
        verb = "renamed" if record.family is DriftFamily.RENAMED else "moved"
        confidence = f" (confidence {record.confidence:.2f})" if record.confidence else ""
        rationale.append(
            f"`{old_dotted}` {verb} to `{new_dotted}` in {ctx.upstream} {ctx.target}{confidence}: "
            f"lazy fallback in `{shim_path}` tries the baseline path, then the target path; "
            f"{len(record.sites)} site(s) now import it from the shim."
        )
        lost = _lost_members(record, imp_module, imp_name, new.module, new_attr, ctx)
        if lost:
            needs_human.append(record.key)
            rationale.append(
                f"TODO for a human: the plugin uses {', '.join(f'`{imp_name}.{m}`' for m in lost)}, which "
                f"`{new_dotted}` no longer defines; the shim resolves the class but those uses still break."
            )
    guard = ctx.convention.guard_function if ctx.convention.style == "version_guard" else None
    if guard:  # the stand-in of the fork's gate answers "baseline?" per layout
        guard_module, _, guard_name = guard.rpartition(".")
        for layout, answer in (("baseline", True), ("target", False)):
            _add_source(layouts[layout], guard_module, f"def {guard_name}(version):\n    return {answer}\n")
    shim, test = _render_pair(
        ctx, "moved.py.j2", shim_path, {"entries": entries},
        {"strategy": "lazy_import_fallback", "layouts": layouts, "tops": _tops(layouts), "expected": expected},
    )
    family = records[0].family if len({r.family for r in records}) == 1 else DriftFamily.MOVED
    return ShimGroup(
        name=f"compat/{Path(shim_path).stem}",
        family=family,
        strategy="lazy_import_fallback",
        records=tuple(records),
        subject=f"compat: lazy fallback for {_count(records, 'moved symbol')} of {module}",
        rationale=tuple(rationale),
        files=(shim, test),
        import_moves=_import_moves(records, shim_module, ctx),
        needs_human=tuple(needs_human),
    )


def _count(records: list, noun: str) -> str:
    return f"{len(records)} {noun}{'s' if len(records) != 1 else ''}"


# ---------------------------------------------------------------- signature changed


def _changes(record: DriftRecord) -> list[dict[str, Any]]:
    """The per-use change details of a signature record (one, or several merged under `changes`)."""
    changes = record.detail.get("changes")
    return [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else [record.detail]


def _is_override(record: DriftRecord) -> bool:
    return any("override" in str(c.get("change") or "") for c in _changes(record))


def _override_fixes(record: DriftRecord, ctx: ShimContext) -> tuple[list[tuple[str, ParamAdd, list[str]]], str]:
    """Adaptation pattern 1: the base method gained trailing parameters -> the override accepts
    them with the upstream default. Anything else (removed, reordered or inserted parameters) is
    pattern 13, two guarded definitions, for a human."""
    human = ("the plugin overrides a method whose upstream signature changed: write guarded definitions "
             "for both signatures (adaptation pattern 13)")
    changes = [c for c in _changes(record) if "override" in str(c.get("change") or "")]
    if any(c.get("removed") for c in changes) or not all(c.get("added") for c in changes):
        return [], human
    method = str(changes[0].get("method") or record.symbol.rsplit(".", 1)[-1])
    base = record.symbol[: -len(method) - 1] if record.symbol.endswith("." + method) else record.symbol
    module, _, cls = base.rpartition(".")
    old_cls, new_cls = ctx.old_tree.find(module, cls), ctx.new_tree.find(module, cls)
    old_m = class_member(ctx.old_tree, old_cls.module, old_cls.name, method) if old_cls else None
    new_m = class_member(ctx.new_tree, new_cls.module, new_cls.name, method) if new_cls else None
    if not old_m or not new_m or old_m[0] != "method" or new_m[0] != "method":
        return [], human
    plain = lambda params: [p for p in params if p.kind not in ("var_positional", "var_keyword")]  # noqa: E731
    old_names, new_params = [p.name for p in plain(old_m[2])], plain(new_m[2])
    if [p.name for p in new_params[: len(old_names)]] != old_names:
        return [], human  # parameters inserted or reordered: positions would shift
    tail = new_params[len(old_names):]
    added = [(p.name, p.default if p.has_default and _literal(p.default) else "None",
              "keyword_only" if p.kind == "keyword_only" else "positional") for p in tail]
    fixes = []
    for site in record.sites:
        cls_name = _class_at(ctx.plugin_root, site.path, site.line)
        override = _method_params(ctx.plugin_root / site.path, cls_name, method) if cls_name else None
        if override is None:
            return [], human
        positional, keyword_only, has_var = override
        if has_var or positional != old_names[: len(positional)] or len(positional) != len(old_names):
            return [], human  # the override's own parameters do not line up with the base's
        comment = (f"porter: {ctx.upstream} {ctx.target} passes {', '.join(n for n, _, _ in added)} to {cls}.{method}; "
                   "accepted with the upstream default (REVIEW: ignored here)")
        expected = positional + [n for n, _, k in added if k == "positional"] + keyword_only + \
            [n for n, _, k in added if k == "keyword_only"]
        fixes.append((site.path, ParamAdd(site.path, cls_name, method, tuple(added), comment), expected))
    return fixes, ""


def _method_params(path: Path, class_name: str, method: str) -> tuple[list[str], list[str], bool] | None:
    """(positional names, keyword-only names, has *args/**kwargs) of `class_name.method` in a file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == method:
                    args = stmt.args
                    return ([a.arg for a in (*args.posonlyargs, *args.args)], [a.arg for a in args.kwonlyargs],
                            bool(args.vararg or args.kwarg))
    return None


def _plan_overrides(path: str, fixes: list[tuple[DriftRecord, ParamAdd, list[str]]], ctx: ShimContext,
                    taken: set[str]) -> ShimGroup:
    stem = Path(path).stem
    test_path = f"{ctx.convention.test_dir}/test_overrides_{stem}.py"
    counter = 2
    while test_path in taken:
        test_path = f"{ctx.convention.test_dir}/test_overrides_{stem}_{counter}.py"
        counter += 1
    taken.add(test_path)
    required = [(path, fix.class_name, fix.method, expected) for _, fix, expected in fixes]
    test = render_python("test_members.py.j2", **ctx.template_vars(), test_path=test_path,
                         depth=len(Path(test_path).parts) - 1, required=required)
    records = list({record.key: record for record, _, _ in fixes}.values())
    rationale = tuple(
        f"`{fix.class_name}.{fix.method}` accepts {', '.join(f'`{n}={d}`' for n, d, _ in fix.params)}: {ctx.upstream} "
        f"{ctx.target} appends them to the base signature (adaptation pattern 1); the override ignores them, review that."
        for _, fix, _ in fixes
    )
    return ShimGroup(
        name=f"overrides/{stem}",
        family=DriftFamily.SIGNATURE,
        strategy="override_params",
        records=tuple(records),
        subject=f"{path}: accept the parameters {ctx.upstream} {ctx.target} passes to {_count(fixes, 'override')}",
        rationale=rationale,
        files=(NewFile(test_path, test, "test"),),
        param_adds=tuple(fix for _, fix, _ in fixes),
        review=tuple(dict.fromkeys(r.key for r in records)),
    )


def _signature_unhandled(record: DriftRecord, ctx: ShimContext) -> str:
    """Why a signature finding cannot get a call adapter ("" when it can)."""
    kinds = {str(c.get("change") or "") for c in _changes(record)}
    if any("override" in k for k in kinds):
        return ("the plugin overrides a method whose upstream signature changed: write guarded definitions "
                "for both signatures (adaptation pattern 13)")
    if "positional_removed" in kinds:
        return "the call passes more positional arguments than the target accepts: reorder the call by hand"
    imp_module, imp_name = _import_path(record)
    if "." in imp_name:
        return "a method's signature changed: adapt its call sites by hand (porter adapts module-level callables)"
    definition = ctx.old_tree.find(imp_module, imp_name) or ctx.new_tree.find(imp_module, imp_name)
    if definition is not None and definition.kind == "class":
        return "a constructor's signature changed: write guarded calls for both signatures (adaptation pattern 2)"
    return ""


def _param_names(definition: Definition | None) -> list[str]:
    return [p.name for p in definition.params if p.kind not in ("var_positional", "var_keyword")] if definition else []


def _signature_delta(record: DriftRecord, old_def: Definition | None, new_def: Definition | None) -> tuple[dict[str, str], list[str], list[str]]:
    """(renamed old->new, dropped keywords, new required params) from the record and both trees."""
    removed, added = [], []
    for change in _changes(record):
        kind, param = change.get("change"), change.get("parameter")
        if kind == "keyword_removed" and param:
            removed.append(str(param))
        elif kind == "new_required_parameter" and param:
            added.append(str(param))
    old_names, new_names = _param_names(old_def), _param_names(new_def)
    renamed: dict[str, str] = {}
    for name in removed:  # a keyword gone and a similar new one at the same position: a rename
        if name in old_names:
            index = old_names.index(name)
            candidate = new_names[index] if index < len(new_names) else ""
            if candidate and candidate not in old_names and _similar_names(name, candidate):
                renamed[name] = candidate
    added = [a for a in dict.fromkeys(added) if a not in renamed.values()]
    dropped = [k for k in dict.fromkeys(removed) if k not in renamed]
    return renamed, dropped, added


def _similar_names(old: str, new: str) -> bool:
    """Position alone is weak evidence (`base` -> `rope_parameters` is a new meaning, not a rename)."""
    from rapidfuzz import fuzz

    return old in new or new in old or fuzz.ratio(old, new) >= 50


def _stub_function(name: str, definition: Definition | None, fallback: list[str]) -> str:
    """A stand-in with the same parameter names and kinds, every default None, returning what it received."""
    params = definition.params if definition else ()
    parts: list[str] = []
    star = False
    if not params:
        parts = [f"{n}=None" for n in fallback] + ["**porter_extra"]
    for p in params:
        if p.kind in ("positional_only", "positional_or_keyword"):
            parts.append(f"{p.name}=None")
        elif p.kind == "var_positional":
            parts.append(f"*{p.name}")
            star = True
        elif p.kind == "keyword_only":
            if not star:
                parts.append("*")
                star = True
            parts.append(f"{p.name}=None")
        else:
            parts.append(f"**{p.name}")
    if any(p.kind == "positional_only" for p in params):
        last = max(i for i, p in enumerate(params) if p.kind == "positional_only")
        parts.insert(last + 1, "/")
    body = "    received = dict(locals())\n"
    for p in params:
        if p.kind == "var_keyword":
            body += f"    received.update(received.pop({p.name!r}))\n"
        elif p.kind == "var_positional":
            body += f"    received.pop({p.name!r})\n"
    if not params:
        body += "    received.update(received.pop('porter_extra'))\n"
    body += "    return {k: v for k, v in received.items() if v is not None}\n"
    return f"def {name}({', '.join(parts)}):\n{body}"


def _plan_signature(module: str, records: list[DriftRecord], ctx: ShimContext, taken: set[str]) -> tuple[ShimGroup | None, list[Unhandled]]:
    adaptable, skipped = [], []
    for record in records:
        imp_module, name = _import_path(record)
        target = record.new_location
        mod, attr = (target.module, target.qualname) if target and target.qualname else (imp_module, name)
        renamed, dropped, added = _signature_delta(record, ctx.old_tree.find(imp_module, name), ctx.new_tree.find(mod, attr))
        if renamed and not dropped and not added:
            adaptable.append(record)
        elif dropped:  # dropping what the plugin passes would change behaviour silently
            skipped.append(Unhandled(record, f"the target no longer accepts {', '.join(f'`{d}`' for d in dropped)} and has "
                                             f"no similar parameter to map it to: rework the call at {_sites(record)}"))
        else:  # nothing an adapter can map (a new required or shifted positional parameter)
            needed = ", ".join(f"`{a}`" for a in added) or "a changed parameter"
            skipped.append(Unhandled(record, f"the call must now pass {needed}: only the caller knows the value; "
                                             f"edit the call at {_sites(record)}"))
    if not adaptable:
        return None, skipped
    records = adaptable
    shim_path = _module_file_name(module, "_signatures", ctx, taken)
    shim_module = ctx.convention.module_of(shim_path)
    entries, rationale, needs_human, review = [], [], [], []
    layouts: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    calls: dict[str, dict[str, int]] = {}
    expected: dict[str, dict[str, dict[str, int]]] = {"baseline": {}, "target": {}}
    for record in records:
        imp_module, name = _import_path(record)
        target = record.new_location
        mod, attr = (target.module, target.qualname) if target and target.qualname else (imp_module, name)
        old_def = ctx.old_tree.find(imp_module, name)
        new_def = ctx.new_tree.find(mod, attr)
        renamed, dropped, added = _signature_delta(record, old_def, new_def)
        parts = [f"`{o}` -> `{n}`" for o, n in renamed.items()]
        summary = ("keywords renamed " + ", ".join(parts)) if parts else ""
        if dropped:
            summary += ("; " if summary else "") + "no longer accepts " + ", ".join(f"`{d}`" for d in dropped)
        if added:
            summary += ("; " if summary else "") + "new required " + ", ".join(f"`{a}`" for a in added)
        entries.append({"name": name, "module": mod, "attr": attr, "renamed": renamed, "dropped": tuple(dropped),
                        "summary": summary or "signature changed"})
        _add_source(layouts["baseline"], imp_module, _stub_function(name, old_def, [*renamed, *dropped]))
        _add_source(layouts["target"], mod, _stub_function(attr, new_def, list(renamed.values())))
        call = {old: index + 1 for index, old in enumerate([*renamed, *dropped])}
        calls[name] = call
        expected["baseline"][name] = dict(call)
        expected["target"][name] = {renamed[k]: v for k, v in call.items() if k in renamed}
        if added:
            needs_human.append(record.key)
            rationale.append(
                f"`{record.symbol}` now requires {', '.join(f'`{a}`' for a in added)} in {ctx.upstream} {ctx.target}: "
                f"porter cannot choose a value; TODO for a human at {_sites(record)}"
                + (f" (the adapter in `{shim_path}` maps the rest)." if renamed or dropped else ".")
            )
        else:
            if dropped:
                review.append(record.key)
            rationale.append(
                f"`{record.symbol}` {summary or 'changed its signature'} in {ctx.upstream} {ctx.target}: the adapter in "
                f"`{shim_path}` inspects the signature once and maps the plugin's keywords"
                + ("; dropping a keyword changes behaviour, review it." if dropped else ".")
            )
    shim, test = _render_pair(
        ctx, "signature.py.j2", shim_path, {"entries": entries},
        {"strategy": "signature_adapter", "layouts": layouts, "tops": _tops(layouts), "calls": calls,
         "expected": expected, "adapted": {"baseline": False, "target": True}},
    )
    return ShimGroup(
        name=f"compat/{Path(shim_path).stem}",
        family=DriftFamily.SIGNATURE,
        strategy="signature_adapter",
        records=tuple(records),
        subject=f"compat: call adapters for {_count(records, 'changed signature')} in {module}",
        rationale=tuple(rationale),
        files=(shim, test),
        import_moves=_import_moves(records, shim_module, ctx),
        needs_human=tuple(needs_human),
        review=tuple(review),
    ), skipped


def _sites(record: DriftRecord) -> str:
    return ", ".join(f"{s.path}:{s.line}" for s in record.sites[:3]) + (" ..." if len(record.sites) > 3 else "")


# ---------------------------------------------------------------- removed


def _literal(text: str | None) -> bool:
    if text is None:
        return False
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def _surviving_base(base: str, ctx: ShimContext) -> str | None:
    """Where a base class of the removed class lives at the target (same path, or same name moved)."""
    if "." not in base:
        return None  # builtins: object/Exception carry no behaviour worth rebuilding on
    if ctx.new_tree.exists(base):
        return base
    return None


def _plan_removed(module: str, records: list[DriftRecord], ctx: ShimContext, taken: set[str]) -> ShimGroup:
    shim_path = _module_file_name(module, "_fallbacks", ctx, taken)
    shim_module = ctx.convention.module_of(shim_path)
    entries, rationale, needs_human, checks = [], [], [], {}
    layouts: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    for record in records:
        imp_module, name = _import_path(record)
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
                        _add_source(layouts[layout], base_mod, _stub_class(base_name, layout))
            base_imports = "".join(f"from {b.rpartition('.')[0]} import {b.rpartition('.')[2]}\n" for b in surviving)
            base_names = ", ".join(b.rpartition(".")[2] for b in surviving)
            _add_source(layouts["baseline"], imp_module, base_imports + _stub_class(attr, "baseline", base_names))
            rationale.append(
                f"`{original}` was removed in {ctx.upstream} {ctx.target}; its body was trivial and its "
                f"bases survive, so `{shim_path}` rebuilds it as a subclass of {', '.join(surviving)} "
                "(isinstance checks keep working)."
            )
        elif old_def and old_def.kind == "assignment" and _literal(old_def.value):
            entry["mode"] = "constant"
            entry["value"] = old_def.value
            entry["summary"] = f"rebuilt from the {ctx.baseline} value `{old_def.value}`"
            checks[name] = ("constant", original, ast.literal_eval(old_def.value))
            _add_source(layouts["baseline"], imp_module, f"{attr} = {old_def.value}\n")
            rationale.append(
                f"`{original}` (a constant) was removed in {ctx.upstream} {ctx.target}; `{shim_path}` "
                f"keeps the {ctx.baseline} value."
            )
        else:
            kind = "class" if old_def and old_def.kind == "class" else "function"
            entry.update(mode="todo", kind=kind, old_source=old_def.source if old_def else "")
            entry["summary"] = "TODO(porter): no automatic replacement; a human must port it"
            checks[name] = ("todo", original, None)
            stub = _stub_class(attr, "baseline") if kind == "class" else f"def {attr}(*args, **kwargs):\n    return 'baseline'\n"
            _add_source(layouts["baseline"], imp_module, stub)
            needs_human.append(record.key)
            why = "it is not a class with surviving bases and a trivial body" if old_def else "its definition was not found in the baseline tree"
            rationale.append(
                f"`{original}` was removed in {ctx.upstream} {ctx.target} and cannot be rebuilt ({why}): "
                f"`{shim_path}` keeps the plugin importable with a stub that raises NotImplementedError; "
                f"TODO for a human at {_sites(record)}."
            )
        if ctx.new_tree.has_module(imp_module):
            _add_source(layouts["target"], imp_module, "")
        entries.append(entry)
    shim, test = _render_pair(
        ctx, "removed.py.j2", shim_path, {"entries": entries},
        {"strategy": "removed_fallback", "layouts": layouts, "tops": _tops(layouts), "checks": checks},
    )
    return ShimGroup(
        name=f"compat/{Path(shim_path).stem}",
        family=DriftFamily.REMOVED,
        strategy="removed_fallback",
        records=tuple(records),
        subject=f"compat: fallbacks for {_count(records, 'removed symbol')} of {module}",
        rationale=tuple(rationale),
        files=(shim, test),
        import_moves=_import_moves(records, shim_module, ctx),
        needs_human=tuple(needs_human),
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
            if _literal(value):
                out.append((stmt.targets[0].id, value))
    return out


# ---------------------------------------------------------------- new required members


def _subclass_site(record: DriftRecord) -> tuple[str, str | None]:
    """(plugin file, plugin class name) of the subclass that lacks the member."""
    detail = record.detail
    cls = detail.get("subclass") or detail.get("plugin_class") or detail.get("class")
    path = detail.get("subclass_path") or detail.get("path")
    if not path and record.sites:
        path = record.sites[0].path
    if cls and "." in str(cls):
        cls = str(cls).rsplit(".", 1)[-1]
    return str(path or ""), (str(cls) if cls else None)


def _class_at(root: Path, path: str, line: int | None) -> str | None:
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


def _member_names(record: DriftRecord) -> list[str]:
    """Members the subclass lacks: `attributes` / `methods` lists, else a single `member` or the symbol tail."""
    detail = record.detail
    for key in ("attributes", "methods", "members"):
        value = detail.get(key)
        if isinstance(value, (list, tuple)) and value:
            return [str(v) for v in value]
    for key in ("member", "attribute", "method"):
        value = detail.get(key)
        if isinstance(value, str) and value:
            return [value]
    return [record.symbol.rsplit(".", 1)[-1]]


def _base_location(record: DriftRecord) -> tuple[str, str]:
    """(module, class) of the upstream base class: the record's symbol is the base class itself."""
    base = record.detail.get("base")
    if isinstance(base, str) and "." in base:
        module, _, name = base.rpartition(".")
        return module, name
    loc = record.new_location or record.old_location
    return loc.module, loc.qualname.split(".")[-1] if loc.qualname else record.symbol.rsplit(".", 1)[-1]


def _plan_members(path: str, pairs: list[tuple[DriftRecord, Any]], ctx: ShimContext, taken: set[str]) -> tuple[ShimGroup | None, list[Unhandled]]:
    adds, rationale, review, required, skipped, kept = [], [], [], [], [], []
    for record, site, member in [(r, s, m) for r, s in pairs for m in _member_names(r)]:
        # The class defined at the site's line; the record's `plugin_class` names only the first subclass.
        cls = _class_at(ctx.plugin_root, path, site.line) if site is not None else None
        cls = cls or _subclass_site(record)[1]
        if not path or not cls or not member.isidentifier() or keyword.iskeyword(member):
            skipped.append(Unhandled(record, f"cannot tell which plugin class needs `{member}`: add it by hand"))
            continue
        base_module, base_name = _base_location(record)
        fact = class_member(ctx.new_tree, base_module, base_name, member)
        where = f"{base_module}.{base_name}.{member}"
        if record.family is DriftFamily.NEW_ATTRIBUTE:
            default = record.detail.get("default")
            if default is None and fact and fact[1] is not None and _literal(fact[1]):
                default = fact[1]
            default = default if isinstance(default, str) and _literal(default) else "None"
            code = (
                f"# porter: {ctx.upstream} {ctx.target} reads `{member}` on every {base_name} ({where}).\n"
                f"# Default below mirrors the upstream default ({default}); REVIEW it for NPU correctness.\n"
                f"{member} = {default}\n"
            )
            rationale.append(
                f"`{cls}` gains `{member} = {default}`: {ctx.upstream} {ctx.target} requires it on `{base_name}` "
                "subclasses; the default mirrors upstream and is flagged for review."
            )
        else:
            params = fact[2] if fact and fact[0] == "method" else ()
            signature = _signature_text(params) or "self, *args, **kwargs"
            code = (
                f"# porter: {ctx.upstream} {ctx.target} requires `{member}` on {base_name} subclasses ({where}).\n"
                "# REVIEW: no NPU implementation exists yet; this default fails loudly instead of silently skipping.\n"
                f"def {member}({signature}):\n"
                f"    raise NotImplementedError(\"{cls}.{member}: NPU implementation pending (added by porter, review)\")\n"
            )
            rationale.append(
                f"`{cls}` gains `{member}()` with the upstream signature: {ctx.upstream} {ctx.target} declares it "
                f"abstract / NotImplementedError on `{base_name}`; the body raises until someone writes the NPU version."
            )
        adds.append(MemberAdd(path, cls, member, code))
        review.append(record.key)
        expected = [p.name for p in fact[2]] if fact and fact[0] == "method" and _signature_text(fact[2]) else None
        required.append((path, cls, member, expected))
        if record not in kept:
            kept.append(record)
    if not adds:
        return None, skipped
    stem = Path(path).stem
    test_path = f"{ctx.convention.test_dir}/test_members_{stem}.py"
    counter = 2
    while test_path in taken:
        test_path = f"{ctx.convention.test_dir}/test_members_{stem}_{counter}.py"
        counter += 1
    taken.add(test_path)
    test = render_python(
        "test_members.py.j2", **ctx.template_vars(), test_path=test_path,
        depth=len(Path(test_path).parts) - 1, required=required,
    )
    families = {r.family for r in kept}
    return ShimGroup(
        name=f"members/{stem}",
        family=families.pop() if len(families) == 1 else DriftFamily.NEW_ATTRIBUTE,
        strategy="member_default",
        records=tuple(kept),
        subject=f"{path}: add {_count(adds, 'member')} {ctx.upstream} {ctx.target} requires (review defaults)",
        rationale=tuple(rationale),
        files=(NewFile(test_path, test, "test"),),
        member_adds=tuple(adds),
        review=tuple(dict.fromkeys(review)),
    ), skipped


def _signature_text(params) -> str:
    out, star = [], False
    for p in params:
        # Upstream defaults may name things the plugin does not import: keep literals only.
        default = (f"={p.default}" if _literal(p.default) else "=None") if p.has_default else ""
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


__all__ = ["ShimContext", "plan_shims"]
