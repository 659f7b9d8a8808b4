"""Plugin-to-plugin inheritance: a plugin class whose base is another plugin class that (directly or
further up, across modules) subclasses an upstream class is checked against that upstream class.

usage.py records one ClassFact per top-level plugin class (its bases, split into upstream and plugin
ones, and the members it defines). `with_inherited` follows each class's plugin bases up to the
upstream classes they reach and adds a `subclass` use of each such upstream class at the derived
class, carrying the derived class's *own* methods (its overrides are checked against the upstream
signatures: upstream calls reach them through the upstream interface) and the members the
intermediate plugin classes define (`inherited`: they satisfy new abstract methods and attributes,
and a method only an intermediate class defines is checked there, once). Such a use says `via`
(the intermediate classes); drift.py leaves the member-completeness checks (new abstract methods,
RPC methods) to the class that subclasses the upstream class directly, which lacks the same names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from porter.upgrade.guards import Condition
from porter.upgrade.models import Site

if TYPE_CHECKING:
    from porter.upgrade.usage import FileUsage


@dataclass(frozen=True)
class ClassFact:
    """One top-level plugin class as the inheritance pass needs it."""

    dotted: str  # module.Name
    site: Site
    conditions: tuple[Condition, ...]
    upstream_bases: tuple[str, ...]  # dotted upstream classes among its bases
    plugin_bases: tuple[str, ...]  # dotted plugin classes among its bases (as imported: may be a re-export)
    members: tuple[str, ...]  # methods it defines and attributes it sets
    # for a class with plugin bases: what a `subclass` use carries (methods, bodies, attrs, defines_init, ...)
    detail: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def name(self) -> str:
        return self.dotted.rsplit(".", 1)[-1]


def _lookup(facts: dict[str, ClassFact], by_name: dict[str, list[ClassFact]], dotted: str) -> ClassFact | None:
    """The class an imported plugin name denotes: exact, else the one class of that name defined in
    the imported package or below it (`from pkg.attention import X` re-exporting pkg.attention.v1.X)."""
    found = facts.get(dotted)
    if found is not None:
        return found
    package, _, name = dotted.rpartition(".")
    candidates = [f for f in by_name.get(name, ()) if f.dotted.startswith(package + ".")]
    return candidates[0] if len(candidates) == 1 else None


def _ancestors(fact: ClassFact, facts: dict[str, ClassFact], by_name: dict[str, list[ClassFact]]) -> list[ClassFact]:
    """The plugin classes above `fact`, nearest first (breadth first, each once, cycles cut)."""
    out: list[ClassFact] = []
    seen = {fact.dotted}
    queue = list(fact.plugin_bases)
    while queue:
        parent = _lookup(facts, by_name, queue.pop(0))
        if parent is None or parent.dotted in seen:
            continue
        seen.add(parent.dotted)
        out.append(parent)
        queue.extend(parent.plugin_bases)
    return out


def with_inherited(files: list["FileUsage"]) -> list["FileUsage"]:
    """The files with a `subclass` use added per (plugin class, upstream class reached only through
    its plugin bases), and the members of the plugin bases added as `inherited` to the class's direct
    upstream subclass uses (`class D(PluginBase, Upstream)`)."""
    from porter.upgrade.usage import Use

    facts = {f.dotted: f for usage in files for f in usage.class_facts}
    if not any(f.plugin_bases for f in facts.values()):
        return files
    by_name: dict[str, list[ClassFact]] = {}
    for f in facts.values():
        by_name.setdefault(f.name, []).append(f)
    out: list[FileUsage] = []
    for usage in files:
        derived = [f for f in usage.class_facts if f.plugin_bases]
        if not derived:
            out.append(usage)
            continue
        uses = list(usage.uses)
        for fact in derived:
            chain = _ancestors(fact, facts, by_name)
            if not chain:
                continue
            own = set(fact.members)
            inherited = sorted({m for parent in chain for m in parent.members} - own)
            # the class's direct upstream bases: their uses learn what the plugin bases define
            for i, use in enumerate(uses):
                if use.kind == "subclass" and use.site.line == fact.site.line and use.detail.get("cls") == fact.name:
                    uses[i] = replace(use, detail={**use.detail, "inherited": inherited})
            reached: set[str] = set(fact.upstream_bases)
            for parent in chain:
                for base in parent.upstream_bases:
                    if base in reached:
                        continue
                    reached.add(base)
                    # via: the plugin class that subclasses `base` itself (it is checked there too)
                    uses.append(Use("subclass", base, fact.site, fact.conditions,
                                    {**fact.detail, "cls": fact.name, "inherited": inherited, "via": parent.dotted}))
        out.append(replace(usage, uses=uses))
    return out
