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

from collections import defaultdict
from typing import Any, Iterable

from porter.shims.model import ParamAdd, ShimGroup, ShimPlan, Unhandled
from porter.shims.strategies.common import ShimContext, import_path, imported_somewhere, is_member
from porter.shims.strategies.members import plan_members, subclass_site
from porter.shims.strategies.moved import plan_moved
from porter.shims.strategies.overrides import is_override, override_fixes, plan_overrides
from porter.shims.strategies.removed import plan_removed
from porter.shims.strategies.signature import plan_signature, signature_unhandled
from porter.upgrade.models import DriftFamily, DriftRecord, Severity


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
        elif family in (DriftFamily.MOVED, DriftFamily.RENAMED, DriftFamily.REMOVED) and is_member(record, ctx):
            unhandled.append(Unhandled(record, "a class member moved or went away: adapt the attribute uses by hand"))
        elif family in (DriftFamily.MOVED, DriftFamily.RENAMED, DriftFamily.REMOVED) and not imported_somewhere(record):
            unhandled.append(Unhandled(record, "used through an attribute chain (`module.name`), not imported by name: "
                                               "adapt those uses by hand"))
        elif family in (DriftFamily.MOVED, DriftFamily.RENAMED):
            by_kind[("moved", import_path(record)[0])].append(record)
        elif family is DriftFamily.SIGNATURE and is_override(record):
            fixes, left = override_fixes(record, ctx)
            if left is not None:
                unhandled.append(left)
            for path, fix, expected in fixes:
                overrides_by_path[path].append((record, fix, expected))
        elif family is DriftFamily.SIGNATURE:
            reason = signature_unhandled(record, ctx)
            if reason:
                unhandled.append(Unhandled(record, reason))
            else:
                by_kind[("signature", import_path(record)[0])].append(record)
        elif family is DriftFamily.REMOVED:
            by_kind[("removed", import_path(record)[0])].append(record)
        elif family in (DriftFamily.NEW_ATTRIBUTE, DriftFamily.NEW_METHOD):
            # One record can name several plugin subclasses (one site each): each gets the member.
            for site in record.sites or (None,):
                members_by_path[site.path if site else subclass_site(record)[0]].append((record, site))
        else:
            unhandled.append(Unhandled(record, _UNHANDLED_REASON.get(family, "no automatic strategy for this family")))

    taken = set(ctx.existing)
    groups: list[ShimGroup] = []
    for (kind, key), items in sorted(by_kind.items()):
        items = sorted(items, key=lambda r: r.symbol)
        if kind == "moved":
            groups.append(plan_moved(key, items, ctx, taken))
        elif kind == "signature":
            group, skipped = plan_signature(key, items, ctx, taken)
            unhandled.extend(skipped)
            if group is not None:
                groups.append(group)
        elif kind == "removed":
            groups.append(plan_removed(key, items, ctx, taken))
    for path, fixes in sorted(overrides_by_path.items()):
        groups.append(plan_overrides(path, fixes, ctx, taken))
    for path, pairs in sorted(members_by_path.items()):
        group, skipped = plan_members(path, pairs, ctx, taken)
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


__all__ = ["ShimContext", "import_path", "plan_shims"]
