"""F3 signature changed at a call: an adapter that inspects the upstream signature once and maps the
keywords the plugin passes (renames only; anything else is a human's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from porter.shims.lookup import Definition
from porter.shims.model import ShimGroup, Unhandled
from porter.shims.strategies.common import (
    ShimContext, add_source, count, import_moves, import_path, module_file_name,
    render_pair, tops,
)
from porter.upgrade.models import DriftFamily, DriftRecord


def changes_of(record: DriftRecord) -> list[dict[str, Any]]:
    """The per-use change details of a signature record (one, or several merged under `changes`)."""
    changes = record.detail.get("changes")
    return [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else [record.detail]


def signature_unhandled(record: DriftRecord, ctx: ShimContext) -> str:
    """Why a signature finding cannot get a call adapter ("" when it can)."""
    kinds = {str(c.get("change") or "") for c in changes_of(record)}
    if any("override" in k for k in kinds):
        return ("the plugin overrides a method whose upstream signature changed: write guarded definitions "
                "for both signatures (adaptation pattern 13)")
    if "positional_removed" in kinds:
        return "the call passes more positional arguments than the target accepts: reorder the call by hand"
    imp_module, imp_name = import_path(record)
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
    for change in changes_of(record):
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


def plan_signature(module: str, records: list[DriftRecord], ctx: ShimContext, taken: set[str]) -> tuple[ShimGroup | None, list[Unhandled]]:
    adaptable, skipped = [], []
    for record in records:
        imp_module, name = import_path(record)
        target = record.new_location
        mod, attr = (target.module, target.qualname) if target and target.qualname else (imp_module, name)
        renamed, dropped, added = _signature_delta(record, ctx.old_tree.find(imp_module, name), ctx.new_tree.find(mod, attr))
        if renamed and not dropped and not added:
            adaptable.append(record)
        elif dropped:  # dropping what the plugin passes would change behaviour silently
            skipped.append(Unhandled(record, "the target no longer accepts a parameter the call passes and has no similar "
                                             "one to map it to: rework the call",
                                     "drops " + ", ".join(f"`{d}`" for d in dropped)))
        else:  # nothing an adapter can map (a new required or shifted positional parameter)
            needed = ", ".join(f"`{a}`" for a in added) or "a changed parameter"
            skipped.append(Unhandled(record, "the call must now pass a new required parameter: only the caller knows "
                                             "the value; edit the call", f"needs {needed}"))
    if not adaptable:
        return None, skipped
    records = adaptable
    shim_path = module_file_name(module, "_signatures", ctx, taken)
    shim_module = ctx.convention.module_of(shim_path)
    entries, rationale, todo, review = [], [], [], []
    layouts: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    calls: dict[str, dict[str, int]] = {}
    expected: dict[str, dict[str, dict[str, int]]] = {"baseline": {}, "target": {}}
    for record in records:
        imp_module, name = import_path(record)
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
        add_source(layouts["baseline"], imp_module, _stub_function(name, old_def, [*renamed, *dropped]))
        add_source(layouts["target"], mod, _stub_function(attr, new_def, list(renamed.values())))
        call = {old: index + 1 for index, old in enumerate([*renamed, *dropped])}
        calls[name] = call
        expected["baseline"][name] = dict(call)
        expected["target"][name] = {renamed[k]: v for k, v in call.items() if k in renamed}
        if added:
            todo.append(Unhandled(record, "the call must now pass a new required parameter: only the caller knows "
                                          "the value; edit the call" + (f" (the adapter in `{shim_path}` maps the rest)"
                                                                       if renamed or dropped else ""),
                                  "needs " + ", ".join(f"`{a}`" for a in added)))
        else:
            if dropped:
                review.append(record.key)
            rationale.append(
                f"`{record.symbol}` {summary or 'changed its signature'} in {ctx.upstream} {ctx.target}: the adapter in "
                f"`{shim_path}` inspects the signature once and maps the plugin's keywords"
                + ("; dropping a keyword changes behaviour, review it." if dropped else ".")
            )
    shim, test = render_pair(
        ctx, "signature.py.j2", shim_path, {"entries": entries},
        {"strategy": "signature_adapter", "layouts": layouts, "tops": tops(layouts), "calls": calls,
         "expected": expected, "adapted": {"baseline": False, "target": True}},
    )
    return ShimGroup(
        name=f"compat/{Path(shim_path).stem}",
        family=DriftFamily.SIGNATURE,
        strategy="signature_adapter",
        records=tuple(records),
        subject=f"compat: call adapters for {count(records, 'changed signature')} in {module}",
        rationale=tuple(rationale),
        files=(shim, test),
        import_moves=import_moves(records, shim_module, ctx),
        todo=tuple(todo),
        review=tuple(review),
    ), skipped
