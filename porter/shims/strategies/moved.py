"""F2 moved / F2r renamed: a lazy import fallback module and the plugin's import lines redirected to it."""

from __future__ import annotations

import ast
from pathlib import Path

from porter.shims.lookup import class_member
from porter.shims.model import ShimGroup
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


def plan_moved(module: str, records: list[DriftRecord], ctx: ShimContext, taken: set[str]) -> ShimGroup:
    shim_path = module_file_name(module, "", ctx, taken)
    shim_module = ctx.convention.module_of(shim_path)
    entries, rationale, needs_human = [], [], []
    layouts: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    expected: dict[str, dict[str, str]] = {"baseline": {}, "target": {}}
    for record in records:
        imp_module, imp_name = import_path(record)
        new = record.new_location
        assert new is not None
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
        needs_human=tuple(needs_human),
    )
