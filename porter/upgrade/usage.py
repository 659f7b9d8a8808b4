"""What a plugin takes from an upstream, found in the plugin's source text (nothing is imported).

Per file: imports of the upstream packages, attribute chains on imported names, subclasses of
upstream classes (with the methods they override and the attributes they set), monkeypatch
targets (`mod.attr = ...`, `setattr(mod, "attr", ...)`), calls to upstream callables with their
keyword arguments (including `super().__init__(...)` into an upstream base). Each use carries
the conditions it sits under as source text; guards.py evaluates them for a target later, so a
file's scan is cached by content hash alone.
"""

from __future__ import annotations

import ast
import fnmatch
import hashlib
import os
import pickle
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from porter import gcpause
from porter.upgrade.bindings import branch_names, reads
from porter.upgrade.guards import Condition
from porter.upgrade.inherit import ClassFact
from porter.upgrade.index import PLAIN_BASES, FastVisitor, Signature, body_span, body_text, dotted_name, signature_of, walk
from porter.upgrade.models import Site
from porter.upgrade.packs import Pack, pack_path
from porter.upgrade.predicates import NO_PREDICATES, Predicates, find_predicates, plugin_imports, resolve_imported
from porter.upgrade.values import value_calls

USAGE_VERSION = 11  # 10: one pack per plugin tree instead of a file per scanned file; 11: FileUsage.class_stores
DEFAULT_EXCLUDES = ("tests/*", "*/tests/*", "test/*", "benchmarks/*", "examples/*", "docs/*", "build/*", ".*")

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "AttributeError", "Exception", "BaseException"}


@dataclass(frozen=True)
class Use:
    kind: str  # import | module | attribute | subclass | monkeypatch | call
    symbol: str  # dotted upstream name
    site: Site
    conditions: tuple[Condition, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def upstream_package(self) -> str:
        return self.symbol.split(".")[0]

    def to_dict(self) -> dict[str, Any]:
        detail = {k: (v.render() if isinstance(v, Signature) else v) for k, v in self.detail.items() if k != "methods"}
        if "methods" in self.detail:
            detail["methods"] = {k: v.render() for k, v in self.detail["methods"].items()}
        return {"kind": self.kind, "symbol": self.symbol, "site": self.site.to_dict(),
                "conditions": [c.to_tuple() for c in self.conditions], "detail": detail}


@dataclass(frozen=True)
class GuardBlock:
    """An `if` (or `x if c else y`) whose test may be a version check: the unit a guard verdict and
    a drop edit apply to."""

    path: str
    line: int
    end_line: int
    source: str  # the test
    # if | elif | ifexp | assign (a version predicate: `is_legacy = vllm_version_is(...)`) | value (a version
    # test used as a value, values.py: `fn(legacy=vllm_version_is(...))`; its source is the call)
    kind: str = "if"
    has_else: bool = False
    conditions: tuple[Condition, ...] = ()  # the conditions the block itself sits under
    via: tuple[int, ...] = ()  # lines of the version predicates the test reads (its source has them expanded)
    pure: bool = True  # assign: every read of the name is in a guard test (the assignment can go with them)
    body_names: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (bound, read) in the body (bindings.py)
    else_names: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # the same for the else branch
    # (local, dotted) plugin names the test reads that another module may define as a version predicate
    # (`from vllm_ascend.utils import is_vllm_ge_x`): resolved plugin-wide by resolve_imported_blocks.
    foreign: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "end_line": self.end_line, "guard": self.source, "kind": self.kind}


@dataclass
class FileUsage:
    path: str
    uses: list[Use]
    aliases: dict[str, str]  # local name -> dotted upstream name
    syntax_error: str = ""
    guard_blocks: list[GuardBlock] = field(default_factory=list)
    internal_imports: list[tuple[str, tuple[Condition, ...]]] = field(default_factory=list)  # plugin modules it imports
    module: str = ""  # dotted module name of the file inside the plugin
    exports: dict[str, str] = field(default_factory=dict)  # predicates other modules can import: name (`f()`) -> test
    # plugin class (dotted) -> self.<attr> -> dotted upstream class: how a receiver typed by a plugin
    # class (PLUGIN) reaches upstream, across files
    class_types: dict[str, dict[str, str]] = field(default_factory=dict)
    class_facts: list[ClassFact] = field(default_factory=list)  # its top-level classes (inherit.py)
    # plugin classes it names (a name imported from or defined in the plugin, or a dotted string such as
    # "pkg.lora.Wrapper0110"), by class name, with the conditions of each mention
    class_refs: list[tuple[str, tuple[Condition, ...]]] = field(default_factory=list)
    # `self.<attr> = PluginCls(...)` in a method of a top-level class: (PluginCls's name, the holder
    # class, attr, the holder's bases as written: dotted upstream names, else the plain name; "?" for
    # a base expression that is neither): where the plugin keeps the instances it builds (drift.py)
    class_stores: list[tuple[str, str, str, tuple[str, ...]]] = field(default_factory=list)


@dataclass
class UsageSummary:
    files_scanned: int
    files_using: int
    uses: int
    by_kind: dict[str, int]
    modules: int
    symbols: int
    syntax_errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "files_scanned": self.files_scanned,
            "files_using": self.files_using,
            "uses": self.uses,
            "by_kind": self.by_kind,
            "distinct_modules": self.modules,
            "distinct_symbols": self.symbols,
            "syntax_errors": self.syntax_errors,
        }


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((dotted_name(t) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS for t in types)


def _caught_names(handlers: list[ast.ExceptHandler]) -> str:
    """Comma-separated exception names the handlers catch ("*" for a bare except)."""
    names: list[str] = []
    for handler in handlers:
        if handler.type is None:
            names.append("*")
            continue
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        names.extend((dotted_name(t) or "?").rsplit(".", 1)[-1] for t in types)
    return ",".join(dict.fromkeys(names))


def _is_suppress_import(item: ast.withitem) -> bool:
    expr = item.context_expr
    if isinstance(expr, ast.Call) and (dotted_name(expr.func) or "").endswith("suppress"):
        return any((dotted_name(a) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS for a in expr.args)
    return False


_STATEMENT_ITEMS = (ast.stmt, ast.excepthandler, ast.match_case)  # what a statement's block lists hold


class _AliasCollector(FastVisitor):
    def __init__(self, packages: frozenset[str]):
        self.packages = packages
        self.aliases: dict[str, str] = {}

    def collect(self, node: ast.AST) -> None:
        """visit() for imports only: imports are statements, so only statement blocks are walked
        (fields in the same order as a visit, so a later import of a name still wins)."""
        for field in node._fields:
            value = getattr(node, field, None)
            if value.__class__ is not list or not value or not isinstance(value[0], _STATEMENT_ITEMS):
                continue
            for item in value:
                kind = item.__class__
                if kind is ast.Import:
                    self.visit_Import(item)
                elif kind is ast.ImportFrom:
                    self.visit_ImportFrom(item)
                else:
                    self.collect(item)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in self.packages:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    self.aliases[head] = head

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] not in self.packages:
            return
        for alias in node.names:
            if alias.name != "*":
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"


_VERSIONISH_TEST = re.compile(r"version|VERSION")
FACTORY = "@returns:"  # receiver typed by the return annotation of an upstream function, resolved against the index
PLUGIN = "@plugin:"  # receiver of a plugin class (`self.batch = InputBatch(...)`): its attributes' types come from that class (drift.py)
_SELF_SITES = 3  # sites kept per (class, self attribute): enough to find it, not one per read


def _enter_if(scan, node: ast.If) -> tuple[str, str]:
    """The condition kind and source of an `if`, for both plugin walkers (`scan`: its path, lines,
    open conditions and guard blocks); a version test is recorded as a GuardBlock."""
    source, used = scan.predicates.expand(node.test)
    kind = "type_checking" if source.rsplit(".", 1)[-1] == "TYPE_CHECKING" else "if"
    if kind != "if":
        return kind, source
    foreign = () if _VERSIONISH_TEST.search(source) else scan.predicates.foreign_reads(node.test)
    if foreign or _VERSIONISH_TEST.search(source):
        first = scan.lines[node.lineno - 1].lstrip() if 0 < node.lineno <= len(scan.lines) else ""
        scan.guard_blocks.append(GuardBlock(scan.path, node.lineno, node.end_lineno or node.lineno, source,
                                            "elif" if first.startswith("elif") else "if", bool(node.orelse),
                                            tuple(scan.conditions), tuple(p.line for p in used),
                                            body_names=branch_names(node.body), else_names=branch_names(node.orelse),
                                            foreign=foreign))
    return kind, source


def _ternary_block(scan, node: ast.IfExp, conditions: tuple[Condition, ...]) -> str:
    """The test source of `x if c else y` (predicates expanded); a version test is recorded as a GuardBlock."""
    source, used = scan.predicates.expand(node.test)
    foreign = () if _VERSIONISH_TEST.search(source) else scan.predicates.foreign_reads(node.test)
    if foreign or _VERSIONISH_TEST.search(source):
        scan.guard_blocks.append(GuardBlock(scan.path, node.lineno, node.end_lineno or node.lineno, source, "ifexp",
                                            True, conditions, tuple(p.line for p in used),
                                            body_names=((), tuple(sorted(reads([node.body])))),
                                            else_names=((), tuple(sorted(reads([node.orelse])))), foreign=foreign))
    return source


def resolve_imported_blocks(blocks: list[GuardBlock], files: list["FileUsage"]) -> list[GuardBlock]:
    """Guard blocks whose test reads a version predicate another plugin module defines get that
    predicate's test in their source; blocks that read none (their test is no version check) go."""
    exports = {f"{f.module}.{name}": test for f in files for name, test in f.exports.items()}
    out: list[GuardBlock] = []
    for block in blocks:
        if not block.foreign:
            out.append(block)
            continue
        source = resolve_imported(block.source, exports, dict(block.foreign)) if exports else None
        if source is not None and _VERSIONISH_TEST.search(source):
            out.append(replace(block, source=source, foreign=()))
    return out


def _predicate_blocks(path: str, predicates: Predicates) -> list[GuardBlock]:
    """The assignments of the version predicates some guard reads, as guard blocks of their own."""
    return [GuardBlock(path, p.line, p.end_line, p.source, "assign", pure=p.pure) for p in predicates.found]


def _value_blocks(path: str, tree: ast.Module, predicates: Predicates, source: bytes | None = None) -> list[GuardBlock]:
    """Version tests used as values (values.py), each a guard block of kind `value` (its source: the call)."""
    return [GuardBlock(path, call.lineno, call.end_lineno or call.lineno, predicates.expand(call)[0], "value")
            for call in value_calls(tree, predicates, source)]


def _function_defs(body: list[ast.stmt]) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions defined in a body, including under if/try blocks (methods per lane)."""
    out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(stmt)
        elif isinstance(stmt, ast.If):
            out.extend(_function_defs(stmt.body) + _function_defs(stmt.orelse))
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            out.extend(_function_defs(stmt.body) + _function_defs(stmt.orelse) + _function_defs(stmt.finalbody))  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                out.extend(_function_defs(handler.body))
    return out


def _class_assigned_names(body: list[ast.stmt]) -> list[str]:
    out: list[str] = []
    for stmt in body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for t in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]):
                if isinstance(t, ast.Name):
                    out.append(t.id)
        elif isinstance(stmt, ast.If):
            out.extend(_class_assigned_names(stmt.body) + _class_assigned_names(stmt.orelse))
    return out


def _class_string(value: object, plugin_packages: frozenset[str]) -> str:
    """The class a dotted string of the plugin names (`"vllm_ascend.lora.punica_npu.Wrapper0110"`), else ""."""
    if not isinstance(value, str) or "." not in value or len(value) > 200 or value.split(".", 1)[0] not in plugin_packages:
        return ""
    name = value.rsplit(".", 1)[-1]
    return name if name[:1].isupper() and name.isidentifier() else ""


def light_class_refs(tree: ast.AST, plugin_names: dict[str, str], plugin_packages: frozenset[str]) -> list[tuple[str, tuple]]:
    """A file the light scan reads: every mention of a plugin class counts as live (no conditions
    are tracked there), so a class it names is never taken for one referenced only under dead guards."""
    out: set[str] = set()
    for node in walk(tree):
        if isinstance(node, ast.Name) and node.id in plugin_names:
            out.add(plugin_names[node.id].rsplit(".", 1)[-1])
        elif isinstance(node, ast.Constant) and (name := _class_string(node.value, plugin_packages)):
            out.add(name)
    return [(name, ()) for name in sorted(out)]


_ATTRIBUTE, _CALL, _ASSIGN, _ANN_ASSIGN = ast.Attribute, ast.Call, ast.Assign, ast.AnnAssign


def _is_self_store(node: ast.AST) -> bool:
    """`self.<attr>` written to."""
    return isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


def _is_init_call(method: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.AST) -> bool:
    """A `<base>.__init__(...)` call inside the class's own `__init__`."""
    return method.name == "__init__" and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "__init__"


def _self_stores(defs: list[ast.FunctionDef | ast.AsyncFunctionDef]) -> tuple[set[str], bool]:
    """The `self.<attr>` a class's methods store, and whether its `__init__` calls a base `__init__`."""
    stored: set[str] = set()
    calls_init = False
    for stmt in defs:
        for sub in walk(stmt):
            if _is_self_store(sub):
                stored.add(sub.attr)  # type: ignore[attr-defined]
            elif _is_init_call(stmt, sub):
                calls_init = True
    return stored, calls_init


def _subclass_detail(node: ast.ClassDef, defs: list[ast.FunctionDef | ast.AsyncFunctionDef], lines: list[str],
                     assigned: set[str], calls_super_init: bool) -> dict[str, Any]:
    """What a `subclass` use records of the plugin class: its methods (those under a version guard too,
    the first definition of a name winning), their bodies, the attributes it sets, how it is registered."""
    methods: dict[str, Signature] = {}
    bodies: dict[str, str] = {}
    init_attrs: set[str] = set()
    for stmt in defs:
        methods.setdefault(stmt.name, signature_of(stmt))
        bodies.setdefault(stmt.name, body_text(lines, body_span(stmt)))
        if stmt.name == "__init__":
            init_attrs.update(sub.attr for sub in walk(stmt) if _is_self_store(sub))  # type: ignore[attr-defined]
    return {"methods": methods, "attrs": sorted(assigned), "init_attrs": sorted(init_attrs),
            "defines_init": "__init__" in methods,
            "calls_super_init": calls_super_init, "bodies": bodies, "decorated": bool(node.decorator_list),
            "registered": any(isinstance(d, ast.Call) and (dotted_name(d.func) or "").endswith("register_oot")
                              for d in node.decorator_list)}


def _class_fact(node: ast.ClassDef, module: str, site: Site, conditions: tuple[Condition, ...], lines: list[str],
                defs: list[ast.FunctionDef | ast.AsyncFunctionDef], assigned: set[str], calls_super_init: bool,
                upstream_bases: list[str], plugin_names: dict[str, str]) -> ClassFact:
    """A top-level class for the inheritance pass; what a subclass use needs only when it has plugin bases."""
    dotted = f"{module}.{node.name}" if module else node.name
    plugin_bases = tuple(p for b in node.bases
                         if (p := plugin_names.get(dotted_name(b.value if isinstance(b, ast.Subscript) else b) or ""))
                         and p != dotted)
    methods = {stmt.name for stmt in defs}
    detail = _subclass_detail(node, defs, lines, assigned, calls_super_init) if plugin_bases else {}
    return ClassFact(dotted, site, conditions, tuple(upstream_bases), plugin_bases, tuple(sorted(methods | assigned)), detail)


class _UseVisitor(FastVisitor):
    predicates: Predicates = NO_PREDICATES  # the module's version predicates (set per file)
    def __init__(self, path: str, lines: list[str], packages: frozenset[str], aliases: dict[str, str],
                 module: str = "", is_package: bool = False, plugin_packages: frozenset[str] = frozenset(),
                 singletons: dict[str, str] | None = None, tree: ast.Module | None = None):
        self.path = path
        self.lines = lines
        self.packages = packages
        self.aliases = aliases
        self.uses: list[Use] = []
        self.conditions: list[Condition] = []
        self.try_counter = 0
        self.class_bases: list[str | None] = []  # upstream base of each enclosing class
        self.module = module
        self.is_package = is_package
        self.plugin_packages = plugin_packages
        self.singletons = singletons or {}  # dotted upstream object -> dotted upstream class (current_platform)
        self.guard_blocks: list[GuardBlock] = []
        self.internal_imports: list[tuple[str, tuple[Condition, ...]]] = []
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.plugin_classes: dict[str, str] = {}  # local name -> dotted plugin class (imported or defined here)
        self.class_types: dict[str, dict[str, str]] = {}
        self.class_facts: list[ClassFact] = []
        self.class_refs: list[tuple[str, tuple[Condition, ...]]] = []
        self.class_stores: list[tuple[str, str, str, tuple[str, ...]]] = []
        if tree is not None:
            for stmt in _function_defs(tree.body):
                self.functions.setdefault(stmt.name, stmt)
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes[node.name] = node
                    self.plugin_classes[node.name] = f"{module}.{node.name}" if module else node.name
        self.scopes: list[dict[str, str]] = [{}]  # local name -> dotted upstream class of its value
        self.self_types: list[dict[str, str]] = []  # per enclosing class: self.<attr> -> dotted upstream class
        self.self_class: list[dict[str, Any] | None] = []  # per enclosing class with an upstream base: its facts
        self.self_returns: list[dict[str, str]] = []  # per enclosing class: method -> upstream class its return annotation names
        self.methods: list[ast.FunctionDef | ast.AsyncFunctionDef] = []  # enclosing function definitions
        self.dropped_results: set[int] = set()  # ids of calls that are whole expression statements
        self.unpacked_results: dict[int, int] = {}  # ids of calls whose value is unpacked -> how many names

    # -- helpers

    def site(self, node: ast.AST) -> Site:
        line = getattr(node, "lineno", 0)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return Site(self.path, line, code[:200])

    def add(self, kind: str, symbol: str, node: ast.AST, **detail: Any) -> None:
        self.uses.append(Use(kind, symbol, self.site(node), tuple(self.conditions), detail))

    def upstream_dotted(self, node: ast.AST) -> str | None:
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base

    def visit_block(self, body: list[ast.stmt], cond: Condition | None) -> None:
        if cond is not None:
            self.conditions.append(cond)
        for stmt in body:
            self.visit(stmt)
        if cond is not None:
            self.conditions.pop()

    # -- conditions

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        kind, source = _enter_if(self, node)
        self.visit_block(node.body, Condition(kind, source, False, line=node.lineno))
        if node.orelse:
            self.visit_block(node.orelse, Condition(kind, source, True, line=node.lineno))

    def visit_IfExp(self, node: ast.IfExp) -> None:
        source = _ternary_block(self, node, tuple(self.conditions))
        self.visit(node.test)
        self.conditions.append(Condition("if", source, False, line=node.lineno))
        self.visit(node.body)
        self.conditions[-1] = Condition("if", source, True, line=node.lineno)
        self.visit(node.orelse)
        self.conditions.pop()

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        # `vllm_version_is(OLD) and f()`: f() runs only where the guard holds (`or`: where it fails),
        # like an `if` body. Only version/hasattr operands become conditions (`x and x.f()` is no lane);
        # line 0: no guard block of its own (the verdicts and drop edits stay with the `if` statements).
        pushed = 0
        for value in node.values[:-1]:
            self.visit(value)
            source, _ = self.predicates.expand(value)
            if _VERSIONISH_TEST.search(source) or "hasattr(" in source:
                self.conditions.append(Condition("if", source, isinstance(node.op, ast.Or)))
                pushed += 1
        self.visit(node.values[-1])
        del self.conditions[len(self.conditions) - pushed:]

    def visit_Name(self, node: ast.Name) -> None:
        dotted = self.plugin_classes.get(node.id)
        if dotted is not None and isinstance(node.ctx, ast.Load):
            self.class_refs.append((dotted.rsplit(".", 1)[-1], tuple(self.conditions)))

    def visit_Constant(self, node: ast.Constant) -> None:
        name = _class_string(node.value, self.plugin_packages)
        if name:
            self.class_refs.append((name, tuple(self.conditions)))

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(h) for h in node.handlers)
        self.try_counter += 1
        tid = self.try_counter
        caught = _caught_names([h for h in node.handlers if _catches_import_error(h)])
        self.visit_block(node.body, Condition("try", caught, False, tid) if guarded else None)
        for handler in node.handlers:
            self.visit_block(handler.body, Condition("handler", "", False, tid) if _catches_import_error(handler) else None)
        self.visit_block(node.orelse, None)
        self.visit_block(node.finalbody, None)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            self.visit(item.context_expr)
        suppress = [i for i in node.items if _is_suppress_import(i)]
        caught = ",".join((dotted_name(a) or "?").rsplit(".", 1)[-1] for i in suppress for a in i.context_expr.args)  # type: ignore[attr-defined]
        self.visit_block(node.body, Condition("suppress", caught) if suppress else None)

    # -- imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] in self.packages:
                self.add("module", alias.name, node)
            elif alias.name.split(".")[0] in self.plugin_packages:
                self.internal_imports.append((alias.name, tuple(self.conditions)))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or (node.module and node.module.split(".")[0] in self.plugin_packages):
            from porter.upgrade.index import _absolute

            base = _absolute(self.module, self.is_package, node.level, node.module) if node.level else node.module or ""
            if base:
                self.internal_imports.append((base, tuple(self.conditions)))
                for alias in node.names:  # `from pkg import submodule`
                    if alias.name != "*":
                        self.internal_imports.append((f"{base}.{alias.name}", tuple(self.conditions)))
                        if alias.name[:1].isupper():
                            self.plugin_classes[alias.asname or alias.name] = f"{base}.{alias.name}"
            return
        if not node.module or node.module.split(".")[0] not in self.packages:
            return
        for alias in node.names:
            if alias.name == "*":
                self.add("module", node.module, node, star=True)
            else:
                self.add("import", f"{node.module}.{alias.name}", node, module=node.module, name=alias.name)

    # -- classes, calls, attributes, monkeypatches

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for dec in node.decorator_list:
            self.visit(dec)
        upstream_base = None
        defs = _function_defs(node.body)
        plugin_methods = {stmt.name for stmt in defs}
        assigned: set[str] = set(_class_assigned_names(node.body))
        self_types: dict[str, str] = {}
        calls_super_init = False
        stored_in: dict[str, list[tuple[str, int]]] = {}  # self.<x> -> (method, line) of each store
        held: list[tuple[str, str]] = []  # (plugin class, attr) of each `self.<attr> = PluginCls(...)`
        for stmt in defs:  # one walk per method: self.<x> stores (with their types), super().__init__ calls
            params = None
            is_init = stmt.name == "__init__"
            for sub in walk(stmt):
                # the three tests below ask for disjoint node types: dispatch on the type first (most
                # nodes are none of them), then the test (_is_self_store, _is_init_call) in full
                kind = sub.__class__
                if kind is _ATTRIBUTE:
                    if _is_self_store(sub):
                        assigned.add(sub.attr)  # type: ignore[attr-defined]
                        stored_in.setdefault(sub.attr, []).append((stmt.name, sub.lineno))  # type: ignore[attr-defined]
                elif kind is _CALL:
                    if is_init and _is_init_call(stmt, sub):
                        calls_super_init = True
                elif kind is _ASSIGN or kind is _ANN_ASSIGN:
                    target = sub.targets[0] if isinstance(sub, ast.Assign) and len(sub.targets) == 1 else getattr(sub, "target", None)
                    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
                        continue
                    value = sub.value
                    found = self.type_of_annotation(getattr(sub, "annotation", None)) or self.type_of_value(value)
                    if found is None and isinstance(value, ast.Name):
                        if params is None:
                            params = {a.arg: a.annotation for a in [*stmt.args.posonlyargs, *stmt.args.args, *stmt.args.kwonlyargs]}
                        if value.id in params:
                            found = self.type_of_annotation(params[value.id])  # self.runner = runner  (runner: Cls)
                    if found:
                        self_types.setdefault(target.attr, found)
                        if found.startswith(PLUGIN) and isinstance(value, ast.Call) and not self.self_types:
                            held.append((found[len(PLUGIN):].rsplit(".", 1)[-1], target.attr))
        facts: dict[str, Any] | None = None
        if not self.self_types:  # a top-level class: what other files' receivers of it can reach
            types = {k: v for k, v in self_types.items() if not v.startswith((FACTORY, PLUGIN))}
            if types:
                self.class_types[self.plugin_classes.get(node.name, node.name)] = types
        for base in node.bases:
            target = base.value if isinstance(base, ast.Subscript) else base
            dotted = self.upstream_dotted(target)
            if dotted:
                if upstream_base is None:  # one record for every upstream base of the class
                    detail = _subclass_detail(node, defs, self.lines, assigned, calls_super_init)
                upstream_base = upstream_base or dotted
                self.add("subclass", dotted, node, cls=node.name, **detail)
            else:
                self.visit(base)
        bases = [b.value if isinstance(b, ast.Subscript) else b for b in node.bases]  # Generic[T] -> Generic
        if upstream_base is not None and all(self.upstream_dotted(b) or (dotted_name(b) or "").rsplit(".", 1)[-1] in PLAIN_BASES
                                             for b in bases):
            # Every base is upstream: a `self.x` the class neither defines nor sets comes from upstream.
            facts = {"base": upstream_base, "cls": node.name, "known": plugin_methods | assigned, "seen": Counter(),
                     "stored_in": stored_in}
        if not self.self_types:  # a top-level class (not a method's or a nested one)
            upstream = [d for b in bases if (d := self.upstream_dotted(b))]
            written = tuple(self.upstream_dotted(b) or dotted_name(b) or "?" for b in bases)
            self.class_stores.extend((cls, node.name, attr, written) for cls, attr in held)
            self.class_facts.append(_class_fact(node, self.module, self.site(node), tuple(self.conditions), self.lines, defs,
                                                assigned, calls_super_init, upstream, self.plugin_classes))
        self.self_types.append(self_types)
        # `x = self.m(...)` with `def m(...) -> UpstreamCls`: x is typed by the plugin's own annotation
        self.self_returns.append({stmt.name: found for stmt in defs if (found := self.type_of_annotation(stmt.returns))})
        self.self_class.append(facts)
        self.class_bases.append(upstream_base)
        for stmt in node.body:
            self.visit(stmt)
        self.class_bases.pop()
        self.self_class.pop()
        self.self_returns.pop()
        self.self_types.pop()

    # -- typed receivers: self.x = Cls(...), x: Cls, registry singletons

    def type_of_annotation(self, node: ast.AST | None) -> str | None:
        if node is None:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                node = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # Cls | None
            left, right = self.type_of_annotation(node.left), self.type_of_annotation(node.right)
            return left or right
        if isinstance(node, ast.Subscript) and (dotted_name(node.value) or "").rsplit(".", 1)[-1] == "Optional":
            return self.type_of_annotation(node.slice)
        dotted = self.upstream_dotted(node)
        return dotted if dotted and dotted.rsplit(".", 1)[-1][:1].isupper() else None

    def type_of_value(self, node: ast.AST | None) -> str | None:
        """The upstream class of an expression's value, when the plugin's code says it."""
        if isinstance(node, ast.Call):
            dotted = self.upstream_dotted(node.func)
            if dotted and dotted.rsplit(".", 1)[-1][:1].isupper():
                return dotted  # Cls(...)
            if dotted:
                return f"{FACTORY}{dotted}"  # upstream_fn(...): its return annotation decides (drift.py)
            if isinstance(node.func, ast.Name) and node.func.id in self.plugin_classes and not any(
                    node.func.id in scope for scope in self.scopes):
                return f"{PLUGIN}{self.plugin_classes[node.func.id]}"  # PluginCls(...): typed through that class
            func = node.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self" \
                    and self.self_returns:
                return self.self_returns[-1].get(func.attr)  # self.m(...): the method's return annotation
            return None
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self.receiver_type(node)
        return None

    def receiver_type(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if node.id in scope:
                    return scope[node.id]
            dotted = self.aliases.get(node.id)
            return self.singletons.get(dotted) if dotted else None
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and self.self_types:
                found = self.self_types[-1].get(node.attr)
                if found:
                    return found
                facts = self.self_class[-1] if self.self_class else None
                if facts and node.attr not in facts["known"] and not node.attr.startswith("__"):
                    return f"{facts['base']}.{node.attr}"  # set by the upstream base (its __init__): typed by drift
            dotted = self.upstream_dotted(node)
            if dotted:
                return self.singletons.get(dotted)
            if isinstance(node.value, (ast.Name, ast.Attribute)) and not node.attr.startswith("__"):
                inner = self.receiver_type(node.value)  # cfg.scheduler_config: "T.scheduler_config", typed by drift
                if inner and not inner.startswith(FACTORY):
                    return f"{inner}.{node.attr}"
        return None

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call):
            self.dropped_results.add(id(node.value))
        self.visit(node.value)

    def visit_Assign(self, node: ast.Assign) -> None:
        if (isinstance(node.value, ast.Call) and len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List))
                and not any(isinstance(e, ast.Starred) for e in node.targets[0].elts)):
            self.unpacked_results[id(node.value)] = len(node.targets[0].elts)
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)
            if isinstance(target, ast.Name):
                keys = self.dict_keys(node.value) if isinstance(node.value, (ast.Dict, ast.Call)) else None
                if keys is not None:
                    self.scopes[-1][f"**{target.id}"] = ",".join(keys)
                else:
                    self.scopes[-1].pop(f"**{target.id}", None)
                found = self.type_of_value(node.value)
                if found:
                    self.scopes[-1][target.id] = found
                else:
                    self.scopes[-1].pop(target.id, None)
            self.patch_replacement(target, node.value, node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)
        self.visit(node.annotation)
        if isinstance(node.target, ast.Name):
            found = self.type_of_annotation(node.annotation) or self.type_of_value(node.value)
            if found:
                self.scopes[-1][node.target.id] = found

    def patch_replacement(self, target: ast.AST, value: ast.AST, node: ast.AST, dotted: str | None = None) -> None:
        """`upstream.attr = plugin_fn` / `= PluginCls`: what replaces the upstream object (signature, body, bases)."""
        dotted = dotted or (self.upstream_dotted(target) if isinstance(target, ast.Attribute) else None)
        if not dotted:
            return
        name = value.id if isinstance(value, ast.Name) else None
        detail: dict[str, Any] = {}
        method = self.class_method(value)
        if method is not None:  # `Upstream.m = PluginCls.m`: the plugin class's own function replaces it
            detail = {"replacement": f"{value.value.id}.{method.name}", "replacement_signature": signature_of(method),  # type: ignore[attr-defined]
                      "replacement_body": body_text(self.lines, body_span(method)),
                      "replacement_decorators": [dotted_name(d) or "" for d in method.decorator_list],
                      "replacement_site": self.site(method).to_dict()}
        elif isinstance(value, ast.Lambda):
            from types import SimpleNamespace

            detail = {"replacement": "<lambda>", "replacement_signature": signature_of(SimpleNamespace(args=value.args, returns=None))}  # type: ignore[arg-type]
        elif name and name in self.functions:
            fn = self.functions[name]
            detail = {"replacement": name, "replacement_signature": signature_of(fn), "replacement_body": body_text(self.lines, body_span(fn)),
                      "replacement_decorators": [dotted_name(d) or "" for d in fn.decorator_list],
                      "replacement_site": self.site(fn).to_dict()}  # where a fix of the replacement goes
        elif name and name in self.classes:
            cls = self.classes[name]
            bases = [self.upstream_dotted(b) or (dotted_name(b) or "") for b in cls.bases]
            members = sorted({f.name for f in _function_defs(cls.body)} | set(_class_assigned_names(cls.body)))
            detail = {"replacement": name, "replacement_kind": "class", "replacement_bases": bases, "replacement_members": members}
        if detail:
            self.add("patch", dotted, node, **detail)

    def class_method(self, value: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The function `PluginCls.m` names: `m` defined in the body of a class of this module (None for
        anything else, an inherited member included: its definition is not in this file's class body)."""
        if not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id in self.classes):
            return None
        return next((f for f in _function_defs(self.classes[value.value.id].body) if f.name == value.attr), None)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for dec in node.decorator_list:
            self.visit(dec)
        self.visit(node.args)
        if node.returns is not None:
            self.visit(node.returns)
        scope: dict[str, str] = {}
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            found = self.type_of_annotation(arg.annotation)
            if found:
                scope[arg.arg] = found
        self.scopes.append(scope)
        self.methods.append(node)
        for stmt in node.body:
            self.visit(stmt)
        self.methods.pop()
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        callee = self.upstream_dotted(func)
        if callee is None and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
            inner = func.value
            if isinstance(inner.func, ast.Name) and inner.func.id == "super" and self.class_bases and self.class_bases[-1]:
                base = self.class_bases[-1]
                # `super(Upstream, self).m(...)` skips Upstream itself: the next class of its MRO answers (drift)
                named = self.upstream_dotted(inner.args[0]) if inner.args else None
                after = named is not None
                base = named or base
                callee = base if func.attr == "__init__" else f"{base}.{func.attr}"
                self.record_call(callee, node, via_super=True, method=func.attr, after=after)
                for arg in (*node.args, *(k.value for k in node.keywords)):
                    self.visit(arg)
                return
        if callee is None and isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
            target = self.upstream_dotted(node.args[0])
            attr = node.args[1]
            if target and isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self.add("monkeypatch", f"{target}.{attr.value}", node, via="setattr")
                if len(node.args) >= 3:
                    self.patch_replacement(node.args[0], node.args[2], node, dotted=f"{target}.{attr.value}")
        receiver = self.receiver_type(func.value) if isinstance(func, ast.Attribute) else None
        if receiver is not None:
            callee = None  # the receiver's class decides, not the singleton's module attribute
        if isinstance(func, ast.Attribute) and (callee is None or receiver is not None):
            if receiver is not None:  # self.runner.f(...), current_platform.f(...)
                symbol = f"{receiver}.{func.attr}"
                self.add("attribute", symbol, node, via="instance")
                self.record_call(symbol, node, bound=True, method=func.attr, via="instance")
                for arg in (*node.args, *(k.value for k in node.keywords)):
                    self.visit(arg)
                return
            if isinstance(func.value, ast.Name) and func.value.id == "self" and self.self_class and self.self_class[-1]:
                facts = self.self_class[-1]
                if func.attr not in facts["known"]:  # a base method the plugin class calls on itself
                    symbol = f"{facts['base']}.{func.attr}"
                    self.add("attribute", symbol, node, via="self")
                    self.record_call(symbol, node, bound=True, method=func.attr, via="self")
                    for arg in (*node.args, *(k.value for k in node.keywords)):
                        self.visit(arg)
                    return
        if callee is not None:
            self.record_call(callee, node)
        self.generic_visit(node)

    def record_call(self, callee: str, node: ast.Call, via_super: bool = False, method: str = "", bound: bool = False,
                    via: str = "", after: bool = False) -> None:
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        # `**dict(a=1)` / `**{"a": 1}` / `**kw` where kw = {...} in this function: the keywords are known.
        star_kwargs = False
        for k in node.keywords:
            if k.arg is None:
                known = self.dict_keys(k.value)
                if known is None:
                    star_kwargs = True
                else:
                    keywords.extend(known)
        star_args = any(isinstance(a, ast.Starred) for a in node.args)
        positional = sum(1 for a in node.args if not isinstance(a, ast.Starred))
        extra: dict[str, Any] = {"bound": True, "via": via} if bound else {}
        if callee.endswith(".register_oot"):  # CustomOp.register_oot(_decorated_op_cls=PluginCls, name=...)
            cls_arg = next((k.value for k in node.keywords if k.arg == "_decorated_op_cls"), node.args[0] if node.args else None)
            if isinstance(cls_arg, ast.Name):
                extra["registers"] = cls_arg.id  # upstream now builds this plugin class wherever it builds the named op
        if id(node) in self.dropped_results:
            extra["result"] = "ignored"  # a statement of its own: the returned value is never used
        elif id(node) in self.unpacked_results:
            extra["result"] = f"unpack:{self.unpacked_results[id(node)]}"  # a, b = f(...)
        if after:
            extra["after"] = True  # super(Cls, self): resolved past Cls in its MRO
        self.add("call", callee, node, keywords=keywords, positional=positional, star_args=star_args,
                 star_kwargs=star_kwargs, via_super=via_super, method=method, **extra)

    def dict_keys(self, node: ast.AST) -> list[str] | None:
        if isinstance(node, ast.Dict):
            if all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
                return [k.value for k in node.keys]  # type: ignore[union-attr]
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
            if all(k.arg is not None for k in node.keywords):
                return [k.arg for k in node.keywords]  # type: ignore[misc]
            return None
        if isinstance(node, ast.Name):
            for scope in reversed(self.scopes):
                if f"**{node.id}" in scope:
                    return scope[f"**{node.id}"].split(",") if scope[f"**{node.id}"] else []
        return None

    def typed_chain(self, node: ast.Attribute) -> str | None:
        """`x.a.b` where x (a local, a parameter, self.x) has a known upstream class T: "T.a.b"."""
        attrs: list[str] = []
        inner: ast.AST = node
        while isinstance(inner, ast.Attribute):
            attrs.append(inner.attr)
            inner = inner.value
            receiver = (self.receiver_type(inner) if isinstance(inner, (ast.Name, ast.Attribute))
                        else self.type_of_value(inner) if isinstance(inner, ast.Call) else None)
            # ctx = get_forward_context(); ctx.virtual_engine, or get_forward_context().dp_metadata.x: members of
            # what the factory returns, typed by drift (fields followed through their annotations)
            if receiver is not None:
                return ".".join([receiver, *reversed(attrs)])
        return None

    def _deleted_before_stored(self, node: ast.Attribute) -> bool:
        """`del self.x` in a method that stores self.x only after it (or not at all), while no other
        method of the class stores it: the attribute it deletes is one a base `__init__` set."""
        facts = self.self_class[-1]
        method = self.methods[-1] if self.methods else None
        stored = facts.get("stored_in", {}).get(node.attr, ())
        if method is None or any(name != method.name for name, _ in stored):
            return False
        return all(line > node.lineno for name, line in stored)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self.upstream_dotted(node)
        if dotted is not None and "." in dotted_name(node):  # type: ignore[operator]
            kind = "monkeypatch" if isinstance(node.ctx, ast.Store) else "attribute"
            self.add(kind, dotted, node)
            return  # the inner prefix of the chain is not a separate use
        chain = self.typed_chain(node) if dotted is None else None
        if chain is not None and not node.attr.startswith("__"):
            # A read (or write) through a typed receiver: the member must exist on its class at the target.
            self.add("attribute", chain, node, via="instance", store=isinstance(node.ctx, ast.Store))
            inner = node.value
            while isinstance(inner, ast.Attribute):  # the chain's prefixes are not separate uses
                inner = inner.value
            self.visit(inner)
            return
        if (isinstance(node.ctx, (ast.Load, ast.Del)) and isinstance(node.value, ast.Name) and node.value.id == "self"
                and self.self_class and self.self_class[-1] and not node.attr.startswith("__")):
            facts = self.self_class[-1]
            # `del self.x` before the class's own `self.x = ...`: x must be there already, so the base set it
            from_base = node.attr not in facts["known"] or (isinstance(node.ctx, ast.Del) and self._deleted_before_stored(node))
            if from_base and facts["seen"][node.attr] < _SELF_SITES:
                facts["seen"][node.attr] += 1  # an attribute the upstream base provides (its __init__ or members)
                self.add("attribute", f"{facts['base']}.{node.attr}", node, via="self")
        self.generic_visit(node)


class _LightScan:
    """Statements only: plugin-internal imports under their conditions, and version guard blocks."""

    predicates: Predicates = NO_PREDICATES

    def __init__(self, path: str, lines: list[str], module: str, is_package: bool, plugin_packages: frozenset[str]):
        self.path, self.lines, self.module, self.is_package = path, lines, module, is_package
        self.plugin_packages = plugin_packages
        self.conditions: list[Condition] = []
        self.guard_blocks: list[GuardBlock] = []
        self.internal_imports: list[tuple[str, tuple[Condition, ...]]] = []
        self.try_counter = 0
        self.plugin_names: dict[str, str] = {}  # local name -> dotted plugin class (imported or defined here)
        self.class_facts: list[ClassFact] = []
        self.depth = 0  # functions and classes entered: only top-level classes are facts

    def block(self, body: list[ast.stmt], cond: Condition | None) -> None:
        if cond is not None:
            self.conditions.append(cond)
        self.body(body)
        if cond is not None:
            self.conditions.pop()

    def body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If):
                kind, source = _enter_if(self, stmt)
                self.block(stmt.body, Condition(kind, source, False, line=stmt.lineno))
                self.block(stmt.orelse, Condition(kind, source, True, line=stmt.lineno))
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                self.try_counter += 1
                guarded = any(_catches_import_error(h) for h in stmt.handlers)  # type: ignore[attr-defined]
                self.block(stmt.body, Condition("try", "ImportError", False, self.try_counter) if guarded else None)  # type: ignore[attr-defined]
                for handler in stmt.handlers:  # type: ignore[attr-defined]
                    self.block(handler.body, Condition("handler", "", False, self.try_counter) if guarded else None)
                self.body(stmt.orelse + stmt.finalbody)  # type: ignore[attr-defined]
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if isinstance(stmt, ast.ClassDef) and not self.depth:
                    defs = _function_defs(stmt.body)
                    stored, calls_init = _self_stores(defs)
                    line = self.lines[stmt.lineno - 1].strip() if 0 < stmt.lineno <= len(self.lines) else ""
                    self.class_facts.append(_class_fact(stmt, self.module, Site(self.path, stmt.lineno, line[:200]),
                                                        tuple(self.conditions), self.lines, defs,
                                                        stored | set(_class_assigned_names(stmt.body)), calls_init, [],
                                                        self.plugin_names))
                self.depth += 1
                self.body(stmt.body)
                self.depth -= 1
            elif isinstance(stmt, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                self.body(stmt.body + getattr(stmt, "orelse", []))
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.name.split(".")[0] in self.plugin_packages:
                        self.internal_imports.append((alias.name, tuple(self.conditions)))
            elif isinstance(stmt, ast.ImportFrom):
                if stmt.level or (stmt.module and stmt.module.split(".")[0] in self.plugin_packages):
                    from porter.upgrade.index import _absolute

                    base = _absolute(self.module, self.is_package, stmt.level, stmt.module) if stmt.level else stmt.module or ""
                    if base:
                        self.internal_imports.append((base, tuple(self.conditions)))
                        self.internal_imports.extend((f"{base}.{a.name}", tuple(self.conditions)) for a in stmt.names
                                                     if a.name != "*")

    def ternaries(self, tree: ast.AST) -> None:
        for node in walk(tree):
            if isinstance(node, ast.IfExp):
                _ternary_block(self, node, ())


def module_of(path: str) -> tuple[str, bool]:
    """`pkg/sub/mod.py` -> (`pkg.sub.mod`, False); `pkg/__init__.py` -> (`pkg`, True)."""
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def scan_source(path: str, source: bytes, packages: Iterable[str], plugin_packages: Iterable[str] = (),
                singletons: dict[str, str] | None = None, module_prefix: str = "") -> FileUsage:
    """One plugin file's uses. `module_prefix` names the package of the scanned root when the
    plugin tree is the package directory itself (`vllm_ascend/` scanned as `ops/x.py`)."""
    with gcpause.paused():
        return _scan_source(path, source, packages, plugin_packages, singletons, module_prefix)


def _scan_source(path: str, source: bytes, packages: Iterable[str], plugin_packages: Iterable[str] = (),
                singletons: dict[str, str] | None = None, module_prefix: str = "") -> FileUsage:
    packages = frozenset(packages)
    module, is_package = module_of(path)
    if module_prefix:
        module = f"{module_prefix}.{module}" if module else module_prefix
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        return FileUsage(path, [], {}, f"{type(exc).__name__}: {exc}", module=module)
    collector = _AliasCollector(packages)
    collector.collect(tree)
    plugin_packages = frozenset(plugin_packages)
    lines = source.decode("utf-8", errors="replace").splitlines()
    foreign = plugin_imports(tree, module, is_package, plugin_packages)
    version_text = b"version" in source.lower()  # no version text: no predicate of its own, no version test used as a value
    # A module with no version text has no predicate of its own; what it imports from the plugin may be one.
    predicates = find_predicates(tree, foreign) if version_text else \
        Predicates([], foreign=foreign) if foreign else NO_PREDICATES
    exports = predicates.exports()
    values = _value_blocks(path, tree, predicates, source) if version_text else []
    if not collector.aliases and not any(p.encode() in source for p in packages):
        # No upstream use: only the plugin-internal imports and the guard blocks matter (a statement walk).
        light = _LightScan(path, lines, module, is_package, plugin_packages)
        light.predicates = predicates
        light.plugin_names = {**foreign, **{n.name: f"{module}.{n.name}" for n in tree.body if isinstance(n, ast.ClassDef)}}
        light.body(tree.body)
        if version_text or foreign:
            light.ternaries(tree)
        return FileUsage(path, [], {}, guard_blocks=light.guard_blocks + _predicate_blocks(path, predicates) + values,
                         internal_imports=light.internal_imports, module=module, exports=exports,
                         class_facts=light.class_facts,
                         class_refs=light_class_refs(tree, light.plugin_names, plugin_packages)
                         if any(p.encode() in source for p in plugin_packages) else [])
    visitor = _UseVisitor(path, lines, packages, collector.aliases, module, is_package, plugin_packages,
                          singletons, tree)
    visitor.predicates = predicates
    visitor.visit(tree)
    return FileUsage(path, visitor.uses, collector.aliases,
                     guard_blocks=visitor.guard_blocks + _predicate_blocks(path, predicates) + values,
                     internal_imports=visitor.internal_imports, module=module, exports=exports,
                     class_types=visitor.class_types, class_facts=visitor.class_facts, class_refs=visitor.class_refs,
                     class_stores=visitor.class_stores)


def plugin_files(root: Path, excludes: Iterable[str] = DEFAULT_EXCLUDES) -> list[tuple[str, Path]]:
    excludes = tuple(excludes)
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__"
                             and not any(fnmatch.fnmatch(f"{rel_dir}/{d}/x".lstrip("/"), pat) for pat in excludes))
        for name in sorted(filenames):
            if name.endswith(".py"):
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if not any(fnmatch.fnmatch(rel, pat) for pat in excludes):
                    out.append((rel, Path(dirpath) / name))
    return out


# the code a file's scan depends on (its pickle holds ClassFact, Condition, Site): its hash names the cache generation
_SCANNER_MODULES = ("usage.py", "index.py", "inherit.py", "predicates.py", "bindings.py", "guards.py", "models.py",
                    "values.py")
_PARALLEL_THRESHOLD = 48  # uncached files below which a process pool costs more than it saves


def _scan_job(job: tuple) -> bytes:
    """Scan one file (in a worker): the pickled FileUsage, which the parent loads and packs."""
    rel, path, packages, plugin_packages, singletons, prefix = job
    return pickle.dumps(scan_source(rel, Path(path).read_bytes(), packages, plugin_packages, dict(singletons), prefix),
                        protocol=pickle.HIGHEST_PROTOCOL)


def scan_plugin(
    root: Path,
    packages: Iterable[str],
    cache_dir: Path | None = None,
    excludes: Iterable[str] = DEFAULT_EXCLUDES,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
    plugin_packages: Iterable[str] = (),
    singletons: dict[str, str] | None = None,
    module_prefix: str = "",
    pool: Any = None,
) -> list[FileUsage]:
    """Scan every Python file of the plugin tree (read only), caching each file's scan by content
    hash; many uncached files are scanned in parallel processes (`pool`: the run's shared ones)."""
    return start_scan(root, packages, cache_dir, excludes, workers, plugin_packages, singletons, module_prefix,
                      pool)(progress)


def start_scan(
    root: Path,
    packages: Iterable[str],
    cache_dir: Path | None = None,
    excludes: Iterable[str] = DEFAULT_EXCLUDES,
    workers: int | None = None,
    plugin_packages: Iterable[str] = (),
    singletons: dict[str, str] | None = None,
    module_prefix: str = "",
    pool: Any = None,
) -> Callable[[Callable[[int], None] | None], list[FileUsage]]:
    """scan_plugin() in two steps: the cache is read and the uncached files' jobs are submitted to
    `pool` now; the returned function (given the progress callback) collects the answers. A caller
    can so start the scan while other work (an upstream archive unpacking) still runs. The cache is
    one pack per plugin tree (porter.upgrade.packs), records by file content: the collector writes
    it once, with the records of the files scanned now, and drops those of files gone or edited."""
    packages = tuple(sorted(set(packages)))
    plugin_packages = tuple(sorted(set(plugin_packages)))
    singleton_items = tuple(sorted((singletons or {}).items()))
    code = hashlib.blake2b(b"".join(Path(__file__).with_name(n).read_bytes() for n in _SCANNER_MODULES),
                           digest_size=4).hexdigest()  # a scanner change never reads older entries
    cache_root = Path(cache_dir) / "usage" / f"v{USAGE_VERSION}-{code}" if cache_dir else None
    pack = Pack(pack_path(cache_root, Path(root), repr((packages, plugin_packages, singleton_items, module_prefix))))
    results: dict[str, FileUsage] = {}
    pending: list[tuple[str, Path, str]] = []
    order: list[str] = []
    hits = 0  # cache hits, reported to the progress callback when it is known
    for rel, path in plugin_files(Path(root), excludes):
        order.append(rel)
        source = path.read_bytes()
        digest = hashlib.blake2b(digest_size=20)
        for part in (rel, ",".join(packages), ",".join(plugin_packages), repr(singleton_items), module_prefix):
            digest.update(part.encode())
            digest.update(b"\0")
        digest.update(source)
        key = digest.hexdigest()
        blob = pack.get(key)
        if blob is not None:
            try:
                results[rel] = pickle.loads(blob)
                hits += 1
                continue
            except Exception:  # noqa: BLE001 - damaged record: scan again
                pass
        pending.append((rel, path, key))
    workers = workers or min(4, os.cpu_count() or 1)
    if len(pending) >= _PARALLEL_THRESHOLD and (workers > 1 or pool is not None):
        from concurrent.futures import ProcessPoolExecutor

        jobs = [(rel, str(path), packages, plugin_packages, singleton_items, module_prefix) for rel, path, _ in pending]
        if pool is not None:
            blobs: Iterable[bytes | None] = pool.map(_scan_job, jobs, chunksize=8)  # loaded below as they arrive
        else:
            with ProcessPoolExecutor(max_workers=workers) as own:
                blobs = list(own.map(_scan_job, jobs, chunksize=8))
    else:
        blobs = [None] * len(pending)

    def finish(progress: Callable[[int], None] | None = None) -> list[FileUsage]:
        if progress and hits:
            progress(hits)
        for (rel, path, key), blob in zip(pending, blobs):
            if blob is None:
                usage = scan_source(rel, path.read_bytes(), packages, plugin_packages, dict(singleton_items), module_prefix)
                if pack.path is not None:
                    pack.put(key, pickle.dumps(usage, protocol=pickle.HIGHEST_PROTOCOL))
            else:
                usage = pickle.loads(blob)
                pack.put(key, blob)
            results[rel] = usage
            if progress:
                progress(1)
        pack.save()  # only this tree's current files: a record of an edited file goes
        return [results[rel] for rel in order]

    return finish


def summarize(files: list[FileUsage]) -> UsageSummary:
    uses = [u for f in files for u in f.uses]
    return UsageSummary(
        files_scanned=len(files),
        files_using=sum(1 for f in files if f.uses),
        uses=len(uses),
        by_kind=dict(sorted(Counter(u.kind for u in uses).items())),
        modules=len({u.symbol if u.kind == "module" else u.detail.get("module", u.symbol.rsplit(".", 1)[0]) for u in uses}),
        symbols=len({u.symbol for u in uses}),
        syntax_errors=[f"{f.path}: {f.syntax_error}" for f in files if f.syntax_error],
    )
