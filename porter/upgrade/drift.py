"""Turn the plugin's uses into DriftRecords: what breaks at the target, and where things went.

The analysis is differential where it can be: a use is a finding when it works at the baseline
and not at the target (missing name, keyword no longer accepted, new abstract method ...). With
no baseline, existence checks still run against the target, and the rest is reported as risky.
Uses under a dead guard (or whose failure an `except ImportError` fallback absorbs) become notes.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from porter.upgrade.callers import (CallShape, CallSites, binds, bound, call_shapes, call_shapes_many, fits_base_calls, narrower,
                                    start_call_shapes_many)
from porter.upgrade.deprecations import deprecated_homes
from porter.upgrade.guards import GuardConventions, TargetVersions, combine
from porter.upgrade.lanes import GuardVerdict, Lanes, guard_verdicts, innermost_version_block, lane_of
from porter.upgrade.index import (KNOWN_OUTSIDE_BASES, PLAIN_BASES, Definition, Resolution, Signature, TreeIndex,
                                  _annotated, dotted_name, prefetch_reach, qualify, walk)
from porter.upgrade.models import (
    Candidate,
    DriftFamily,
    DriftRecord,
    Guard,
    GuardKind,
    Location,
    Severity,
    Site,
)
from porter.upgrade.inherit import with_inherited
from porter.upgrade.namesakes import interface_break, method_signatures, start_method_signatures
from porter.upgrade.usage import FACTORY, PLUGIN, FileUsage, Use, resolve_imported_blocks

STRATEGIES = {
    DriftFamily.REMOVED: "todo_stub",
    DriftFamily.MOVED: "lazy_import_fallback",
    DriftFamily.RENAMED: "alias_import",
    DriftFamily.SIGNATURE: "signature_adapter",
    DriftFamily.RETURN: "return_adapter",
    DriftFamily.NEW_ATTRIBUTE: "add_attribute",
    DriftFamily.NEW_METHOD: "add_method",
    DriftFamily.BASE_CHANGED: "review_subclass",
    DriftFamily.MONKEYPATCH: "retarget_patch",
}
_RPC_CALL = re.compile(rb"collective_rpc\(\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")  # a method every worker runs
RENAME_THRESHOLD = 0.6
COPY_THRESHOLD = 0.85  # body similarity above which a plugin function counts as a copy of upstream's
RENAME_NAME_ONLY_THRESHOLD = 0.75
MAX_CANDIDATES = 5
IMPLICITLY_CALLED = frozenset({"forward", "__call__"})  # reached through `module(...)`: calls by name are other classes'
MAX_CALLER_FILES = 25  # a method called in more files than this is too common to tell which calls reach an override


_SERVED_BY_GETATTR = "served by module __getattr__"  # index.py's reason for a name a module __getattr__ lists
_SELF_CALL = re.compile(r"\bself\.(\w+)\(")
_HOOK_CALL = re.compile(r"\b(?:self|cls)\.(\w+)\(")  # a method called on the object or its class (a hook)
_ATTR_CALL = re.compile(r"\.(\w+)\(")  # a method called on any receiver
_SELF_STORE = re.compile(r"^\s*self\.(\w+)\s*(?::[^=\n]+)?=(?!=)\s*(.*)$", re.M)  # `self.x = v`, `self.x: T = v`: (x, v)
# `super(...).<name>(`, tried at every position (a lookahead: a match starting inside another is found
# too), the name as the whole word there: one compiled pattern for every method instead of one per name
_SUPER_CALL = re.compile(r"(?=\bsuper\s*\([^()]*\)\s*\.\s*(\w+)\s*\()")


def calls_super(method: str, body: str) -> bool:
    """Whether `body` calls `super(...).<method>(...)` (re.search of the pattern with the name escaped in,
    for an ASCII identifier answered by _SUPER_CALL: a name is followed by a non-word character there)."""
    if not (method.isascii() and method.isidentifier()):
        return re.search(r"\bsuper\s*\([^()]*\)\s*\.\s*" + re.escape(method) + r"\s*\(", body) is not None
    return "super" in body and any(m.group(1) == method for m in _SUPER_CALL.finditer(body))


def _store_value(body: str, store: re.Match[str]) -> str:
    """The whole right-hand side of a `self.x = ...` match, across lines while brackets are open."""
    end, depth = store.start(2), 0
    while end < len(body):
        char = body[end]
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "\n" and depth <= 0:
            break
        end += 1
    return body[store.start(2):end]


def _text_similarity(a: str, b: str) -> float:
    """rapidfuzz's ratio as a fraction (0-1). Imported on first use: a run answered from the result
    cache never computes drift, and the import costs more than the cached answer."""
    from rapidfuzz import fuzz

    return fuzz.ratio(a, b) / 100


@dataclass
class Finding:
    """A problem of one use, before sites are merged into a DriftRecord."""

    family: DriftFamily
    symbol: str
    old_location: Location
    severity: Severity = Severity.BREAKING
    message: str = ""
    candidates: tuple[Candidate, ...] = ()
    evidence: tuple[str, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    subject: str = ""  # distinguishes findings on one symbol (a keyword, a method)


@dataclass
class Verdict:
    """Does an import of the plugin resolve at the target? (for the griffe agreement check)"""

    symbol: str
    status: str  # found | missing | unknown | external
    module: str
    name: str


@dataclass
class DriftResult:
    records: list[DriftRecord]
    notes: list[DriftRecord]
    verdicts: list[Verdict]
    unresolved: list[str]  # uses missing at the baseline too (index gap or other-version code)
    dead_guards: list[GuardVerdict] = field(default_factory=list)  # every version guard with its verdict at the target
    dead_modules: dict[str, str] = field(default_factory=dict)  # plugin module -> why it is never imported at the target
    copies: list[DriftRecord] = field(default_factory=list)  # plugin bodies copied from upstream whose original changed


_BREAKS_AT_TARGET = "breaks at {target}"
_RETARGET = "the dead branch is the one that resolves at {target}: retarget the guard to {target}"
_COLLAPSE = "dead at {target}: collapse"


class DriftAnalyzer:
    def __init__(
        self,
        target: TreeIndex,
        baseline: TreeIndex | None,
        conventions: GuardConventions,
        target_versions: TargetVersions,
        stage: Callable[[str, int | None], Any] | None = None,
        lanes: Lanes | None = None,
    ):
        self.lanes = lanes
        self.stage = stage  # stage(description, total) -> context manager yielding advance(n): progress bars
        self.target = target
        self.baseline = baseline
        self.conventions = conventions
        self.versions = target_versions
        self._moves: dict[tuple[str, str], tuple[Candidate, ...]] = {}

    # ------------------------------------------------------------------ entry point

    def run(self, files: Iterable[FileUsage]) -> DriftResult:
        files = with_inherited(list(files))  # plugin classes that reach upstream through plugin bases
        self._start_passes(files)
        self._prefetch(files)
        self._start_namesakes(files)
        self._search_new_homes(files)
        # A call to a function the plugin replaces runs the plugin's replacement, not upstream's.
        self._patched = {u.symbol for f in files for u in f.uses if u.kind in ("monkeypatch", "patch")}
        self._plugin_types = {cls: attrs for f in files for cls, attrs in f.class_types.items()}
        # method name -> `PluginCls.method` bodies that call `<anything>.name(...)`, over the plugin's subclasses
        # of upstream classes (a runner calling `layer.forward_impl(...)` keeps the layer's override alive)
        self._plugin_calls: dict[str, set[str]] = defaultdict(set)
        for f in files:
            for u in f.uses:
                if u.kind == "subclass":
                    for method, body in u.detail.get("bodies", {}).items():
                        for called in _ATTR_CALL.findall(body):
                            if called != method:
                                self._plugin_calls[called].add(f"{u.detail.get('cls', '?')}.{method}")
        # Plugin classes upstream builds itself: CustomOp OOT registrations and classes installed over upstream ones.
        self._installed = {str(u.detail["registers"]) for f in files for u in f.uses if u.detail.get("registers")} | {
            str(u.detail.get("replacement", "")).rsplit(".", 1)[-1] for f in files for u in f.uses
            if u.kind in ("monkeypatch", "patch") and u.detail.get("replacement")}
        # Plugin classes every mention of which builds an instance into `self.<attr>` of a plugin class
        # (`self.rejection_sampler = AscendRejectionSampler()`): name -> [(holder, attr, holder's bases)]
        mentions = Counter(name for f in files for name, _ in f.class_refs)
        stores: dict[str, list[tuple[str, str, tuple[str, ...]]]] = defaultdict(list)
        for f in files:
            for cls, holder, attr, bases in f.class_stores:
                stores[cls].append((holder, attr, bases))
        self._held_only = {cls: held for cls, held in stores.items() if mentions[cls] == len(held)}
        self._held_reach: dict[str, bool] = {}
        self._bodies: dict[tuple[int, str], list[str]] = {}
        self._factories: dict[str, str | None] = {}
        self._narrow_overrides: list[tuple[Use, str, str, Signature, Signature, Location]] = []
        self._module_by_path: dict[str, str] | None = None  # target file (relative) -> module, built when asked
        self._paths_of: dict[int, dict[str, str]] = {}  # id(index) -> its file (relative) -> module, built when asked
        self._untyped_calls: list[tuple[Use, str, str]] = []  # (use, factory, method): `fn().m(...)`, fn's class unknown
        self._override_sigs: dict[tuple[str, str], Signature] = {}  # (plugin class, method) -> bound override
        dead_modules = self._dead_modules(files)
        dead_classes = self._dead_classes(files, dead_modules)
        per_use: list[tuple[Use, Guard, list[Finding], bool]] = []
        self._use_lane: dict[int, tuple[str, Any]] = {}
        verdicts: dict[str, Verdict] = {}
        unresolved: set[str] = set()
        # The subclass checks first (they read and write nothing the other kinds' checks touch: no
        # verdict, no unresolved name, no per-file state), so the call-shape searches their findings
        # lead to run in the pool while the parent checks the rest, instead of after every check.
        early = {id(use): self.check(use, verdicts, unresolved) for usage in files for use in usage.uses
                 if use.kind == "subclass"}
        self._start_call_searches([(use, None, early[id(use)][0], False) for usage in files for use in usage.uses
                                   if id(use) in early])
        for usage in files:
            evaluated: list[tuple[Use, Guard, list[Finding], bool]] = []
            self._imported = {u.symbol for u in usage.uses if u.kind in ("import", "module")}
            dead_file = dead_modules.get(usage.module)
            # One file's uses share a few condition chains (a guarded block holds many uses): within the
            # file (same aliases) a chain's Guard is the same each time, so it is worked out once.
            guards: dict[tuple, Guard] = {}
            for use in usage.uses:
                guard = guards.get(use.conditions)
                if guard is None:
                    guard = guards[use.conditions] = combine(use.conditions, self.conventions, self.versions, self._hasattr,
                                                             usage.aliases)
                if dead_file and guard.live:
                    guard = Guard(GuardKind.VERSION, dead_file, False)
                elif use.kind == "subclass" and guard.live and not use.detail.get("decorated") \
                        and use.detail.get("cls") in dead_classes:
                    guard = Guard(GuardKind.VERSION, dead_classes[use.detail["cls"]], False)
                lane = lane_of(use.conditions, self.conventions, self.lanes, usage.aliases) if self.lanes else "both"
                self._use_lane[id(use)] = (lane, innermost_version_block(use.conditions, self.conventions))
                findings, broken = early.pop(id(use)) if id(use) in early else self.check(use, verdicts, unresolved)
                findings = [self._target_absolute(f, lane, guard) for f in findings]
                evaluated.append((use, guard, findings, broken))
            broken_tries = {c.try_id for use, _, _, broken in evaluated if broken for c in use.conditions if c.kind == "try"}
            for use, guard, findings, broken in evaluated:
                guard = self._exception_guard(use, guard, broken_tries)
                per_use.append((use, guard, findings, broken))
        per_use = self._named_elsewhere(per_use, files)
        per_use = self._drop_uncalled_optional(per_use)
        per_use = self._unreached_overrides(per_use)
        per_use = self._new_call_shapes(per_use)
        per_use = self._namesake_calls(per_use)
        guards = self._guard_verdicts(files, per_use, dead_modules)
        records, notes = self._merge(per_use, guards)
        # A copied body whose upstream original changed breaks nothing by itself: a sync hint, kept apart.
        copies = [r for r in records + notes if r.detail.get("change") == "copied_body_changed"]
        records = [r for r in records if r.detail.get("change") != "copied_body_changed"]
        notes = [r for r in notes if r.detail.get("change") != "copied_body_changed"]
        return DriftResult(records, notes, sorted(verdicts.values(), key=lambda v: v.symbol), sorted(unresolved),
                           guards, dead_modules, copies)

    # ------------------------------------------------------------------ lanes and guards

    def _start_namesakes(self, files: list[FileUsage]) -> None:
        """Start the search for the method namesakes _namesake_calls may ask for, in the run's pool once
        the parse is done: the workers read both trees while the parent runs the checks (on a cold run
        the pool is idle then), instead of the parent reading them afterwards. The names: the method of
        every bound `fn().m(...)` call, a superset of the calls check() leaves untyped (each name's
        signatures do not depend on which other names are searched with it)."""
        self._namesakes: tuple[frozenset[str], Any, Any] | None = None
        if self.baseline is None or self.target.pool is None:
            return
        names = frozenset(parts[-1] for f in files for u in f.uses
                          if u.kind == "call" and u.symbol.startswith(FACTORY) and u.detail.get("bound")
                          and len(parts := u.symbol[len(FACTORY):].split(".")) > 1 and not parts[-1].startswith("__"))
        if names:
            self._namesakes = (names, start_method_signatures(self.target, names), start_method_signatures(self.baseline, names))

    def _start_passes(self, files: list[FileUsage]) -> None:
        """Start the passes over the trees' text that the checks will ask for in the run's workers,
        so they run while the parent plans the parse: the search for new homes, and the RPC names
        where the plugin subclasses a worker (a guess that only decides when the pass runs)."""
        rpc = [_RPC_CALL] if self.baseline is not None and any(
            u.kind == "subclass" and "Worker" in u.symbol for f in files for u in f.uses) else []
        self.target.start_definition_search(also=rpc)
        if rpc:
            self.baseline.start_passes(rpc)

    def _target_absolute(self, finding: Finding, lane: str, guard: Guard) -> Finding:
        """Main-lane code live at the target is checked against the target itself: a name missing
        there breaks it, even when the baseline (the old release) lacked it too."""
        if finding.detail.get("at_both") and lane == "main" and guard.live and finding.severity is Severity.RISKY:
            target = self.lanes.target_label if self.lanes else "the target"
            return replace(finding, severity=Severity.BREAKING,
                           message=f"{finding.symbol} does not exist at {target}; this main-lane code runs there")
        return finding

    def _dead_modules(self, files: list[FileUsage]) -> dict[str, str]:
        """Plugin modules imported only under guards that are dead at the target (directly or through
        modules that are themselves dead): their uses never run there."""
        known = {f.module for f in files if f.module}
        importers: dict[str, list[tuple[str, bool, str]]] = defaultdict(list)
        for usage in files:
            for module, conditions in usage.internal_imports:
                guard = combine(conditions, self.conventions, self.versions, self._hasattr, usage.aliases)
                parts = module.split(".")
                for i in range(1, len(parts) + 1):  # importing a.b.c imports the packages a and a.b too
                    name = ".".join(parts[:i])
                    if name in known and name != usage.module:
                        importers[name].append((usage.module, guard.live, guard.expression))
        dead: dict[str, str] = {}
        changed = True
        while changed:
            changed = False
            for module, sites in importers.items():
                if module in dead:
                    continue
                if all(not live or importer in dead for importer, live, _ in sites):
                    why = next((expr for _, live, expr in sites if not live), "")
                    dead[module] = (f"module {module} is imported only under dead guards ({why})" if why
                                    else f"module {module} is imported only by modules that are dead at the target")
                    changed = True
        return dead

    def _dead_classes(self, files: list[FileUsage], dead_modules: dict[str, str]) -> dict[str, str]:
        """Plugin classes every mention of which sits under a guard dead at the target (or in a dead
        module): `return Impl092` under `if vllm_version_is("0.9.2")`, a release lane's stand-in. Upstream
        never reaches their overrides there. A class never mentioned, or decorated (registered), is live."""
        lives: dict[str, list[bool]] = defaultdict(list)
        for usage in files:
            dead_file = usage.module in dead_modules
            for name, conditions in usage.class_refs:
                lives[name].append(not dead_file and combine(conditions, self.conventions, self.versions, self._hasattr,
                                                             usage.aliases).live)
        return {name: f"class {name} is used only under guards dead at the target" for name, live in lives.items()
                if live and not any(live)}

    def _guard_verdicts(self, files: list[FileUsage], per_use: list[tuple[Use, Guard, list[Finding], bool]],
                        dead_modules: dict[str, str] | None = None) -> list[GuardVerdict]:
        if self.lanes is None:
            return []
        broken: set[tuple[str, int, bool]] = set()
        for use, guard, findings, _ in per_use:
            if not findings or _absorbed(use):
                continue
            if not any(f.severity is Severity.BREAKING or f.detail.get("at_both") for f in findings):
                continue
            for cond in use.conditions:
                if cond.kind == "if" and cond.line:
                    broken.add((use.site.path, cond.line, cond.negated))
        blocks = resolve_imported_blocks([b for f in files for b in f.guard_blocks], files)
        aliases = {f.path: f.aliases for f in files}
        features = _installed_unchanged(files, per_use, dead_modules or {})
        return guard_verdicts(blocks, broken, self.conventions, self.lanes, aliases, self._hasattr, features)

    def _prefetch(self, files: list[FileUsage]) -> None:
        symbols = {use.symbol for usage in files for use in usage.uses}
        named = {use.detail.get("module") or use.symbol for usage in files for use in usage.uses}
        indexes = [index for index in (self.target, self.baseline) if index is not None]
        modules = {index.split_dotted(name)[0] for name in named for index in indexes}  # each distinct name once
        wanted = sorted(m for m in modules if m)
        # Both trees in one parallel batch, then the modules their re-exports and bases lead to.
        if self.stage is None:
            prefetch_reach(indexes, wanted, symbols)
            return
        total = sum(len([m for m in wanted if m in index.files]) for index in indexes)
        with self.stage(f"indexing {' and '.join(index.label for index in indexes)}", total) as advance:
            prefetch_reach(indexes, wanted, symbols, progress=advance)

    def _search_new_homes(self, files: list[FileUsage]) -> None:
        """One pass over the target tree for every name that went missing (a pass per name is slow)."""
        hints: dict[str, str] = {}
        for usage in files:
            for use in usage.uses:
                if use.kind == "import":
                    if self.target.resolve(use.detail["module"], use.detail["name"]).status == "missing":
                        hints.setdefault(use.detail["name"], use.detail["module"])
                elif use.kind in ("monkeypatch", "attribute"):
                    res = self.target.resolve_dotted(use.symbol)
                    if res.status == "missing" and res.name and "." not in res.name:
                        hints.setdefault(res.name, res.module)
        self._found_defs = self.target.find_definitions(hints, hints=hints) if hints else {}

    def _hasattr(self, dotted: str, attr: str) -> bool | None:
        res = self.target.resolve_dotted(f"{dotted}.{attr}")
        return {"found": True, "missing": False}.get(res.status)

    def _exception_guard(self, use: Use, guard: Guard, broken_tries: set[int]) -> Guard:
        """try-body failures are absorbed by the handler (a note); a handler runs only when its try broke."""
        for cond in use.conditions:
            if cond.kind == "handler" and cond.try_id not in broken_tries:
                return Guard(GuardKind.IMPORT_ERROR, "except ImportError fallback (not taken: the try block imports fine)", False)
        for cond in reversed(use.conditions):
            if cond.kind in ("try", "suppress") and guard.live:
                return Guard(GuardKind.IMPORT_ERROR, guard.expression, True)
        return guard

    # ------------------------------------------------------------------ per use

    def _factory_class(self, function: str) -> str | None:
        """The upstream class an upstream function's return annotation names (`-> Logger | None`)."""
        if function in self._factories:
            return self._factories[function]
        found = None
        for index in (self.baseline, self.target):
            if index is None:
                continue
            res = index.resolve_dotted(function)
            definition = res.definition
            if res.status != "found" or definition is None or definition.kind != "function" or definition.signature is None:
                continue
            returns = definition.signature.returns or ""
            names = [m for m in normalize_annotation(returns) if m != "None" and "[" not in m] if returns else []
            if len(names) != 1:
                continue
            module = res.defined_in or res.module
            cls = index.class_of(f"{module}.{names[0]}")
            if cls is None:
                ref = index.resolve(module, names[0])
                cls = index.class_of(f"{ref.defined_in}.{names[0]}") if ref.status == "found" and ref.defined_in else None
            if cls is not None:
                found = f"{cls[1]}.{cls[0].name}"
                break
        self._factories[function] = found
        return found

    def check(self, use: Use, verdicts: dict[str, Verdict], unresolved: set[str]) -> tuple[list[Finding], bool]:
        if use.symbol.startswith(FACTORY):
            # `fn().a.b`: the longest prefix that is an upstream function with a usable return annotation
            parts = use.symbol[len(FACTORY):].split(".")
            typed = next((f"{cls}.{'.'.join(parts[cut:])}" for cut in range(len(parts) - 1, 0, -1)
                          if (cls := self._factory_class(".".join(parts[:cut]))) is not None), None)
            if typed is None:
                if use.kind == "call" and use.detail.get("bound") and len(parts) > 1 and not parts[-1].startswith("__"):
                    factory = ".".join(parts[:-1])
                    res = self.target.resolve_dotted(factory)
                    if res.status == "found" and res.definition is not None and res.definition.kind == "function":
                        # an upstream-made object of unknown class: its method's namesakes decide (_namesake_calls)
                        self._untyped_calls.append((use, factory, parts[-1]))
                return [], False  # no usable return annotation: the receiver stays untyped
            use = replace(use, symbol=typed)
        if use.symbol.startswith(PLUGIN):
            typed = self._through_plugin_class(use.symbol[len(PLUGIN):])
            if typed is None:
                return [], False  # a member of the plugin's own class, or an attribute of unknown type
            use = replace(use, symbol=typed)
        if use.kind == "import":
            res = self.target.resolve(use.detail["module"], use.detail["name"])
            verdicts.setdefault(use.symbol, Verdict(use.symbol, res.status, use.detail["module"], use.detail["name"]))
            if res.status == "found" and res.definition is None and res.reason == _SERVED_BY_GETATTR:
                deprecated = self._deprecated_import(use, res)
                if deprecated is not None:
                    return [deprecated], False
            return self._existence(use, res, unresolved, strict=True)
        if use.kind == "module":
            status = "found" if self.target.has_module(use.symbol) or not self.target.is_upstream(use.symbol) else "missing"
            res = Resolution(status, use.symbol, "", reason="" if status == "found" else f"module {use.symbol} does not exist")
            verdicts.setdefault(use.symbol, Verdict(use.symbol, status, use.symbol, ""))
            return self._existence(use, res, unresolved, strict=True)
        if use.kind in ("attribute", "monkeypatch"):
            if use.detail.get("via") == "instance":
                typed = self._through_fields(use.symbol)
                if typed != use.symbol:  # reached through an annotated field: the object is what upstream stores there
                    use = replace(use, symbol=typed, detail={**use.detail, "through_field": True})
            res = self.target.resolve_dotted(use.symbol)
            found = self._existence(use, res, unresolved, strict=False)
            if not found[0] and use.detail.get("via") == "instance" and not use.detail.get("store") \
                    and res.status == "found" and res.definition is not None and res.definition.kind == "variable":
                retyped = self._field_retyped(use)
                if retyped is not None:
                    return [retyped], False
            return found
        if use.kind == "call":
            if use.detail.get("via") == "instance":
                use = replace(use, symbol=self._through_fields(use.symbol))
            if use.symbol in self._patched:
                return [], False  # the plugin replaced it: the call runs the plugin's function
            if not use.detail.get("bound") and not use.detail.get("via_super"):
                res = self.target.resolve_dotted(use.symbol)
                if res.status == "missing":  # the callee is gone: the call site is one more place to change
                    if use.symbol in self._imported:  # joins the import's finding (same symbol, same family)
                        module, _, name = use.symbol.rpartition(".")
                        as_import = replace(use, kind="import", detail={"module": module, "name": name})
                        return self._existence(as_import, self.target.resolve(module, name), unresolved, strict=True)
                    return self._existence(replace(use, kind="attribute"), res, unresolved, strict=False)
            return self._call(use), False
        if use.kind == "subclass":
            return self._subclass(use), False
        if use.kind == "patch":
            return self._patch(use), False
        return [], False

    def _deprecated_import(self, use: Use, res: Resolution) -> Finding | None:
        """An import the target still serves, but only through a module `__getattr__` that warns it is
        deprecated and names the new home, where the baseline defined the name itself: a move that
        works for now (a note with the new home, never an alarm)."""
        if self.baseline is None:
            return None
        module, name = use.detail["module"], use.detail["name"]
        base = self.baseline.resolve(module, name)
        if base.status != "found" or base.reason == _SERVED_BY_GETATTR:
            return None
        served_in = res.defined_in or res.module
        path = self.target.files.get(served_in)
        if path is None or not path.is_file():
            return None
        source = "\n".join(self._module_lines(self.target, served_in))
        for home, new_name in deprecated_homes(source, served_in, name, path.name == "__init__.py"):
            hit = self.target.resolve(home, new_name)
            if hit.status != "found" or hit.reason == _SERVED_BY_GETATTR:
                continue
            home_path = self.target.files.get(hit.defined_in or home)
            location = Location(home, new_name, str(home_path.relative_to(self.target.root))
                                if home_path is not None and home_path.is_file() else None,
                                hit.definition.line if hit.definition is not None else None)
            why = f"{served_in}.__getattr__ serves {name} with a deprecation warning and names {home}.{new_name}"
            family = DriftFamily.MOVED if new_name == name else DriftFamily.RENAMED
            return Finding(family, use.symbol, self._location(use, base), Severity.NOTE,
                           f"{use.symbol} is deprecated at the target: import it from {home}",
                           (Candidate(location, 0.95, (why,)),), (why, f"defined in {base.defined_in or module} at the baseline"),
                           detail={"change": "deprecated_alias"})
        return None

    def _through_plugin_class(self, dotted: str) -> str | None:
        """`mod.PluginCls.attr.rest` -> `UpstreamCls.rest`: the upstream class the plugin class gives
        `self.attr` (`self.block_table = MultiGroupBlockTable(...)`); None for anything else."""
        parts = dotted.split(".")
        for cut in range(len(parts) - 2, 0, -1):
            attrs = self._plugin_types.get(".".join(parts[:cut]))
            if attrs is None:
                continue
            attr, rest = parts[cut], parts[cut + 1:]
            if attr in attrs:
                return ".".join([attrs[attr], *rest])
            return None  # set by the plugin class untyped, or by its upstream base: not followed
        return None

    def _through_fields(self, dotted: str) -> str:
        """`T.a.b` where `a` is a field or property of T annotated with class A: `A.b` (followed as far as
        the annotations go, in the baseline where the plugin's code was written; in the target where it
        goes further there: main-lane code reads what the target's fields hold, `scheduled_cached_reqs`
        a `list[CachedRequestData]` at the baseline and a `CachedRequestData` at the target)."""
        typed, steps = self._follow_fields(self.baseline or self.target, dotted)
        if self.baseline is not None:
            further, more = self._follow_fields(self.target, dotted)
            if more > steps:
                typed = further
        return typed

    def _follow_fields(self, index: TreeIndex, dotted: str) -> tuple[str, int]:
        """_through_fields in one tree: the typed dotted name and how many fields it followed."""
        module, rest = index.split_dotted(dotted)
        if not module or len(rest) < 3:
            return dotted, 0
        res = index.resolve(module, rest[0])
        if res.status != "found" or res.definition is None or res.definition.kind != "class":
            return dotted, 0
        cls, where, i = res.definition, res.defined_in or res.module, 1
        while i < len(rest) - 1:
            field_cls = self._field_class(index, cls, where, rest[i])
            if field_cls is None:
                break
            cls, where = field_cls
            i += 1
        if i == 1:
            return dotted, 0
        return ".".join([where, cls.name, rest[i]]), i - 1  # later parts hang off a value whose class is unknown

    def _field_retyped(self, use: Use) -> Finding | None:
        """A typed read of an upstream class's annotated field (`req_data.new_token_ids`) whose annotation
        differs between the trees (`list[int]` -> `list[list[int]]`, spelled alike compare equal): what
        the site gets is shaped differently at the target. A hint, as for a changed return annotation: a
        note (the value's use decides whether it breaks)."""
        if self.baseline is None:
            return None
        owner, name = use.symbol.rsplit(".", 1)
        found = self.target.class_of(owner)
        if found is None:
            return None
        for klass, where in self.target.mro(*found):
            member = klass.member(name)
            if member is None:
                continue
            old_cls = self.baseline.class_of(f"{where}.{klass.name}")
            old_member = old_cls[0].member(name) if old_cls is not None else None
            if old_member is None or old_member.kind != "variable" or member.kind != "variable":
                return None
            new_text = self._field_annotation(self.target, member, where)
            old_text = self._field_annotation(self.baseline, old_member, old_cls[1])  # type: ignore[index]
            if not new_text or not old_text or normalize_annotation(new_text) == normalize_annotation(old_text):
                return None
            field = f"{where}.{klass.name}.{name}"
            return Finding(DriftFamily.RETURN, use.symbol, self._location(use, None), Severity.NOTE,
                           f"{field} is annotated {new_text} at the target (was {old_text}): check what this site does with it",
                           evidence=(f"baseline: {name}: {old_text}", f"target: {name}: {new_text}"),
                           detail={"change": "field_annotation", "field": field, "old_annotation": old_text,
                                   "new_annotation": new_text}, subject=f"field:{name}")
        return None

    def _field_annotation(self, index: TreeIndex, member: Definition, module: str) -> str | None:
        """The annotation of a class-body field (`x: T = ...`) as written on its line, None when unannotated."""
        lines = self._module_lines(index, module)
        line = (lines[member.line - 1] if 0 < member.line <= len(lines) else "").split("#", 1)[0]
        m = re.match(rf"\s*{re.escape(member.name)}\s*:\s*([^=]+?)\s*(?:=.*)?$", line)
        return m.group(1).strip() if m else None

    def _field_class(self, index: TreeIndex, cls: Definition, where: str, attr: str) -> tuple[Definition, str] | None:
        """The class of `instance.attr` for an instance of `cls`: the annotation of the first class-body
        field or property named `attr` in the ancestry, else (no such member, or a class-body field
        without a class annotation: `attr = None`) what an `__init__` of the ancestry assigns to
        `self.<attr>` (`self.attr = Cls(...)`, `self.attr: Cls = ...`)."""
        hit = next(((k.member(attr), km) for k, km in index.mro(cls, where) if k.member(attr) is not None), None)
        if hit is not None:
            typed = self._annotated_class(index, *hit)
            if typed is not None or hit[0].kind != "variable":
                return typed
        return index.attribute_class(cls, where, attr)

    def _annotated_class(self, index: TreeIndex, member: Definition, module: str) -> tuple[Definition, str] | None:
        """The class a class-body field (`x: Cls = ...`) or a property (`-> Cls`) is annotated with
        (`"Cls"`, `Cls | None`, `Optional[Cls]` unwrapped as index._annotated does for `__init__` fields)."""
        if member.kind == "property" and member.signature is not None:
            text = member.signature.returns
        elif member.kind == "variable":
            text = self._field_annotation(index, member, module)
        else:
            return None
        if not text:
            return None
        import ast as _ast

        try:
            expr = _annotated(_ast.parse(text.strip(), mode="eval").body)
        except SyntaxError:
            return None
        head = dotted_name(expr) if expr is not None else None
        if not head:
            return None
        res = index.resolve(module, head) if "." not in head else index.resolve_dotted(f"{module}.{head}")
        if res.status != "found" or res.definition is None or res.definition.kind != "class":
            return None
        return res.definition, res.defined_in or res.module

    def _existence(self, use: Use, res: Resolution, unresolved: set[str], strict: bool) -> tuple[list[Finding], bool]:
        if res.status != "missing":
            return [], False
        if not strict and res.name:
            # Report the part of the chain that is gone (`mod.Cls` for `mod.Cls.ATTR`), so it merges
            # with the import of that name instead of producing one finding per attribute.
            missing = f"{res.module}.{res.name}"
            # An assignment that installs a patch is a site to change of its own (the patched name is
            # what moved): it keeps its full target even when the module on the way is gone.
            if missing != use.symbol and use.symbol.startswith(missing + ".") and use.kind != "monkeypatch":
                if missing in getattr(self, "_imported", ()):
                    lost = self._member_lost_in_move(use.symbol, missing)
                    if lost is None:
                        return [], False  # `logger.info` after `from m import logger`: the import reports it once
                    return [lost], True
                use = replace(use, symbol=missing)
        base_res = self._baseline_resolve(use)
        if base_res is not None and base_res.status == "missing":
            unresolved.add(use.symbol)
            typed = not strict and self._typed_member_read(use, res)
            if not strict and not typed:
                return [], False
            detail: dict[str, Any] = {"at_both": True}
            if typed:
                detail["typed_member"] = use.symbol.rsplit(".", 1)[-1]  # kept only if no NEW file names it (run)
            # An import written for another release (`from m.old import X` under a guard on a release
            # older than both trees) still has a home at the target when X is defined there under its name.
            old = self._location(use, None)
            candidates = self._moved_candidates(old, None) if use.kind == "import" else ()
            return [Finding(DriftFamily.REMOVED, use.symbol, old, Severity.RISKY,
                            f"{use.symbol} is missing at the target and at the baseline ({res.reason})"
                            + (f"; defined at the target in {candidates[0].location.module}" if candidates else ""),
                            candidates,
                            evidence=(res.reason, "also missing at the baseline: code written for another version?"),
                            detail=detail)], True
        if base_res is None and not strict:
            return [], False  # attribute chains need the baseline to tell drift from dynamic attributes
        findings = [self._classify_missing(use, res, base_res)]
        return findings, True

    def _named_elsewhere(self, per_use: list, files: list[FileUsage]) -> list:
        """Drop the typed member reads missing at both trees whose member the plugin provides itself (a
        member of one of its classes, `SchedulerInterface.balance_gather` on its BalanceScheduler; a store
        through a typed chain, `self.load_config.rfork_worker = ...`) or some file of the target still
        names: a subclass may define it (`KVCacheSpec.kv_cache_specs` on `UniformTypeKVCacheSpecs`) or set
        it, so the object at run time may have it. One text pass over the target for all of them."""
        names = {f.detail["typed_member"] for _, _, findings, _ in per_use for f in findings if f.detail.get("typed_member")}
        if not names:
            return per_use
        named = {m for usage in files for fact in usage.class_facts for m in fact.members}
        named |= {u.symbol.rsplit(".", 1)[-1] for usage in files for u in usage.uses
                  if u.kind == "monkeypatch" or (u.kind == "attribute" and u.detail.get("store"))}
        names -= named
        alternation = "|".join(re.escape(n) for n in sorted(names))
        if alternation:
            pattern = re.compile(rf"\b({alternation})\b".encode())
            named |= set().union(*(found for _, _, found in self.target.matches(pattern, needles=names)))
        out = []
        for use, guard, findings, broken in per_use:
            kept = [f for f in findings if f.detail.get("typed_member") not in named]
            out.append((use, guard, kept, broken and (bool(kept) or not findings)))
        return out

    def _typed_member_read(self, use: Use, res: Resolution) -> bool:
        """A member read through an annotated upstream field (`vllm_config.parallel_config.x`: the
        object is the one upstream stores in `VllmConfig.parallel_config`) that the field's class lacks at
        both trees while its members are all known: code written for another vllm (a main commit) that
        fails wherever it runs. A receiver typed only by the plugin's own annotation (`m: AttentionMetadata`)
        is often a plugin subclass at run time, so its reads stay unchecked."""
        if use.kind != "attribute" or not use.detail.get("through_field") or use.detail.get("store"):
            return False
        owner = self.target.class_of(use.symbol.rsplit(".", 1)[0])
        return owner is not None and self.target.open_members(*owner) is None

    def _member_lost_in_move(self, symbol: str, moved: str) -> Finding | None:
        """`X.m` where the imported class X moved: the import's finding covers this site too, unless what X
        became at its new home no longer has `m` (an alias such as `Union[...]`, or a class without it).
        Then the site breaks on its own: fixing the import does not fix it."""
        if self.baseline is None:
            return None
        member = symbol[len(moved) + 1:]
        old_cls = self.baseline.class_of(moved)
        if "." in member or old_cls is None or self.baseline.class_member(*old_cls, member) is None:
            return None
        old_loc = Location(old_cls[1], old_cls[0].name)
        for candidate in self._moved_candidates(old_loc, old_cls[0])[:1]:
            home = candidate.location.dotted
            res = self.target.resolve_dotted(home)
            if res.status != "found" or res.definition is None:
                return None
            if res.definition.kind == "class":
                where = res.defined_in or res.module
                if self.target.class_member(res.definition, where, member) or self.target.open_members(res.definition, where):
                    return None  # the member is still there, or may be at run time (a base outside the tree, __getattr__)
                why = f"{home} has no member {member}"
            else:
                why = f"{home} is no longer a class (a {res.definition.kind}: an alias or a constant)"
            return Finding(DriftFamily.REMOVED, symbol, Location(old_cls[1], f"{old_cls[0].name}.{member}"),
                           Severity.BREAKING, f"{symbol}: {moved} moved to {home}, and {why}",
                           evidence=(why, f"present at the baseline in {old_cls[1]}"),
                           detail={"change": "member_lost_in_move", "moved_to": home, "member": member})
        return None

    def _baseline_resolve(self, use: Use) -> Resolution | None:
        if self.baseline is None:
            return None
        if use.kind == "import":
            return self.baseline.resolve(use.detail["module"], use.detail["name"])
        if use.kind == "module":
            ok = self.baseline.has_module(use.symbol)
            return Resolution("found" if ok else "missing", use.symbol, "")
        return self.baseline.resolve_dotted(use.symbol)

    def _location(self, use: Use, base_res: Resolution | None) -> Location:
        if base_res is not None and base_res.status == "found":
            module = base_res.defined_in or base_res.module
            definition = base_res.definition
            qualname = use.symbol[len(module) + 1:] if use.symbol.startswith(module + ".") else use.symbol.rsplit(".", 1)[-1]
            if definition is not None and module != base_res.module:
                qualname = definition.name
            path = None
            if self.baseline is not None:
                f = self.baseline.files.get(module)
                path = str(f.relative_to(self.baseline.root)) if f is not None and f.is_file() else None
            return Location(module, qualname, path, definition.line if definition else None)
        if use.kind == "module":
            return Location(use.symbol, "")
        module = use.detail.get("module") or self.target.split_dotted(use.symbol)[0] or use.symbol.rsplit(".", 1)[0]
        return Location(module, use.symbol[len(module) + 1:] if use.symbol.startswith(module + ".") else use.symbol)

    # ------------------------------------------------------------------ moved / renamed / removed

    def _classify_missing(self, use: Use, res: Resolution, base_res: Resolution | None) -> Finding:
        old = self._location(use, base_res)
        old_def = base_res.definition if base_res is not None else None
        monkeypatch = use.kind == "monkeypatch"
        # `from pkg import submodule`: the name resolved to a module (not to a lazily served attribute).
        last = use.symbol.rsplit(".", 1)[-1]
        was_module = (base_res is not None and base_res.status == "found" and base_res.definition is None
                      and self.baseline is not None and (base_res.defined_in or "").endswith("." + last)
                      and self.baseline.has_module(base_res.defined_in or ""))
        if use.kind == "module":
            candidates = self._module_candidates(use.symbol)
        elif was_module:  # `from pkg import submodule` where the submodule moved
            candidates = self._module_candidates(base_res.defined_in)  # type: ignore[union-attr, arg-type]
        elif "." in old.qualname:  # a class member
            candidates = self._member_candidates(use.symbol, old_def)
        else:
            candidates = self._moved_candidates(old, old_def)
        family = DriftFamily.REMOVED
        message = f"{use.symbol} is gone at the target ({res.reason})"
        if candidates:
            best = candidates[0]
            same_name = (best.location.qualname.rsplit(".", 1)[-1] == old.qualname.rsplit(".", 1)[-1]
                         or use.kind == "module" or was_module)
            family = DriftFamily.MOVED if same_name else DriftFamily.RENAMED
            verb = "moved to" if same_name else "renamed to"
            message = f"{use.symbol} {verb} {best.location.dotted}"
        if monkeypatch:
            family = DriftFamily.MONKEYPATCH
            message = f"monkeypatch target {use.symbol} is gone; the patch would silently do nothing" + (
                f" (new home: {candidates[0].location.dotted})" if candidates else "")
        return Finding(family, use.symbol, old, Severity.BREAKING, message, candidates,
                       (res.reason,) + (() if base_res is None else (f"present at the baseline in {old.module}",)))

    def _moved_candidates(self, old: Location, old_def: Definition | None) -> tuple[Candidate, ...]:
        key = (old.module, old.qualname)
        if key in self._moves:
            return self._moves[key]
        name = old.qualname
        found_defs = getattr(self, "_found_defs", {})
        if name not in found_defs:
            found_defs = self.target.find_definitions([name], hints={name: old.module})
        found = [(m, d) for m, d in found_defs.get(name, []) if d.conditional != "type_checking"]
        # A name defined in many modules (`logger`, `__all__`-less helpers) says little about where it went.
        defined_in = max(len(found), self.target.hit_counts.get(name, 0))
        ubiquity = 0.6 if defined_in > 5 else 1.0
        scored: list[Candidate] = []
        for module, definition in found:
            if definition.conditional == "type_checking":
                continue
            sig, shape = _similarity(old_def, definition)
            mod_sim = _text_similarity(old.module, module)
            confidence = 0.45 + 0.25 * sig + 0.15 * shape + 0.15 * mod_sim
            if old_def is not None and old_def.kind != definition.kind and {old_def.kind, definition.kind} != {"function", "property"}:
                confidence *= 0.7
            evidence = [f"same name defined in {module}"]
            if old_def is not None and old_def.signature and definition.signature:
                evidence.append(f"signature similarity {sig:.2f}: {old_def.signature.render()} vs {definition.signature.render()}")
            evidence.append(f"body shape similarity {shape:.2f}")
            if module == old.module:
                evidence.append("still defined in its old module; only the re-export went away")
            exported_from = self._public_reexport(module, name)
            if exported_from:
                evidence.append(f"re-exported from {exported_from} (shorter import path)")
                confidence += 0.02
            if ubiquity < 1:
                evidence.append(f"{defined_in} modules define this name: weak evidence")
                confidence *= ubiquity
            if module.rsplit(".", 1)[-1] == name and defined_in > 1:
                evidence.append(f"module {module} is named after it")
                confidence = confidence / ubiquity * 0.95 if ubiquity < 1 else confidence + 0.05
            platform = _platform_segment(module, old.module)
            if platform:
                evidence.append(f"platform-specific path ({platform}): less likely the home an NPU plugin wants")
                confidence *= 0.8
            path = self.target.files.get(module)
            scored.append(Candidate(Location(module, name, str(path.relative_to(self.target.root)) if path and path.is_file() else None,
                                             definition.line), min(confidence, 0.99), tuple(evidence)))
        if not scored and old_def is not None:
            scored = self._renamed_candidates(old, old_def)
        result = tuple(sorted(scored, key=lambda c: (-c.confidence, c.location.dotted))[:MAX_CANDIDATES])
        self._moves[key] = result
        return result

    def _public_reexport(self, module: str, name: str) -> str:
        """The nearest parent package that re-exports `name` from `module` at the target, if any."""
        parts = module.split(".")
        for i in range(len(parts) - 1, 0, -1):
            parent = ".".join(parts[:i])
            info = self.target.module(parent)
            if info is None or name not in info.imports:
                continue
            res = self.target.resolve(parent, name)
            if res.status == "found" and res.defined_in == module:
                return parent
        return ""

    def _renamed_candidates(self, old: Location, old_def: Definition) -> list[Candidate]:
        """New definitions of the same kind in the old module (or its package), similar in name and shape."""
        modules = [old.module]
        parent = old.module.rpartition(".")[0]
        if parent:
            modules.append(parent)
        out: list[Candidate] = []
        for module in modules:
            new_info = self.target.module(module)
            if new_info is None:
                continue
            old_info = self.baseline.module(module) if self.baseline is not None else None
            old_names = set(old_info.defs) if old_info is not None else set()
            for name, definition in new_info.defs.items():
                if name in old_names or definition.kind != old_def.kind:
                    continue
                name_sim = _text_similarity(old_def.name.lower(), name.lower())
                if old_def.kind == "variable":
                    score = name_sim  # a constant has no signature or body to compare: the name is all we have
                    if score < RENAME_NAME_ONLY_THRESHOLD:
                        continue
                else:
                    sig, shape = _similarity(old_def, definition)
                    score = 0.4 * name_sim + 0.35 * sig + 0.25 * shape
                if score >= RENAME_THRESHOLD:
                    sig, shape = _similarity(old_def, definition)
                    out.append(Candidate(Location(module, name, None, definition.line), round(score, 3), (
                        f"new in {module} at the target", f"name similarity {name_sim:.2f}",
                        f"signature similarity {sig:.2f}", f"body shape similarity {shape:.2f}")))
        return out

    def _member_candidates(self, symbol: str, old_def: Definition | None) -> tuple[Candidate, ...]:
        owner, _, attr = symbol.rpartition(".")
        target_cls = self.target.class_of(owner)
        base_cls = self.baseline.class_of(owner) if self.baseline is not None else None
        if target_cls is None or old_def is None:
            return ()
        old_members = base_cls[0].member_names if base_cls else frozenset()
        out: list[Candidate] = []
        for member in target_cls[0].members:
            if member.name in old_members or member.kind != old_def.kind:
                continue
            name_sim = _text_similarity(attr.lower(), member.name.lower())
            sig, shape = _similarity(old_def, member)
            score = name_sim if old_def.kind == "variable" else 0.4 * name_sim + 0.35 * sig + 0.25 * shape
            if old_def.kind == "variable" and score < RENAME_NAME_ONLY_THRESHOLD:
                continue
            if score >= RENAME_THRESHOLD:
                out.append(Candidate(Location(target_cls[1], f"{target_cls[0].name}.{member.name}", None, member.line),
                                     round(score, 3), (f"new member of {owner}", f"name similarity {name_sim:.2f}")))
        return tuple(sorted(out, key=lambda c: -c.confidence)[:MAX_CANDIDATES])

    def _module_candidates(self, module: str) -> tuple[Candidate, ...]:
        last = module.rsplit(".", 1)[-1]
        out = []
        for candidate in self.target.module_last_parts(last):
            sim = _text_similarity(module, candidate)
            out.append(Candidate(Location(candidate, ""), round(0.5 + 0.45 * sim, 3), (f"module with the same name: {candidate}",)))
        return tuple(sorted(out, key=lambda c: -c.confidence)[:MAX_CANDIDATES])

    # ------------------------------------------------------------------ calls (F3)

    def _callable_signature(self, index: TreeIndex | None, dotted: str, bound: bool) -> tuple[Signature | None, str]:
        if index is None:
            return None, ""
        res = index.resolve_dotted(dotted)
        if res.status != "found" or res.definition is None:
            return None, ""
        definition = res.definition
        where = res.defined_in or res.module
        if definition.kind == "class":
            generated = index.dataclass_init(definition, where)
            if generated is not None:
                return generated, "class"
            init = index.class_member(definition, where, "__init__")
            if init is None or init.signature is None:
                return None, "class"
            return init.signature.drop_first(), "class"
        if definition.kind != "function" or definition.signature is None:
            return None, ""
        sig = definition.signature
        if definition.method_kind == "staticmethod":
            return sig, "function"  # nothing is bound, through the class or an instance
        if (bound or definition.method_kind == "classmethod"
                or (sig.params and sig.params[0].name in ("self", "cls") and "." in res.name)):
            sig = sig.drop_first()
        return sig, "function"

    def _after_signature(self, index: TreeIndex | None, use: Use) -> tuple[Signature | None, str]:
        """`super(Cls, self).m(...)`: the signature of `m` in the first class after Cls in its MRO."""
        if index is None:
            return None, ""
        method = use.detail.get("method", "")
        cls_dotted = use.symbol if method == "__init__" else use.symbol.rsplit(".", 1)[0]
        found = index.class_of(cls_dotted)
        if found is None:
            return None, ""
        for klass, where in index.mro(*found)[1:]:
            member = klass.member(method)
            if member is not None:
                if member.kind != "function" or member.signature is None:
                    return None, ""
                sig = member.signature
                return (sig if member.method_kind == "staticmethod" else sig.drop_first()), \
                    "class" if method == "__init__" else "function"
        return None, ""

    def _call(self, use: Use) -> list[Finding]:
        bound = bool(use.detail.get("via_super") or use.detail.get("bound"))
        if use.detail.get("after"):
            new_sig, kind = self._after_signature(self.target, use)
            old_sig, _ = self._after_signature(self.baseline, use)
        else:
            new_sig, kind = self._callable_signature(self.target, use.symbol, bound)
            old_sig, _ = self._callable_signature(self.baseline, use.symbol, bound) if new_sig is not None else (None, "")
        if new_sig is None:
            return []
        differential = old_sig is not None
        lane = self._use_lane.get(id(use), ("both", None))[0]
        main_lane = lane == "main"
        if not differential and self.baseline is not None and not main_lane:
            return []  # the callee is new at the target: nothing to compare with
        # Main-lane code runs at the target: its calls are checked against the target itself.
        severity = Severity.BREAKING if differential or main_lane else Severity.RISKY
        label = use.symbol + (".__init__" if kind == "class" and use.detail.get("method") == "__init__" else "")
        loc = self._location(use, None)
        findings: list[Finding] = []

        def parameter_finding(change: str, param: str, sev: Severity, problem: str, subject: str) -> Finding:
            """One parameter the call gets wrong, with both signatures as the evidence."""
            return Finding(DriftFamily.SIGNATURE, use.symbol, loc, sev, f"{label}{new_sig.render()} {problem}",
                           evidence=(f"target: {new_sig.render()}",) + ((f"baseline: {old_sig.render()}",) if old_sig else ()),
                           detail={"change": change, "parameter": param,
                                   "old_signature": old_sig.render() if old_sig else None, "new_signature": new_sig.render()},
                           subject=subject)
        keywords = use.detail.get("keywords", [])
        # What the call already got wrong at the baseline is not drift, except in main-lane code, which
        # was written for the target: there the target alone decides (no comparison, no positional shift).
        ref = None if main_lane else old_sig
        for kw in keywords:
            if not new_sig.accepts_keyword(kw) and (ref is None or ref.accepts_keyword(kw)):
                findings.append(parameter_finding("keyword_removed", kw, severity, f"no longer accepts keyword '{kw}'",
                                                  f"kw:{kw}"))
        if not use.detail.get("star_args") and not use.detail.get("star_kwargs"):
            positional = use.detail.get("positional", 0)
            covered = set(keywords) | {p.name for p in new_sig.params[:positional]}
            old_missing = set(ref.required_names()) - (set(keywords) | {p.name for p in ref.params[:positional]}) if ref else set()
            for name in new_sig.required_names():
                if name not in covered and name not in old_missing:
                    findings.append(parameter_finding("new_required_parameter", name, severity,
                                                      f"requires new parameter '{name}' that the call does not pass",
                                                      f"req:{name}"))
                elif name not in covered and use.detail.get("via") == "self" and lane == "both":
                    # Target-absolute: a call live at the target that lacks a required parameter there fails
                    # there, whatever the baseline did (the baseline lacked it too: a path its CI never ran).
                    # Only `self.m(...)` into the upstream base: on the 51 dev cases calls through typed
                    # receivers, `super(C, self)`, plain functions and constructors gave 148 such sites, most
                    # of them code written for a vllm main between the releases; self-calls gave 5.
                    findings.append(parameter_finding("missing_required_parameter", name, Severity.RISKY,
                                                      f"requires parameter '{name}' that the call does not pass "
                                                      "(at the baseline too: fails when this path runs)", f"req:{name}"))
            shifted = _positional_shift(ref, new_sig, positional, keywords) if ref else None
            if shifted:
                param, duplicate = shifted
                findings.append(Finding(DriftFamily.SIGNATURE, use.symbol, loc, severity if duplicate else Severity.RISKY,
                                        f"{label}{new_sig.render()}: the call's positional arguments now bind to other parameters "
                                        f"({param} lands on a parameter {'the call also passes by keyword' if duplicate else 'of another meaning'})",
                                        evidence=(f"baseline: {old_sig.render()}", f"target: {new_sig.render()}"),
                                        detail={"change": "positional_shift", "parameter": param,
                                                "old_signature": old_sig.render(), "new_signature": new_sig.render()},
                                        subject="positional_shift"))
            capacity, old_capacity = new_sig.positional_capacity(), ref.positional_capacity() if ref else None
            if capacity is not None and positional > capacity and (ref is None or old_capacity is None or positional <= old_capacity):
                findings.append(Finding(DriftFamily.SIGNATURE, use.symbol, loc, severity,
                                        f"{label}{new_sig.render()} takes {capacity} positional arguments; the call passes {positional}",
                                        detail={"change": "positional_removed", "new_signature": new_sig.render(),
                                                "old_signature": old_sig.render() if old_sig else None}, subject="positional"))
        # A value the call site drops cannot be misused, whatever its type became.
        if (old_sig is not None and kind == "function" and old_sig.returns and new_sig.returns
                and use.detail.get("result") != "ignored"):
            old_ret, new_ret = normalize_annotation(old_sig.returns), normalize_annotation(new_sig.returns)
            if old_ret != new_ret:
                # A changed annotation breaks a site only where the value's shape no longer fits it
                # (`a, b = f()` and f now returns one value or three); elsewhere it is a hint: a note.
                result = str(use.detail.get("result", ""))
                names = int(result.split(":", 1)[1]) if result.startswith("unpack:") else None
                arity = _tuple_arity(new_sig.returns)
                misfit = names is not None and arity is not None and arity != names
                findings.append(Finding(DriftFamily.RETURN, use.symbol, loc, Severity.BREAKING if misfit else Severity.NOTE,
                                        f"{use.symbol} now returns {new_sig.returns} (was {old_sig.returns})"
                                        + (f"; the call site unpacks {names} values" if misfit else ""),
                                        evidence=(f"baseline: -> {old_sig.returns}", f"target: -> {new_sig.returns}"),
                                        detail={"change": "return_annotation", "old_returns": old_sig.returns,
                                                "new_returns": new_sig.returns}, subject="returns"))
        return findings

    # ------------------------------------------------------------------ subclasses (F3 overrides, F7, F8, F10)

    def _relocated_class(self, symbol: str) -> tuple[Definition, str] | None:
        """Where a base class that is gone under its old name lives at the target (moved or renamed)."""
        if self.baseline is None:
            return None
        base_res = self.baseline.resolve_dotted(symbol)
        if base_res.status != "found" or base_res.definition is None or base_res.definition.kind != "class":
            return None
        old = Location(base_res.defined_in or base_res.module, base_res.definition.name)
        for candidate in self._moved_candidates(old, base_res.definition):
            found = self.target.class_of(candidate.location.dotted)
            if found is not None:
                return found
        return None

    def _subclass(self, use: Use) -> list[Finding]:
        target_cls = self.target.class_of(use.symbol)
        if target_cls is None:
            # A moved or renamed base is reported by its import; its subclass is still checked at the new home.
            target_cls = self._relocated_class(use.symbol)
            if target_cls is None:
                return []
        base_cls = self.baseline.class_of(use.symbol) if self.baseline is not None else None
        plugin_cls = use.detail.get("cls", "?")
        methods: dict[str, Signature] = use.detail.get("methods", {})
        plugin_members = set(methods) | set(use.detail.get("attrs", [])) | set(use.detail.get("inherited", []))
        loc = self._location(use, None)
        findings: list[Finding] = []
        for name, plugin_sig in methods.items():
            if name.startswith("__") and name not in ("__call__", "__init__"):
                continue
            # A constructor override is called by upstream only where upstream builds the class by name
            # (or through an interface such as `impl_cls(...)`): its findings need the target's callers.
            constructor = name == "__init__"
            new_member = self.target.class_member(target_cls[0], target_cls[1], name)
            if new_member is None or new_member.signature is None:
                continue
            if new_member.signature.has_varargs and new_member.signature.has_varkw:
                continue  # a dispatcher `(self, *args, **kwargs)` (CustomOp.forward): callers' arguments bind whatever the override takes
            old_member = self.baseline.class_member(base_cls[0], base_cls[1], name) if base_cls and self.baseline else None
            if base_cls is not None and (old_member is None or old_member.signature is None):
                continue  # the plugin defined it first; upstream added a same-named method: not drift of an override
            if old_member is not None and old_member.signature is not None and old_member.signature.has_varargs \
                    and old_member.signature.has_varkw:
                # a dispatcher at the baseline (CustomOp.forward(*args, **kwargs)) that became an explicit method:
                # callers already reached the override with their own arguments; what they pass is checked per call
                continue
            if constructor and (old_member is None or not (
                    use.detail.get("registered") or plugin_cls in self._installed or new_member.is_abstract)):
                continue  # upstream never builds this class itself (only an OOT registration, a patch or an interface does)
            new_names = set(new_member.signature.names)
            old_names = set(old_member.signature.names) if old_member and old_member.signature else None
            added = sorted(new_names - old_names) if old_names is not None else sorted(new_names - set(plugin_sig.names))
            removed = sorted(old_names - new_names) if old_names is not None else []
            problems = [p for p in added if not plugin_sig.accepts_keyword(p)]
            required_removed = [] if constructor else [p for p in removed if p in plugin_sig.required_names()]
            new_required = set(new_member.signature.required_names())
            optional_only = bool(problems) and not required_removed and (constructor or not (set(problems) & new_required))
            # slots as a caller fills them: a staticmethod binds no `self` (bound() drops only self/cls)
            positions = {p.name: i for i, p in enumerate(bound(new_member.signature).params) if p.kind in ("posonly", "pos")}
            # Only constructors (of installed classes or abstract interfaces) are built by position from
            # upstream code often enough to say so without the calls; methods take keywords mostly.
            shift = (_override_shift(bound(old_member.signature), bound(new_member.signature), bound(plugin_sig))
                     if constructor and old_member is not None and old_member.signature is not None else None)
            if shift is not None:
                optional_only = False  # positional callers of the base bind the override's parameters wrongly
            elif not constructor and not problems and not required_removed and name not in IMPLICITLY_CALLED \
                    and old_member is not None and old_member.signature is not None \
                    and narrower(bound(plugin_sig), bound(new_member.signature)):
                # only where the signature comparison found nothing (one finding, one fix, per override)
                # What upstream passes may have changed although the base did not: compared call by call later.
                self._narrow_overrides.append((use, name, plugin_cls, plugin_sig, new_member.signature, loc))
            if problems or required_removed or shift:
                if optional_only:
                    self._override_sigs[(plugin_cls, name)] = bound(plugin_sig)
                severity = Severity.BREAKING if old_names is not None else Severity.RISKY
                # No call written for the baseline's method binds to the override: upstream did not reach it
                # where the plugin ran, so the plugin calls it itself and the base's drift is no break (a note).
                private = not constructor and old_member is not None and old_member.signature is not None \
                    and not fits_base_calls(bound(plugin_sig), bound(old_member.signature))
                if private:
                    severity = Severity.NOTE
                held = None if constructor or private or use.detail.get("registered") or plugin_cls in self._installed \
                    else self._held_unreached(plugin_cls)
                if held:
                    severity = Severity.NOTE
                parts = []
                if problems:
                    parts.append(f"gained parameter(s) {', '.join(problems)} that the override does not accept")
                if required_removed:
                    parts.append(f"dropped parameter(s) {', '.join(required_removed)} that the override requires")
                if shift:
                    parts.append(f"reordered its positional parameters (callers' {shift}; the override keeps the old order)")
                findings.append(Finding(DriftFamily.SIGNATURE, f"{use.symbol}.{name}", loc, severity,
                                        f"{use.symbol}.{name} {' and '.join(parts)} (override {plugin_cls}.{name}{plugin_sig.render()})"
                                        + ("; no call of the baseline's method fits the override either: only the plugin "
                                           "calls it, check its own calls" if private else "")
                                        + (f"; only the plugin builds {plugin_cls} (into {held}) and no upstream code "
                                           "reads that attribute: only the plugin calls it, check its own calls" if held else ""),
                                        evidence=(f"target: {new_member.signature.render()}",)
                                        + ((f"baseline: {old_member.signature.render()}",) if old_member and old_member.signature else ()),
                                        detail={"change": "override_mismatch", "plugin_class": plugin_cls, "method": name,
                                                "added": problems, "removed": required_removed,
                                                **({"optional_only": True, "positions": {p: positions.get(p) for p in problems},
                                                    "callee": target_cls[0].name if constructor else name,
                                                    "constructor": constructor}
                                                   if optional_only else {}),
                                                **({"positional_shift": shift} if shift else {}),
                                                **({"unreached_at_baseline": True} if private else {}),
                                                **({"held_by_plugin": held} if held else {}),
                                                "new_signature": new_member.signature.render(),
                                                "override_signature": plugin_sig.render()}, subject=f"override:{plugin_cls}.{name}"))
        if base_cls is None:
            return findings
        findings.extend(self._copied_overrides(use, base_cls, target_cls, loc))
        # F10: the upstream class's own bases changed (compared by name: a base that merely moved is the same).
        old_bases = [b.rsplit(".", 1)[-1] for b in base_cls[0].bases]
        new_bases = [b.rsplit(".", 1)[-1] for b in target_cls[0].bases]
        dropped = [b for b in old_bases if b not in new_bases]
        if dropped:  # added mixins are additive; a removed or replaced base changes behaviour
            # A new base breaks nothing by itself (what it removes is checked member by member): a note.
            findings.append(Finding(DriftFamily.BASE_CHANGED, use.symbol, loc, Severity.NOTE,
                                    f"{use.symbol} bases changed from ({', '.join(base_cls[0].bases)}) to ({', '.join(target_cls[0].bases)}); "
                                    f"{plugin_cls} inherits from it",
                                    detail={"old_bases": list(base_cls[0].bases), "new_bases": list(target_cls[0].bases),
                                            "plugin_class": plugin_cls}, subject=f"bases:{plugin_cls}"))
        # F8: abstract / NotImplementedError methods new at the target that the subclass does not define.
        new_abstract = self._abstract_methods(self.target, *target_cls)
        old_abstract = self._abstract_methods(self.baseline, *base_cls)  # type: ignore[arg-type]
        missing = sorted(set(new_abstract) - set(old_abstract) - plugin_members)
        if missing and not use.detail.get("via"):  # via a plugin base: that base lacks them too and says so
            # @abstractmethod: the subclass can no longer be instantiated. NotImplementedError: it
            # fails only when the new method is called.
            hard = [m for m in missing if new_abstract[m] == "abstract"]
            findings.append(Finding(DriftFamily.NEW_METHOD, use.symbol, loc, Severity.BREAKING if hard else Severity.RISKY,
                                    f"{use.symbol} now requires method(s) {', '.join(missing)} that {plugin_cls} does not define"
                                    + ("" if hard else " (the base raises NotImplementedError: fails when called)"),
                                    detail={"methods": missing, "plugin_class": plugin_cls,
                                            "kinds": {m: new_abstract[m] for m in missing}}, subject=f"abstract:{plugin_cls}"))
        if not use.detail.get("via"):
            findings.extend(self._rpc_methods(use, target_cls, plugin_members, loc))
        findings.extend(self._clobbered_attrs(use, base_cls, target_cls, methods, loc))
        findings.extend(self._orphaned_hooks(use, base_cls, target_cls, methods, loc))
        # F7: attributes the base's __init__ now sets, when the subclass replaces __init__ without calling it.
        if use.detail.get("defines_init") and not use.detail.get("calls_super_init"):
            new_attrs = self._init_attrs(self.target, *target_cls)
            old_attrs = self._init_attrs(self.baseline, *base_cls)  # type: ignore[arg-type]
            missing_attrs = sorted(new_attrs - old_attrs - plugin_members)
            if missing_attrs:
                # Breaking when upstream methods read the attribute; otherwise only a risk.
                read = sorted(set(missing_attrs) & self._class_reads(self.target, *target_cls))
                # Breaking when the base's own methods read them; unread, nothing fails: a note.
                findings.append(Finding(DriftFamily.NEW_ATTRIBUTE, use.symbol, loc, Severity.BREAKING if read else Severity.NOTE,
                                        f"{use.symbol}.__init__ now sets {', '.join(missing_attrs)}; {plugin_cls}.__init__ "
                                        "does not call it and does not set them"
                                        + (f" (read by upstream methods: {', '.join(read)})" if read else ""),
                                        detail={"attributes": missing_attrs, "plugin_class": plugin_cls, "read_by_upstream": read},
                                        subject=f"attrs:{plugin_cls}"))
        return findings

    # ------------------------------------------------------------------ copied bodies and installed patches

    def _module_lines(self, index: TreeIndex, module: str) -> list[str]:
        key = (id(index), module)
        if key not in self._bodies:
            path = index.files.get(module)
            try:
                text = path.read_text(encoding="utf-8", errors="replace") if path is not None and path.is_file() else ""
            except OSError:
                text = ""
            self._bodies[key] = text.splitlines()  # type: ignore[assignment]
        return self._bodies[key]  # type: ignore[return-value]

    def _definition_body(self, index: TreeIndex, module: str, definition: Definition | None) -> str | None:
        from porter.upgrade.index import body_text

        if definition is None or not definition.body_span:
            return None
        return body_text(self._module_lines(index, module), definition.body_span)

    def _member_body(self, index: TreeIndex, cls: Definition, module: str, name: str) -> str | None:
        for klass, where in index.mro(cls, module):
            member = klass.member(name)
            if member is not None:
                return self._definition_body(index, where, member)
        return None

    def _copied_finding(self, use: Use, symbol: str, plugin_body: str, old_body: str | None, new_body: str | None,
                        loc: Location, what: str) -> Finding | None:
        """A plugin body copied from upstream (similar to the baseline's) whose upstream original changed."""
        if not plugin_body or not old_body or new_body is None or old_body == new_body or len(old_body) < 80:
            return None
        similarity = _text_similarity(plugin_body, old_body)
        if similarity < COPY_THRESHOLD:
            return None
        import difflib

        diff = "\n".join(difflib.unified_diff(old_body.splitlines(), new_body.splitlines(), "baseline", "target", lineterm="", n=1))
        return Finding(DriftFamily.OTHER, symbol, loc, Severity.RISKY,
                       f"{what} copies upstream {symbol} (similarity {similarity:.2f} to the baseline body); "
                       "upstream changed that body at the target: port the change",
                       evidence=(f"body similarity {similarity:.2f}",),
                       detail={"change": "copied_body_changed", "similarity": round(similarity, 3),
                               "upstream_diff": diff[:4000]}, subject=f"copy:{what}")

    def _copied_overrides(self, use: Use, base_cls: tuple[Definition, str], target_cls: tuple[Definition, str],
                          loc: Location) -> list[Finding]:
        out: list[Finding] = []
        bodies: dict[str, str] = use.detail.get("bodies", {})
        for name, plugin_body in bodies.items():
            if name.startswith("__") and name != "__init__" or len(plugin_body) < 80:
                continue
            old_body = self._member_body(self.baseline, *base_cls, name)  # type: ignore[arg-type]
            if old_body is None or _text_similarity(plugin_body, old_body) < COPY_THRESHOLD:
                continue
            new_body = self._member_body(self.target, *target_cls, name)
            finding = self._copied_finding(use, f"{use.symbol}.{name}", plugin_body, old_body, new_body, loc,
                                           f"{use.detail.get('cls', '?')}.{name}")
            if finding is not None:
                out.append(finding)
        return out

    def _patch(self, use: Use) -> list[Finding]:
        """What the plugin installs over an upstream name: still intercepting, still fitting, still current?"""
        new = self.target.resolve_dotted(use.symbol)
        if new.status != "found":
            return []  # gone: the monkeypatch use reports it
        old = self.baseline.resolve_dotted(use.symbol) if self.baseline is not None else None
        loc = self._location(use, old)
        findings: list[Finding] = []
        module, rest = self.target.split_dotted(use.symbol)
        name = rest[0] if len(rest) == 1 else ""
        if name and new.chain and new.defined_in and new.defined_in != module and old is not None and old.status == "found" \
                and not old.chain and (old.defined_in or old.module) == module:
            findings.append(Finding(
                DriftFamily.MONKEYPATCH, use.symbol, loc, Severity.BREAKING,
                f"{use.symbol} is only an alias at the target (defined in {new.defined_in}): the patch replaces the "
                f"alias, callers that import it from {new.defined_in} are no longer intercepted",
                evidence=(f"target: {module} imports {name} from {new.defined_in}", f"baseline: defined in {module}"),
                detail={"change": "patch_alias", "defined_in": new.defined_in}, subject="alias"))
        definition = new.definition
        called = self._dispatched(self.target, use.symbol, definition)  # what callers pass to the patched name
        repl = use.detail.get("replacement_signature")
        decorators = [d.rsplit(".", 1)[-1] for d in use.detail.get("replacement_decorators", [])]
        if repl is not None and called is not None and called.kind == "function" and called.signature \
                and not decorators:
            problems = _replacement_mismatch(repl, called.signature)
            old_def = (self._dispatched(self.baseline, use.symbol, old.definition)  # type: ignore[arg-type]
                       if old is not None and old.status == "found" else None)
            old_problems = _replacement_mismatch(repl, old_def.signature) if old_def is not None and old_def.signature else None
            fresh = [p for p in problems if old_problems is None or p not in old_problems]
            # The patch rebinds an alias (`pkg.f`, defined in pkg.impl): only code that looks `f` up in `pkg`
            # calls the replacement; callers importing it from pkg.impl keep the original.
            unreached = bool(fresh) and name and new.defined_in and new.defined_in != module \
                and self._patch_unreached(module, name)
            if fresh:
                severity = Severity.BREAKING if old_problems is not None else Severity.RISKY
                findings.append(Finding(
                    DriftFamily.MONKEYPATCH, use.symbol, loc, Severity.NOTE if unreached else severity,
                    f"replacement {use.detail.get('replacement')}{repl.render()} no longer fits {use.symbol}"
                    f"{called.signature.render()}: {'; '.join(fresh)}"
                    + (f"; no upstream call looks {name} up in {module} (its callers import it from {new.defined_in}): "
                       "only the plugin's own calls reach the replacement" if unreached else ""),
                    evidence=(f"target: {called.signature.render()}",)
                    + ((f"baseline: {old_def.signature.render()}",) if old_def is not None and old_def.signature else ()),
                    detail={"change": "patch_signature", "problems": fresh, "replacement_signature": repl.render(),
                            **({"replacement_site": use.detail["replacement_site"]} if use.detail.get("replacement_site") else {}),
                            "new_signature": called.signature.render(), **({"unreached": True} if unreached else {})},
                    subject="patch_signature"))
        if use.detail.get("replacement_kind") == "class" and definition is not None and definition.kind == "class":
            bases = {b.rsplit(".", 1)[-1] for b in use.detail.get("replacement_bases", [])}
            old_def = old.definition if old is not None and old.status == "found" else None
            if definition.name not in bases and old_def is not None and old_def.kind == "class":
                new_public = {m.name for m in definition.members if not m.name.startswith("_")}
                old_public = {m.name for m in old_def.members if not m.name.startswith("_")}
                lacking = sorted(new_public - old_public - set(use.detail.get("replacement_members", [])))
                if lacking:
                    findings.append(Finding(
                        DriftFamily.MONKEYPATCH, use.symbol, loc, Severity.RISKY,
                        f"stand-in {use.detail.get('replacement')} replaces {use.symbol} without subclassing it and lacks "
                        f"its new member(s) {', '.join(lacking)}",
                        detail={"change": "stand_in", "missing": lacking}, subject="stand_in"))
        body = use.detail.get("replacement_body")
        if body and old is not None and old.status == "found" and old.definition is not None and definition is not None:
            old_body = self._definition_body(self.baseline, old.defined_in or old.module, old.definition)  # type: ignore[arg-type]
            new_body = self._definition_body(self.target, new.defined_in or new.module, definition)
            finding = self._copied_finding(use, use.symbol, body, old_body, new_body, loc,
                                           f"replacement {use.detail.get('replacement')}")
            if finding is not None:
                findings.append(finding)
        return findings

    def _patch_unreached(self, module: str, name: str) -> bool:
        """Whether no call of `name` in the target looks it up in `module` (where the plugin rebinds it):
        a plain `name(...)` in a file that imports `name` from another module or defines it itself, and
        `x.name(...)` on anything but that module (an object's method of that name), call something else.
        A file of `module` itself, or a name the file neither imports nor defines (an import inside a
        function), keep it reached."""
        sites = call_shapes(self.target, (), {name}).calls.get(name, ())
        if not sites:
            return False
        if self._module_by_path is None:
            self._module_by_path = {self.target._relpath(path): m for m, path in self.target._module_files()}
        for site in sites:
            where = self._module_by_path.get(site.path)
            info = self.target.module(where) if where else None
            if info is None or where == module:
                return False
            if site.receiver == "plain":  # `name(...)`: the name as the file binds it
                ref = info.imports.get(name)
                if ref is None:
                    if name not in info.defs:
                        return False
                    continue
                if ref.module == module and ref.name == name:
                    return False
                continue
            kind, _, text = site.receiver.partition(":")
            if kind == "name":
                ref = info.imports.get(text)
                if ref is None or (ref.name is None and ref.module == module) or f"{ref.module}.{ref.name}" == module:
                    return False
            elif kind == "expr" and text == module:
                return False  # `pkg.name(...)`; other receivers are objects: their method of that name
        return True

    @staticmethod
    def _dispatched(index: TreeIndex, dotted: str, member: Definition | None) -> Definition | None:
        """`Cls.forward_oot` that is CustomOp's `(self, *args, **kwargs)` only passes on what `forward`
        was called with: the class's concrete `forward_native` / `forward_cuda` says what that is, so a
        replacement installed over it must take those arguments."""
        sig = member.signature if member is not None else None
        if not dotted.endswith(".forward_oot") or sig is None or not (sig.has_varargs and sig.has_varkw):
            return member
        owner = index.class_of(dotted.rsplit(".", 1)[0])
        for sibling in ("forward_native", "forward_cuda") if owner is not None else ():
            other = index.class_member(owner[0], owner[1], sibling)  # type: ignore[index]
            if other is not None and other.signature is not None and not (other.signature.has_varargs and other.signature.has_varkw):
                return other
        return member

    def _optional_callees(self, per_use: list) -> tuple[frozenset[str], frozenset[str]]:
        """(methods, constructors) whose upstream callers _drop_uncalled_optional asks about."""
        pending = {(f.detail.get("callee", f.detail["method"]), bool(f.detail.get("constructor")))
                   for _, _, fs, _ in per_use for f in fs if f.detail.get("optional_only") and f.detail.get("added")}
        return frozenset(c for c, ctor in pending if not ctor), frozenset(c for c, ctor in pending if ctor)

    def _override_mismatches(self, per_use: list) -> tuple[dict[str, list[Finding]], dict[int, tuple[Signature, Signature, tuple[Definition, str], Signature | None]]]:
        """_unreached_overrides' findings by method, and per finding (override, base, base class, the
        baseline's base signature), all bound."""
        pending: dict[str, list[Finding]] = defaultdict(list)
        by_finding: dict[int, tuple[Signature, Signature, tuple[Definition, str], Signature | None]] = {}
        for use, _, findings, _ in per_use:
            for f in findings:
                method = str(f.detail.get("method", ""))
                if (f.detail.get("change") != "override_mismatch" or f.detail.get("optional_only") or method == "__init__"
                        or method in IMPLICITLY_CALLED or f.severity not in (Severity.BREAKING, Severity.RISKY)):
                    continue
                base = self.target.class_of(use.symbol) or self._relocated_class(use.symbol)
                override = use.detail.get("methods", {}).get(method)
                member = self.target.class_member(*base, method) if base is not None else None
                if base is None or override is None or member is None or member.signature is None:
                    continue
                base_cls = self.baseline.class_of(use.symbol) if self.baseline is not None else None
                old_member = self.baseline.class_member(*base_cls, method) if base_cls is not None else None  # type: ignore[union-attr]
                old_sig = bound(old_member.signature) if old_member is not None and old_member.signature is not None else None
                by_finding[id(f)] = (bound(override), bound(member.signature), base, old_sig)
                pending[method].append(f)
        return pending, by_finding

    def _start_call_searches(self, checked: list) -> None:
        """Start, in the run's pool, the call-shape searches the passes after the checks will likely
        ask for, from the subclass checks' findings (`checked`: (use, _, findings, _)): the callers of
        new optional parameters (_drop_uncalled_optional), of mismatched overrides
        (_unreached_overrides) and of narrow overrides (_new_call_shapes), all in one read of each
        tree. A pass takes the started answer only when it asks for exactly the names started (each
        request's answer depends only on its names and tree), else it searches itself."""
        self._call_searches: dict[str, tuple[Any, int, int]] = {}  # kind -> (names, first slot, slot count)
        self._call_answers: tuple[Callable[[], list[CallSites]], list[CallSites] | None] | None = None
        if self.target.pool is None:
            return
        requests: list[tuple[TreeIndex, Any, Any]] = []
        methods, constructors = self._optional_callees(checked)
        if methods or constructors:
            self._call_searches["optional"] = ((methods, constructors), len(requests), 1)
            requests.append((self.target, methods, constructors))
        trees = [index for index in (self.target, self.baseline) if index is not None]
        mismatched = frozenset(self._override_mismatches(checked)[0])
        if mismatched:
            self._call_searches["unreached"] = (mismatched, len(requests), len(trees))
            requests.extend((index, mismatched, ()) for index in trees)
        narrow = frozenset(name for _, name, *_ in self._narrow_overrides)
        if narrow and self.baseline is not None:
            self._call_searches["narrow"] = (narrow, len(requests), 2)
            requests.extend((index, narrow, ()) for index in (self.target, self.baseline))
        if requests:
            self._call_answers = (start_call_shapes_many(requests), None)

    def _started_sites(self, kind: str, names: Any) -> list[CallSites] | None:
        """The started answers (_start_call_searches) for `kind` when they were started for `names`."""
        started = getattr(self, "_call_searches", {}).get(kind)
        if started is None or started[0] != names or self._call_answers is None:
            return None
        collect, answers = self._call_answers
        if answers is None:
            answers = collect()
            self._call_answers = (collect, answers)
        return answers[started[1]: started[1] + started[2]]

    def _drop_uncalled_optional(self, per_use: list[tuple[Use, Guard, list[Finding], bool]]) -> list[tuple[Use, Guard, list[Finding], bool]]:
        """An override that lacks a parameter the base gained *with a default* breaks only when an
        upstream caller passes it: keep those findings only where the target's code does. A constructor's
        callers are the calls of the upstream class by name."""
        methods, constructors = self._optional_callees(per_use)
        if not methods and not constructors:
            return per_use
        started = self._started_sites("optional", (methods, constructors))
        sites = started[0] if started is not None else call_shapes(self.target, methods, constructors)
        out = []
        for use, guard, findings, broken in per_use:
            kept = []
            for f in findings:
                if f.detail.get("optional_only"):
                    callee = f.detail.get("callee", f.detail["method"])
                    added, positions = f.detail.get("added", []), f.detail.get("positions", {})
                    override = self._override_sigs.get((f.detail.get("plugin_class", ""), f.detail["method"]))
                    calls = [s for s in sites.shapes.get(callee, ()) if override is None or reaches(override, s, added, positions)]
                    used = [p for p in added if any(p in s.keywords or (positions.get(p) is not None and s.positional > positions[p])
                                                    for s in calls)]
                    if not used:
                        continue  # no upstream caller passes the new optional parameter(s)
                    f = replace(f, detail={**f.detail, "passed_by_upstream_callers": used})
                kept.append(f)
            out.append((use, guard, kept, broken))
        return out

    def _unreached_overrides(self, per_use: list[tuple[Use, Guard, list[Finding], bool]]) -> list[tuple[Use, Guard, list[Finding], bool]]:
        """An override that no longer fits its base (the base dropped a parameter the override requires,
        or now passes one it does not take) breaks where an upstream call reaches it: a call of the
        method that fits the base's new signature and not the override (or passes `*args`/`**kwargs`),
        whose receiver may hold the plugin's instance (typed by the calling function: `self`, an
        attribute its class's `__init__` or body annotates, an annotated parameter or local; an
        unknown receiver may), made from an upstream method that no live plugin subclass replaces.
        Where the target calls the method by name and no such call remains, nothing upstream reaches
        the override: a note (`MoE quant methods' apply`, called in ~50 files, only from the
        FusedMoE.forward_impl the plugin's own FusedMoE overrides)."""
        pending, by_finding = self._override_mismatches(per_use)
        if not pending:
            return per_use
        started = self._started_sites("unreached", frozenset(pending))
        if started is not None:
            sites, old_sites = started if self.baseline is not None else (started[0], None)
        elif self.baseline is not None:
            sites, old_sites = call_shapes_many([(self.target, set(pending), ()), (self.baseline, set(pending), ())])
        else:
            sites, old_sites = call_shapes(self.target, set(pending)), None
        overridden = self._overridden_upstream(per_use)
        out = []
        for use, guard, findings, broken in per_use:
            kept = []
            for f in findings:
                known = by_finding.get(id(f))
                calls = sites.calls.get(str(f.detail.get("method", ""))) if known else None
                if not calls:  # not called by name at the target (dispatch, a hook): left as it is
                    kept.append(f)
                    continue
                override, base_sig, base, old_sig = known  # type: ignore[misc]
                # the same receiver in the same file at the baseline: calls none of which fitted the base's
                # signature there (the plugin ran) are calls of another class's method of that name
                # (grouped by file first: only the files of calls that pass the shape test are read for their classes)
                before: dict[str, list[CallShape]] = defaultdict(list)
                for c in (old_sites.calls.get(str(f.detail["method"]), ()) if old_sites is not None and old_sig is not None else ()):
                    before[c.path].append(c)

                def other_class(c: CallShape) -> bool:
                    if not before.get(c.path):
                        return False
                    key = self._call_key(self.target, c)
                    same = [o for o in before[c.path] if self._call_key(self.baseline, o) == key]  # type: ignore[arg-type]
                    return bool(same) and not any(o.star or binds(old_sig, o.positional, o.keywords) for o in same)
                reaching = [c for c in calls
                            if (c.star or (binds(base_sig, c.positional, c.keywords) and not binds(override, c.positional, c.keywords)))
                            and not other_class(c) and self._may_hold(c, base) and not self._caller_overridden(c, overridden)]
                if reaching:
                    f = replace(f, detail={**f.detail, "reaching_calls": [f"{c.path}:{c.line}" for c in reaching[:5]]})
                else:
                    f = replace(f, severity=Severity.NOTE,
                                message=f"{f.message}; no upstream call reaches the override: of the target's "
                                        f"{len(calls)} call(s) of .{f.detail['method']}(...), none that fits the base and not the "
                                        "override has a receiver that may hold the plugin's class outside methods the plugin replaces",
                                detail={**f.detail, "unreached_by_calls": len(calls)})
                kept.append(f)
            out.append((use, guard, kept, broken))
        return out

    def _enclosing_class(self, index: TreeIndex, site: CallShape) -> tuple[Definition, str] | None:
        """The top-level class of `index` whose method holds the call site, None outside every method."""
        paths = self._paths_of.get(id(index))
        if paths is None:
            paths = self._paths_of[id(index)] = {index._relpath(path): module for module, path in index._module_files()}
        module = paths.get(site.path)
        info = index.module(module) if module else None
        if info is None:
            return None
        return next(((cls, module) for cls in info.defs.values() if cls.kind == "class"  # type: ignore[misc]
                     and any(m.body_span and m.body_span[0] <= site.line <= m.body_span[1] for m in cls.members)), None)

    def _call_key(self, index: TreeIndex, site: CallShape) -> tuple[str, str, str]:
        """(file, class around it, receiver): what makes a call at the target the same call at the baseline."""
        own = self._enclosing_class(index, site)
        return site.path, own[0].name if own else "", site.receiver

    def _receiver_class(self, site: CallShape) -> tuple[Definition, str] | None | bool:
        """The target class of a call site's receiver (CallShape.receiver); None where it is unknown,
        False where it is no instance of a class of the tree (a module, or a name imported from outside it)."""
        if site.receiver in ("", "plain") or site.receiver.startswith("expr:"):
            return None
        if self._module_by_path is None:
            self._module_by_path = {self.target._relpath(path): module for module, path in self.target._module_files()}
        module = self._module_by_path.get(site.path)
        info = self.target.module(module) if module else None
        if info is None or module is None:
            return None
        kind, _, text = site.receiver.partition(":")
        if kind in ("ann", "name"):
            import ast as _ast

            try:
                expr = _ast.parse(text, mode="eval").body
            except SyntaxError:
                return None
            dotted = qualify(info, expr)
            if kind == "name" and text in info.imports and (not self.target.is_upstream(dotted) or self.target.has_module(dotted)):
                return False  # `re.compile(...)`, `torch.compile(...)`, `envs.x(...)`: a module or an outside object
            return self.target.class_of(dotted) if self.target.is_upstream(dotted) else None
        own = self._enclosing_class(self.target, site)
        if own is None or site.receiver == "self":
            return own
        return self._field_class(self.target, *own, site.receiver.split(".", 1)[1])

    def _may_hold(self, site: CallShape, base: tuple[Definition, str]) -> bool:
        """Whether the receiver of a call site may be an instance of a plugin subclass of `base`: its
        class is unknown, or it is `base`, an ancestor of it or a subclass of it."""
        found = self._receiver_class(site)
        if found is None or found is False:
            return found is None
        key = lambda pair: (pair[1], pair[0].name)
        return key(found) in {key(k) for k in self.target.mro(*base)} or key(base) in {key(k) for k in self.target.mro(*found)}

    def _new_call_shapes(self, per_use: list[tuple[Use, Guard, list[Finding], bool]]) -> list[tuple[Use, Guard, list[Finding], bool]]:
        """An override narrower than its base (fewer positional slots, a keyword it does not take) breaks
        when the target starts calling the method in a way the base accepts and the override does not,
        although the base's signature did not change (a caller now passes the base's optional argument)."""
        if not self._narrow_overrides or self.baseline is None:
            return per_use
        names = {name for _, name, *_ in self._narrow_overrides}
        started = self._started_sites("narrow", frozenset(names))
        new_sites, old_sites = started if started is not None else \
            call_shapes_many([(self.target, names, ()), (self.baseline, names, ())])  # both trees at once
        overridden = self._overridden_upstream(per_use)
        extra: dict[int, list[Finding]] = {}
        for use, name, plugin_cls, plugin_sig, base_sig, loc in self._narrow_overrides:
            if new_sites.files.get(name, 0) > MAX_CALLER_FILES:
                continue  # called all over the tree (`apply`, `forward`): which calls reach this class is unknown
            # A call is new when its file did not call the method that way at the baseline.
            seen = {(s.path, s.positional, s.keywords) for s in old_sites.shapes.get(name, ())}
            override, base = bound(plugin_sig), bound(base_sig)
            fresh = [s for s in new_sites.shapes.get(name, ()) if (s.path, s.positional, s.keywords) not in seen
                     and binds(base, s.positional, s.keywords) and not binds(override, s.positional, s.keywords)]
            # A call made from an upstream method the plugin's own subclass overrides (or from one only such
            # methods reach) runs the plugin's code instead: FusedMoE.forward_impl calls quant_method.apply,
            # and AscendFusedMoE overrides forward_impl, calling apply with its own arguments.
            fresh = [s for s in fresh if not self._caller_overridden(s, overridden)]
            if not fresh:
                continue
            where = "; ".join(f"{s.path}:{s.line} ({s.render()})" for s in fresh[:3])
            extra.setdefault(id(use), []).append(Finding(
                DriftFamily.SIGNATURE, f"{use.symbol}.{name}", loc, Severity.BREAKING,
                f"the target now calls {name} in a way {plugin_cls}.{name}{plugin_sig.render()} does not accept: {where}",
                evidence=(f"target: {base_sig.render()}",),
                detail={"change": "override_new_callers", "plugin_class": plugin_cls, "method": name,
                        "calls": [f"{s.path}:{s.line}" for s in fresh[:5]], "shapes": [s.render() for s in fresh[:5]],
                        "new_signature": base_sig.render(), "override_signature": plugin_sig.render()},
                subject=f"callers:{plugin_cls}.{name}"))
        if not extra:
            return per_use
        return [(use, guard, findings + extra.get(id(use), []), broken) for use, guard, findings, broken in per_use]

    def _overridden_upstream(self, per_use: list[tuple[Use, Guard, list[Finding], bool]]) -> dict[tuple[str, str], set[str]]:
        """(module, class) of the target -> the methods some live plugin subclass of it overrides (the
        class itself or an upstream ancestor of it that defines the method) without calling
        `super().method(...)`."""
        out: dict[tuple[str, str], set[str]] = defaultdict(set)
        for use, guard, _, _ in per_use:
            if use.kind != "subclass" or not guard.live:
                continue
            bodies = use.detail.get("bodies", {})
            # an override that calls super().m(...) runs upstream's m too: its calls still happen
            methods = {m for m in use.detail.get("methods", {})
                       if not calls_super(m, bodies.get(m, ""))}
            found = self.target.class_of(use.symbol) if methods and self.target.is_upstream(use.symbol) else None
            if found is None:
                continue
            for klass, module in self.target.mro(*found):
                out[(module, klass.name)].update(m for m in methods if klass.member(m) is not None)
        return out

    def _caller_overridden(self, site: CallShape, overridden: dict[tuple[str, str], set[str]]) -> bool:
        """Whether the target's call at `site` lies in a method of an upstream class that a plugin subclass
        overrides, or in one that the class's own code calls (`self.m(...)` / `.m`) only from such
        methods and no other file of the tree names: instances of the plugin's class never run it."""
        if not overridden:
            return False
        if self._module_by_path is None:
            self._module_by_path = {self.target._relpath(path): module for module, path in self.target._module_files()}
        module = self._module_by_path.get(site.path)
        info = self.target.module(module) if module else None
        if info is None:
            return False
        for cls in info.defs.values():
            dead = overridden.get((module, cls.name))
            if cls.kind != "class" or not dead:
                continue
            spans = {m.name: m.body_span for m in cls.members if m.kind == "function" and m.body_span}
            caller = next((name for name, (a, b) in spans.items() if a <= site.line <= b), None)
            if caller is None:
                continue
            if caller in dead:
                return True
            return caller in self._reached_only_from(module, site.path, spans, set(dead), caller)
        return False

    def _reached_only_from(self, module: str, path: str, spans: dict[str, tuple[int, int]], dead: set[str],
                           wanted: str) -> set[str]:
        """The methods of one class (name -> body span) that its file names (`.name`) only inside `dead`
        methods, grown to a fixpoint from `dead` (only those that could lead to `wanted` are asked of
        the rest of the tree, which must not name them at all)."""
        try:
            lines = (self.target.root / path).read_bytes().split(b"\n")
        except OSError:
            return set()
        refs: dict[str, list[int]] = {}
        for name in spans:
            needle = re.compile(rb"\.[ \t]*" + re.escape(name.encode()) + rb"\b")
            refs[name] = [i + 1 for i, text in enumerate(lines) if needle.search(text)]
        where = lambda line: next((n for n, (a, b) in spans.items() if a <= line <= b), None)
        grown, changed = set(dead), True
        while changed:
            changed = False
            for name, at in refs.items():
                if name in grown or not at:
                    continue
                if all(where(line) in grown for line in at):
                    grown.add(name)
                    changed = True
        if wanted not in grown or wanted in dead:
            return grown
        elsewhere = re.compile(rb"\.[ \t]*(" + re.escape(wanted.encode()) + rb")\b")
        named = self.target.matches(elsewhere, (wanted,))
        if any(self.target._relpath(p) != path for _, p, _ in named):
            grown.discard(wanted)
        return grown

    def _held_unreached(self, plugin_cls: str) -> str:
        """`Holder.attr, ...` when the plugin builds `plugin_cls` only into `self.<attr>` of its own
        classes and no upstream code can reach those instances: no upstream class the holder inherits
        from reads `self.<attr>` at the target, and no upstream code reads `<x>.<attr>` of another
        object (a runner handed to upstream). Upstream then never calls the instance's methods: an
        override that no longer fits the base is called by the plugin alone. "" otherwise."""
        held = self._held_only.get(plugin_cls)
        if not held:
            return ""
        for holder, attr, bases in held:
            if holder == plugin_cls:
                return ""
            for base in bases:
                if base.rsplit(".", 1)[-1] in PLAIN_BASES or base in KNOWN_OUTSIDE_BASES:
                    continue
                found = self.target.class_of(base) if self.target.is_upstream(base) else None
                if found is None:
                    return ""  # a plugin base or an unknown expression: what reads the attribute is unknown
                if any(attr in self.target.class_reads(klass, module) for klass, module in self.target.mro(*found)):
                    return ""
            if attr not in self._held_reach:
                pattern = re.compile(rb"\n(?![ \t]*(?:from|import)[ \t])[^\n]*?(\w+)[ \t]*\.[ \t]*"  # not a module path
                                     + re.escape(attr.encode()) + rb"\b")
                self._held_reach[attr] = any(names - {"self", "cls"} for _, _, names in self.target.matches(pattern, (attr,)))
            if self._held_reach[attr]:
                return ""
        return ", ".join(sorted({f"{holder}.{attr}" for holder, attr, _ in held}))

    def _namesake_calls(self, per_use: list[tuple[Use, Guard, list[Finding], bool]]) -> list[tuple[Use, Guard, list[Finding], bool]]:
        """`fn().m(...)` where upstream's `fn` builds the object but its annotation does not say which
        class (`get_model(...) -> nn.Module`): when the call fitted nearly every upstream method named
        `m` at the baseline and nearly none at the target, the interface changed under every class the
        object could be (namesakes.py), and the call breaks whichever it is."""
        if not self._untyped_calls or self.baseline is None:
            return per_use
        names = {method for _, _, method in self._untyped_calls}
        started = self._namesakes
        if started is not None and names <= started[0]:  # the search _start_namesakes began covers them
            new_sigs, old_sigs = started[1](), started[2]()
        else:
            new_sigs, old_sigs = method_signatures(self.target, names), method_signatures(self.baseline, names)
        extra: dict[int, list[Finding]] = {}
        for use, factory, method in self._untyped_calls:
            if use.detail.get("star_args") or use.detail.get("star_kwargs"):
                continue
            positional, keywords = use.detail.get("positional", 0), tuple(use.detail.get("keywords", []))
            old, new = old_sigs.get(method, []), new_sigs.get(method, [])
            if not interface_break(old, new, positional, keywords):
                continue
            # the target's most common signature (the first in file order on a tie: a set's order would vary per run)
            common = Counter(s.render() for s in new).most_common(1)[0][0]
            shape = ", ".join(["_"] * positional + [f"{k}=" for k in keywords])
            loc = Location(factory.rsplit(".", 1)[0], f"{factory.rsplit('.', 1)[-1]}().{method}")
            extra.setdefault(id(use), []).append(Finding(
                DriftFamily.SIGNATURE, f"{factory}.{method}", loc, Severity.BREAKING,
                f"{method}({shape}) on the object {factory}() returns fits {len(old)} upstream {method} methods at the "
                f"baseline but almost none of the target's {len(new)} (most common: {method}{common})",
                evidence=(f"target: {method}{common}",),
                detail={"change": "interface_changed", "method": method, "factory": factory,
                        "new_signature": common, "definitions": {"baseline": len(old), "target": len(new)}},
                subject=f"namesakes:{method}"))
        if not extra:
            return per_use
        return [(use, guard, findings + extra.get(id(use), []), broken) for use, guard, findings, broken in per_use]

    def _rpc_calls(self, index: TreeIndex) -> set[str]:
        """Method names the upstream invokes on every worker by name (`collective_rpc("name", ...)`)."""
        import re as _re

        key = (id(index), "rpc")
        if key not in self._bodies:
            names: set[str] = set()
            for _, _, found in index.matches(_RPC_CALL):
                names.update(found)
            self._bodies[key] = names  # type: ignore[assignment]
        return self._bodies[key]  # type: ignore[return-value]

    def _rpc_methods(self, use: Use, target_cls: tuple[Definition, str], plugin_members: set[str],
                     loc: Location) -> list[Finding]:
        """A worker subclass must answer every RPC the engine sends: names newly sent at the target
        that neither the plugin class nor its upstream bases define break at the first call."""
        if self.baseline is None or not any(k.name.endswith("WorkerBase") for k, _ in self.target.mro(*target_cls)):
            return []
        new = self._rpc_calls(self.target) - self._rpc_calls(self.baseline)
        missing = sorted(n for n in new if n not in plugin_members and self.target.class_member(*target_cls, n) is None)
        if not missing:
            return []
        plugin_cls = use.detail.get("cls", "?")
        return [Finding(DriftFamily.NEW_METHOD, use.symbol, loc, Severity.BREAKING,
                        f"the target calls collective_rpc({', '.join(repr(m) for m in missing)}) on every worker; "
                        f"{plugin_cls} and {use.symbol.rsplit('.', 1)[-1]} do not define it",
                        evidence=tuple(f"new at the target: collective_rpc({m!r})" for m in missing),
                        detail={"methods": missing, "plugin_class": plugin_cls, "kinds": {m: "rpc" for m in missing}},
                        subject=f"rpc:{plugin_cls}")]

    @staticmethod
    def _abstract_methods(index: TreeIndex, cls: Definition, module: str) -> dict[str, str]:
        """Methods whose nearest definition in the MRO is abstract: name -> abstract | not_implemented."""
        resolved: dict[str, str] = {}
        for klass, _ in index.mro(cls, module):
            for member in klass.members:
                resolved.setdefault(member.name, member.abstract_kind or ("abstract" if member.is_abstract else ""))
        return {name: kind for name, kind in resolved.items() if kind}

    @staticmethod
    def _class_reads(index: TreeIndex, cls: Definition, module: str) -> set[str]:
        out: set[str] = set()
        for klass, defined_in in index.mro(cls, module):
            out.update(index.class_reads(klass, defined_in))
        return out

    def _method_stores(self, index: TreeIndex, cls: Definition, module: str, attrs: set[str],
                       skip: set[str]) -> dict[str, str]:
        """attr -> `Class.method` of a method of the class's MRO whose body assigns `self.<attr>`, among
        those the subclass does not override (`skip`), that are no dunder and that the constructor does
        not run itself."""
        bodies: dict[str, tuple[str, str]] = {}  # method -> (class name, body text), the first in the MRO
        for klass, where in index.mro(cls, module):
            for member in klass.members:
                if member.kind == "function" and member.body_span and member.name not in bodies:
                    start, end = member.body_span
                    bodies[member.name] = (klass.name, "\n".join(self._module_lines(index, where)[start - 1:end]))
        # what the constructor runs (`__init__` and the methods it calls on self, transitively) is over
        # before the subclass's own assignments: only a later call can replace them
        during_init, todo = set(), ["__init__", "__post_init__"]
        while todo:
            name = todo.pop()
            if name in during_init or name not in bodies:
                continue
            during_init.add(name)
            todo.extend(_SELF_CALL.findall(bodies[name][1]))
        out: dict[str, str] = {}
        for name, (owner, body) in bodies.items():
            if name in skip or name in during_init or name.startswith("__"):
                continue
            for store in _SELF_STORE.finditer(body):
                attr, value = store.group(1), _store_value(body, store)
                if attr not in attrs or re.search(rf"\bself\.{attr}\s+is\s+None\b", body):
                    continue  # a lazy `if self.x is None: self.x = ...` keeps what the subclass set
                if re.search(rf"\bself\.{attr}\b(?!\s*\()", value):
                    continue  # `self.m = Wrapper(self, self.m, ...)` wraps the subclass's object, keeps it
                rebuilt = re.match(r"self\.(\w+)\(", value)
                if rebuilt and rebuilt.group(1) in skip:
                    continue  # `self.runner = self._init_runner()`: the subclass's override builds it
                out.setdefault(attr, f"{owner}.{name}")
        return out

    def _self_callers(self, index: TreeIndex, cls: Definition, module: str, name: str) -> list[str]:
        """`Class.method` of the class's MRO whose body calls `self.<name>(...)` or `cls.<name>(...)`."""
        out = []
        for klass, where in index.mro(cls, module):
            for member in klass.members:
                if member.kind == "function" and member.body_span and member.name != name:
                    start, end = member.body_span
                    if name in _HOOK_CALL.findall("\n".join(self._module_lines(index, where)[start - 1:end])):
                        out.append(f"{klass.name}.{member.name}")
        return out

    def _orphaned_hooks(self, use: Use, base_cls: tuple[Definition, str], target_cls: tuple[Definition, str],
                        methods: dict[str, Signature], loc: Location) -> list[Finding]:
        """Overrides of a hook the base's own methods called at the baseline and that the target's class
        no longer defines (FusedMoE._init_runner, gone at vllm 0.20.0): upstream never calls the override
        again, so what it did silently stops at the target: a break (nothing raises, the plugin's behaviour
        is gone). Only a note where the plugin calls a method of that name itself (from any of its classes:
        a runner's `layer.forward_impl(...)` keeps a layer's override alive)."""
        if self.baseline is None or self.target.open_members(*target_cls):
            return []
        plugin_cls = use.detail.get("cls", "?")
        findings = []
        for name in methods:
            if name.startswith("__") or self.target.class_member(target_cls[0], target_cls[1], name) is not None \
                    or self.baseline.class_member(base_cls[0], base_cls[1], name) is None:
                continue
            callers = self._self_callers(self.baseline, *base_cls, name)
            if not callers or self._self_callers(self.target, *target_cls, name):
                continue  # upstream never called it on the object (the plugin's own helper), or still does
            own = sorted(self._plugin_calls.get(name, ()))
            findings.append(Finding(
                DriftFamily.REMOVED, f"{use.symbol}.{name}", loc, Severity.NOTE if own else Severity.BREAKING,
                f"{use.symbol}.{name} is gone at the target and upstream no longer calls it ({', '.join(callers)} did at "
                f"the baseline): {plugin_cls}.{name} is never called by upstream"
                + (f"; the plugin calls it itself ({', '.join(own[:3])})" if own else ""),
                evidence=(f"called by {', '.join(callers)} at the baseline", f"no member {name} in the target's MRO"),
                detail={"change": "hook_removed", "plugin_class": plugin_cls, "method": name, "called_by": callers,
                        "plugin_calls": own}, subject=f"hook:{plugin_cls}.{name}"))
        return findings

    def _clobbered_attrs(self, use: Use, base_cls: tuple[Definition, str], target_cls: tuple[Definition, str],
                         methods: dict[str, Signature], loc: Location) -> list[Finding]:
        """Attributes the subclass's `__init__` sets that a base method it does not override assigns at
        the target and did not at the baseline (GPUModelRunner.initialize_kv_cache building
        `self.cudagraph_manager` at vllm 0.20.0): when that method runs, the plugin's object is replaced."""
        attrs = set(use.detail.get("init_attrs", ()))
        if not attrs or self.baseline is None:
            return []
        skip = set(methods) | set(use.detail.get("inherited", []))
        new = self._method_stores(self.target, *target_cls, attrs, skip)
        if not new:
            return []
        old = self._method_stores(self.baseline, *base_cls, attrs, skip)
        plugin_cls = use.detail.get("cls", "?")
        out = []
        for attr, where in sorted(new.items()):
            if attr in old:
                continue
            out.append(Finding(DriftFamily.OTHER, f"{use.symbol}.{attr}", loc, Severity.RISKY,
                               f"{where} assigns self.{attr} at the target (not at the baseline); {plugin_cls}.__init__ sets "
                               f"its own self.{attr} and does not override {where.split('.')[-1]}, so that call replaces it",
                               evidence=(f"target: {where} assigns self.{attr}",),
                               detail={"change": "attribute_overwritten", "attribute": attr, "method": where,
                                       "plugin_class": plugin_cls}, subject=f"overwritten:{plugin_cls}.{attr}"))
        return out

    @staticmethod
    def _init_attrs(index: TreeIndex, cls: Definition, module: str) -> set[str]:
        out: set[str] = set()
        for klass, _ in index.mro(cls, module):
            out.update(klass.instance_attrs)
        return out

    # ------------------------------------------------------------------ merge per family and symbol

    def _verdict_text(self, items: list[tuple[Use, Guard, "Finding"]], is_note: bool, severity: Severity,
                      guards: dict[tuple[str, int], GuardVerdict]) -> tuple[str, str]:
        """(lane, verdict) of a merged record: which lane runs its sites and what to do at the target."""
        target = self.lanes.target_label if self.lanes else "the target"
        lanes = {self._use_lane.get(id(u), ("both", None))[0] for u, _, _ in items}
        lane = lanes.pop() if len(lanes) == 1 else "both"
        verdict_of = None
        for u, _, _ in items:
            block = self._use_lane.get(id(u), ("both", None))[1]
            if block is not None and (u.site.path, block.line) in guards:
                verdict_of = guards[(u.site.path, block.line)]
                break
        if is_note:
            if any(g.live for _, g, _ in items):
                return lane, "absorbed by its except-ImportError fallback"
            if verdict_of is not None and verdict_of.verdict == "collapse":
                return lane, _COLLAPSE.format(target=target)
            if verdict_of is not None and verdict_of.verdict == "retarget":
                return lane, _RETARGET.format(target=verdict_of.retarget_to or target)
            return lane, f"dead at {target}"
        if verdict_of is not None and verdict_of.verdict == "retarget":
            return lane, _RETARGET.format(target=verdict_of.retarget_to or target)
        if severity is Severity.BREAKING:
            return lane, _BREAKS_AT_TARGET.format(target=target)
        return lane, f"may break at {target}"

    def _merge(self, per_use: list[tuple[Use, Guard, list[Finding], bool]],
               guard_list: list[GuardVerdict] | None = None) -> tuple[list[DriftRecord], list[DriftRecord]]:
        guards = {(g.path, g.line): g for g in guard_list or []}
        groups: dict[tuple, list[tuple[Use, Guard, Finding]]] = defaultdict(list)
        for use, guard, findings, _ in per_use:
            for finding in findings:
                is_note = not guard.live or _absorbed(use) or finding.severity is Severity.NOTE
                groups[(is_note, finding.family, finding.symbol)].append((use, guard, finding))
        records: list[DriftRecord] = []
        notes: list[DriftRecord] = []
        for (is_note, family, symbol), items in groups.items():
            use, guard, finding = items[0]
            at = {(u.site.path, u.site.line): u.site for u, _, _ in items}
            for _, _, f in items:  # a patch's replacement defined in the plugin: the fix goes to its `def` too
                extra = f.detail.get("replacement_site") if f.detail.get("change") == "patch_signature" else None
                if extra:
                    at.setdefault((extra["path"], extra["line"]), Site(extra["path"], extra["line"], extra.get("code", "")))
            sites = tuple(sorted(at.values(), key=lambda s: (s.path, s.line)))
            best = finding.candidates[0] if finding.candidates else None
            distinct: dict[str, Finding] = {}
            for _, _, f in items:
                distinct.setdefault(f.subject or f.message, f)
            message = "; ".join(dict.fromkeys(f.message for f in distinct.values()))
            severity = Severity.BREAKING if any(f.severity == Severity.BREAKING for f in distinct.values()) else finding.severity
            changes = [f.detail for f in distinct.values() if f.detail]
            if is_note:
                severity = Severity.NOTE
                why = ("nothing at the target fails by itself" if guard.live and not _absorbed(use)
                       else "an except-ImportError fallback absorbs it" if guard.live
                       else f"only under a dead guard ({guard.expression})")
                message = f"{message} [{why}]"
            lane, verdict = self._verdict_text(items, is_note, severity, guards)
            record = DriftRecord(
                lane=lane,
                verdict=verdict,
                family=family,
                symbol=symbol,
                old_location=finding.old_location,
                sites=sites,
                severity=severity,
                new_location=best.location if best else None,
                confidence=best.confidence if best else 0.0,
                evidence=finding.evidence + (best.evidence if best else ()),
                candidates=finding.candidates,
                guard=guard,
                suggested_strategy=STRATEGIES.get(family, "manual"),
                detail={"use_kinds": sorted({u.kind for u, _, _ in items}), **finding.detail,
                        **({"changes": changes} if len(changes) > 1 else {})},
                message=message,
            )
            (notes if is_note else records).append(record)
        order = {f: i for i, f in enumerate(DriftFamily)}
        rank = {Severity.BREAKING: 0, Severity.RISKY: 1, Severity.NOTE: 2}
        # Live breaks first (what fails at the target), then risks; within each, by family and symbol.
        key = lambda r: (rank[r.severity], order[r.family], r.symbol, r.detail.get("parameter", ""), r.detail.get("method", ""))  # noqa: E731
        return sorted(records, key=key), sorted(notes, key=key)


_PLATFORM_SEGMENTS = {"tpu", "rocm", "xpu", "cpu", "cuda", "hpu", "neuron", "nvidia", "amd"}


def _platform_segment(candidate: str, old: str) -> str:
    """A platform-specific package in the candidate's path that the old path did not have."""
    old_parts = set(old.split("."))
    for part in candidate.split("."):
        if part in _PLATFORM_SEGMENTS and part not in old_parts:
            return part
    return ""


def _replacement_mismatch(replacement: Signature, target: Signature) -> list[str]:
    """Why callers of `target` cannot call `replacement` the same way (empty: it fits)."""
    problems: list[str] = []
    names = set(replacement.names)
    for param in target.params:
        if param.kind in ("varargs", "varkw"):
            continue
        if param.name not in names and not (replacement.has_varkw if param.kind == "kwonly" else
                                            replacement.has_varargs or replacement.has_varkw):
            problems.append(f"does not accept '{param.name}'")
    target_names = set(target.names)
    for name in replacement.required_names():
        if name not in target_names and not target.has_varkw and not target.has_varargs:
            problems.append(f"requires '{name}' that callers of the target do not pass")
    return problems


def _absorbed(use: Use) -> bool:
    """Does an enclosing try/except (or contextlib.suppress) catch what this use raises when it breaks?
    A missing import raises ImportError, a missing attribute AttributeError; a bad call TypeError."""
    raises = {"import": {"ImportError", "ModuleNotFoundError"}, "module": {"ImportError", "ModuleNotFoundError"},
              "attribute": {"AttributeError"}, "monkeypatch": {"AttributeError"}}.get(use.kind, {"TypeError"})
    for cond in use.conditions:
        if cond.kind in ("try", "suppress"):
            caught = set(cond.source.split(",")) if cond.source else {"ImportError"}
            if caught & {"*", "Exception", "BaseException"} or caught & raises:
                return True
    return False


_TYPING_ALIASES = {"List": "list", "Dict": "dict", "Tuple": "tuple", "Set": "set", "FrozenSet": "frozenset", "Type": "type"}


def _tuple_arity(text: str) -> int | None:
    """How many values an annotated return unpacks into: `tuple[a, b]` -> 2, `None` / `int` / `bool` /
    `str` / `float` -> 1 (not a tuple at all); None when it cannot be told (a class, a union, `tuple[x, ...]`)."""
    import ast as _ast

    try:
        node = _ast.parse(text.strip().strip("'\""), mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, _ast.Subscript) and _ast.unparse(node.value).rsplit(".", 1)[-1] in ("tuple", "Tuple"):
        elts = node.slice.elts if isinstance(node.slice, _ast.Tuple) else [node.slice]
        return None if any(isinstance(e, _ast.Constant) and e.value is Ellipsis for e in elts) else len(elts)
    if isinstance(node, _ast.Constant) and node.value is None or isinstance(node, _ast.Name) and node.id in ("None", "int", "bool", "str", "float"):
        return 1
    return None


def normalize_annotation(text: str) -> frozenset[str]:
    """An annotation as a set of union members, spelled the same way: `Optional[List[int]]`,
    `"list[int] | None"` and `typing.Union[None, List[int]]` are equal (PEP 604 / PEP 585)."""
    import ast as _ast

    try:
        node = _ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return frozenset({text.replace(" ", "")})

    def members(n: _ast.expr) -> list[str]:
        if isinstance(n, _ast.BinOp) and isinstance(n.op, _ast.BitOr):
            return members(n.left) + members(n.right)
        if isinstance(n, _ast.Subscript):
            head = (_ast.unparse(n.value)).rsplit(".", 1)[-1]
            args = n.slice.elts if isinstance(n.slice, _ast.Tuple) else [n.slice]
            if head == "Optional":
                return members(args[0]) + ["None"]
            if head == "Union":
                return [m for a in args for m in members(a)]
            inner = ",".join("|".join(sorted(members(a))) for a in args)
            return [f"{_TYPING_ALIASES.get(head, head)}[{inner}]"]
        if isinstance(n, _ast.Constant) and isinstance(n.value, str):
            return sorted(normalize_annotation(n.value))
        text = _ast.unparse(n).rsplit(".", 1)[-1]
        return [_TYPING_ALIASES.get(text, text)]

    return frozenset(members(node))


def _signature_similarity(old: Signature, new: Signature) -> float:
    """1.0 for the same parameters; an added optional parameter costs half as much as a changed one."""
    old_names, new_names = list(old.names), list(new.names)
    if not old_names and not new_names:
        return 1.0
    union = set(old_names) | set(new_names)
    common = set(old_names) & set(new_names)
    optional_added = {p.name for p in new.params if p.has_default and p.name not in old_names and p.kind in ("pos", "kwonly")}
    overlap = (len(common) + 0.5 * len(optional_added)) / len(union)
    order = _text_similarity(" ".join(old_names), " ".join(new_names))
    return 0.7 * overlap + 0.3 * order


def _similarity(old: Definition | None, new: Definition) -> tuple[float, float]:
    if old is None:
        return 0.5, 0.5
    if old.signature is None and new.signature is None:
        sig = 1.0 if old.kind == new.kind else 0.5
    elif old.signature is None or new.signature is None:
        sig = 0.3
    else:
        sig = _signature_similarity(old.signature, new.signature)
    shape = _text_similarity(old.shape, new.shape) if old.shape or new.shape else 1.0
    return sig, shape


def compute_drift(
    files: Iterable[FileUsage],
    target: TreeIndex,
    baseline: TreeIndex | None,
    conventions: GuardConventions,
    target_versions: TargetVersions,
    stage: Callable[[str, int | None], Any] | None = None,
    lanes: Lanes | None = None,
) -> DriftResult:
    return DriftAnalyzer(target, baseline, conventions, target_versions, stage, lanes).run(files)


__all__ = ["DriftAnalyzer", "DriftResult", "Finding", "Verdict", "compute_drift", "Site"]


def _positional_shift(old: Signature, new: Signature, positional: int, keywords: list[str]) -> tuple[str, bool] | None:
    """A parameter removed or inserted before the call's last positional argument: the arguments bind
    to other parameters at the target. Returns (the first parameter that changed, whether the call also
    passes that parameter's new occupant by keyword, a certain TypeError)."""
    take = lambda sig: [p.name for p in sig.params if p.kind in ("posonly", "pos")][:positional]
    old_names, new_names = take(old), take(new)
    if len(old_names) < positional or len(new_names) < positional or old_names == new_names:
        return None  # too many arguments is the capacity check's finding; equal binding is no change
    everything_new = {p.name for p in new.params}
    for was, now in zip(old_names, new_names):
        if was != now:
            duplicate = any(n in keywords for n in new_names)
            if not duplicate and was not in everything_new:
                return None  # a renamed parameter in the same slot: nothing is misbound for sure
            return f"argument for '{was}' now binds '{now}'", duplicate
    return None


def reaches(override: Signature, shape: CallShape, lacking: Iterable[str], positions: dict[str, int | None]) -> bool:
    """Whether a call can reach an override: less the new parameters the override lacks, it binds to the
    override (`override` bound). A call that also passes something else the override does not take, or
    too many positionals, never reached it at the baseline either, where the plugin ran: it calls a
    same-named method of another class, or goes through a path the plugin replaces."""
    lacking = set(lacking)
    cut = [pos for p, pos in positions.items() if p in lacking and pos is not None and shape.positional > pos]
    return binds(override, min(cut) if cut else shape.positional, shape.keywords - lacking)


def _override_shift(old: Signature, new: Signature, override: Signature) -> str | None:
    """The base removed or inserted a positional parameter while the override (all three bound) still
    follows the old order: an upstream caller passing arguments by position (as the base now orders
    them) fills the override's parameters with the wrong values. Returns what binds where."""
    take = lambda sig: [p.name for p in sig.params if p.kind in ("posonly", "pos")]
    o, n, mine = take(old), take(new), take(override)
    for i, (was, now) in enumerate(zip(o, n)):
        if was == now:
            continue
        if (was in n and now in o) or i >= len(mine) or mine[i] != was:
            return None  # a swap of existing parameters, or an override that already follows the new order
        return f"argument for '{now}' now lands in the override's '{was}'"
    return None


def _installed_unchanged(files: list[FileUsage], per_use: list[tuple[Use, Guard, list[Finding], bool]],
                         dead_modules: dict[str, str]) -> dict[tuple[str, int], tuple[str, ...]]:
    """Guards whose body installs plugin modules (imports them; nothing else does at the target) in
    which no upstream use breaks or changes between the baseline and the target (no finding but the
    sync hints of copied bodies): (path, line) -> those modules. Such a patch still applies as it did
    at the old release."""
    module_of_path = {f.path: f.module for f in files}
    touched = {module_of_path.get(use.site.path) for use, _, findings, _ in per_use
               if any(f.detail.get("change") != "copied_body_changed" for f in findings)}
    installs: dict[tuple[str, int], set[str]] = {}
    for usage in files:
        for module, conditions in usage.internal_imports:
            if module not in dead_modules:
                continue
            innermost = next((c for c in reversed(conditions) if c.kind == "if" and c.line), None)
            if innermost is not None and not innermost.negated:
                installs.setdefault((usage.path, innermost.line), set()).add(module)
    return {key: tuple(sorted(mods)) for key, mods in installs.items() if not mods & touched}
