"""Version predicates: names a plugin binds to a version test and then branches on
(`is_legacy = vllm_version_is("0.10.0")` ... `if is_legacy:`). A guard on such a name is a
version guard; its test is read with the predicate's expression in place of the name, and the
assignment itself is a guard block (dropped with the branches that read it, or retargeted).

Pure over one module's AST: `find_predicates(tree)` once per file, then `expand(test)` per test.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from porter.upgrade.index import statements, walk

_VERSIONISH = re.compile(r"version|VERSION")
_TESTS = (ast.Call, ast.Compare, ast.BoolOp, ast.UnaryOp)  # a test, not a version string or tuple
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class Predicate:
    name: str
    source: str  # the version test the name holds
    line: int
    end_line: int
    scope: tuple[int, int]  # lines of the defining function; (0, 0) for the module
    pure: bool  # every read of the name is (part of) an `if` or conditional-expression test


def _scope_body(node: ast.AST) -> list[ast.AST]:
    """The nodes of one scope, not descending into nested functions or classes."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        out.append(child)
        if not isinstance(child, _SCOPES):
            stack.extend(ast.iter_child_nodes(child))
    return out


def _test_name_ids(nodes: list[ast.AST]) -> set[int]:
    """ids of the Name nodes that sit in an if / ifexp test."""
    out: set[int] = set()
    for node in nodes:
        if isinstance(node, (ast.If, ast.IfExp)):
            out.update(id(n) for n in ast.walk(node.test) if isinstance(n, ast.Name))
    return out


def _scope_predicates(scope: ast.AST, span: tuple[int, int], reads_everywhere: list[ast.AST] | None) -> list[Predicate]:
    nodes = _scope_body(scope)
    stores = Counter(n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)))
    stores.update(a.arg for n in nodes if isinstance(n, ast.arguments) for a in (*n.posonlyargs, *n.args, *n.kwonlyargs))
    out: list[Predicate] = []
    for node in nodes:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if stores[name] != 1 or not isinstance(node.value, _TESTS):
            continue
        source = ast.unparse(node.value)
        if not _VERSIONISH.search(source):
            continue
        # A module-level name may be read inside functions too.
        readers = reads_everywhere if reads_everywhere is not None else nodes
        reads = [n for n in readers if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
        in_tests = _test_name_ids(readers)
        out.append(Predicate(name, source, node.lineno, node.end_lineno or node.lineno, span,
                             pure=bool(reads) and all(id(r) in in_tests for r in reads)))
    return out


class Predicates:
    """The version predicates of one module, looked up by the line of the test that reads them, and
    the version helpers it imports under another name (`vllm_version_is as is_vllm`). `functions`:
    the module's own predicate functions (`def is_legacy(): return vllm_version_is("0.10.0")`), name ->
    the test they return; `foreign`: names it imports from the plugin's own modules (local name ->
    dotted `module.name`), which may be another module's predicate (resolved plugin-wide)."""

    def __init__(self, found: list[Predicate], renames: dict[str, str] | None = None,
                 functions: dict[str, str] | None = None, foreign: dict[str, str] | None = None):
        self.found = found
        self.renames = renames or {}  # local name -> the helper's own name
        self.functions = functions or {}
        self.foreign = foreign or {}
        self._by_name: dict[str, list[Predicate]] = {}
        for p in found:
            self._by_name.setdefault(p.name, []).append(p)

    def __bool__(self) -> bool:
        return bool(self.found or self.renames or self.functions or self.foreign)

    def exports(self) -> dict[str, str]:
        """What another module can import as a predicate: name -> test (`f()` for a function)."""
        out = {f"{name}()": test for name, test in self.functions.items()}
        out.update({p.name: p.source for p in self.found if p.scope == (0, 0)})
        return out

    def foreign_reads(self, test: ast.expr) -> tuple[tuple[str, str], ...]:
        """(local name, dotted plugin name) of what a test reads that this module imports from the
        plugin (candidates for another module's predicate): `is_ge()` -> (("is_ge", "vllm_ascend.utils.is_ge"),)."""
        if not self.foreign:
            return ()
        names = {n.id for n in walk(test) if isinstance(n, ast.Name) and n.id in self.foreign}
        return tuple(sorted((name, self.foreign[name]) for name in names))

    def lookup(self, name: str, line: int) -> Predicate | None:
        """The innermost predicate `name` visible at `line` (a function's own before the module's)."""
        best = None
        for p in self._by_name.get(name, ()):
            lo, hi = p.scope
            if p.scope == (0, 0) or lo <= line <= hi:
                if best is None or best.scope == (0, 0) or (p.scope != (0, 0) and p.scope[0] > best.scope[0]):
                    best = p
        return best

    def expand(self, test: ast.expr) -> tuple[str, tuple[Predicate, ...]]:
        """The test's source with each predicate name replaced by its expression, and the predicates used."""
        line = getattr(test, "lineno", 0)
        renames, functions = self.renames, self.functions
        if not any(isinstance(n, ast.Name) and (n.id in self._by_name or n.id in renames or n.id in functions)
                   for n in walk(test)):
            return ast.unparse(test), ()
        swap = _Swap(self.lookup, renames, functions, line)
        swapped = swap.visit(ast.parse(ast.unparse(test), mode="eval").body)
        used = swap.used
        return ast.unparse(swapped), tuple(dict.fromkeys(used))


class _Swap(ast.NodeTransformer):
    """Predicates.expand()'s rewrite of one test (a class of its own, not one made per call)."""

    def __init__(self, lookup: Callable[[str, int], "Predicate | None"], renames: dict[str, str], functions: dict[str, str], line: int):
        self.lookup, self.renames, self.functions, self.line = lookup, renames, functions, line
        self.used: list[Predicate] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name) and node.func.id in self.functions and not node.args and not node.keywords:
            return ast.parse(self.functions[node.func.id], mode="eval").body
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.renames and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Name(self.renames[node.id], ast.Load()), node)
        found = self.lookup(node.id, self.line)
        if found is None or not isinstance(node.ctx, ast.Load):
            return node
        self.used.append(found)
        return ast.parse(found.source, mode="eval").body


NO_PREDICATES = Predicates([])


def _may_name_version(expr: ast.AST) -> bool:
    """False when ast.unparse(expr) cannot match _VERSIONISH: no identifier, attribute, keyword or
    parameter name and no str / bytes constant under it holds "version" or "VERSION". The rendering
    writes those texts as they are (a constant's letters are never escaped) and separates them from
    one another and from keywords, operators and numbers, none of which holds a "v"; so every match
    in it lies inside one of them. Cheaper than rendering the expression (most candidate values are
    plain calls and comparisons)."""
    for node in walk(expr):
        kind = node.__class__
        if kind is ast.Name:
            text = node.id
        elif kind is ast.Attribute:
            text = node.attr
        elif kind is ast.Constant:
            value = node.value
            if value.__class__ is bytes:
                if b"version" in value or b"VERSION" in value:
                    return True
                continue
            if value.__class__ is not str:
                continue
            text = value
        elif kind is ast.keyword or kind is ast.arg:
            text = node.arg or ""
        else:
            continue
        if "version" in text or "VERSION" in text:
            return True
    return False


def _candidate_lines(nodes: list[ast.AST]) -> list[int]:
    """Lines of the assignments that could be predicates (`name = <test>` whose text names a version):
    a scope holding none of them has no predicate, so its (costly) scope analysis is skipped."""
    return [node.lineno for node in nodes
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, _TESTS) and _may_name_version(node.value)
            and _VERSIONISH.search(ast.unparse(node.value))]


def predicate_functions(tree: ast.Module) -> dict[str, str]:
    """Module-level functions that take no argument and only return a version test (a cached helper
    such as `def is_vllm_ge_x(): return vllm_version_is("0.11.0") or ...`): name -> the test."""
    out: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.args.args or node.args.posonlyargs or node.args.kwonlyargs \
                or node.args.vararg or node.args.kwarg:
            continue
        body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                                 and isinstance(node.body[0].value, ast.Constant)) else node.body
        if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, _TESTS):
            source = ast.unparse(body[0].value)
            if _VERSIONISH.search(source):
                out[node.name] = source
    return out


def plugin_imports(tree: ast.Module, module: str, is_package: bool, plugin_packages: frozenset[str]) -> dict[str, str]:
    """Names a module imports from the plugin's own modules at module level: local name -> `module.name`."""
    from porter.upgrade.index import _absolute

    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.names[0].name != "*":
            base = _absolute(module, is_package, node.level, node.module) if node.level else node.module or ""
            if base and (node.level or base.split(".")[0] in plugin_packages):
                out.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names})
    return out


def find_predicates(tree: ast.Module, foreign: dict[str, str] | None = None) -> Predicates:
    """Every version predicate of a module (names assigned once in their scope from a version test,
    and predicate functions); `foreign`: the names it imports from the plugin's modules."""
    blocks = list(statements(tree))  # assignments, functions and imports are statements; ast.walk's order
    renames = helper_renames(blocks)
    functions = predicate_functions(tree)
    lines = _candidate_lines(blocks)
    found: list[Predicate] = []
    if lines:
        spans = [(node, (node.lineno, node.end_lineno or node.lineno)) for node in blocks
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        # A module-level candidate lies outside every function.
        outside = any(not any(lo <= line <= hi for _, (lo, hi) in spans) for line in lines)
        found = _scope_predicates(tree, (0, 0), list(walk(tree))) if outside else []  # ast.walk order
        for node, (lo, hi) in spans:
            if any(lo <= line <= hi for line in lines):
                found += _scope_predicates(node, (lo, hi), None)
    foreign = {k: v for k, v in (foreign or {}).items() if k not in functions and k not in renames}
    return Predicates(found, renames, functions, foreign) if found or renames or functions or foreign else NO_PREDICATES


def resolve_imported(source: str, exports: dict[str, str], foreign: dict[str, str]) -> str | None:
    """`foreign`: local name -> dotted plugin name (as `Predicates.foreign_reads` gives them)."""
    return _resolve(source, exports, foreign)


def _resolve(source: str, exports: dict[str, str], foreign: dict[str, str]) -> str | None:
    """A guard test that reads predicates imported from other plugin modules, with each one replaced by
    the test it holds (`exports`: dotted `module.name` or `module.name()` -> test); None when it reads none."""
    expr = parse_expr(source)
    if expr is None:
        return None
    hit = False

    class _Swap(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            nonlocal hit
            if isinstance(node.func, ast.Name) and node.func.id in foreign and not node.args and not node.keywords:
                test = exports.get(f"{foreign[node.func.id]}()")
                if test is not None:
                    hit = True
                    return ast.parse(test, mode="eval").body
            return self.generic_visit(node)

        def visit_Name(self, node: ast.Name) -> ast.AST:
            nonlocal hit
            test = exports.get(foreign.get(node.id, ""))
            if test is not None and isinstance(node.ctx, ast.Load):
                hit = True
                return ast.parse(test, mode="eval").body
            return node

    swapped = _Swap().visit(expr)
    return ast.unparse(swapped) if hit else None


def parse_expr(source: str) -> ast.expr | None:
    try:
        return ast.parse(source, mode="eval").body
    except SyntaxError:
        return None


def helper_renames(nodes: list[ast.AST]) -> dict[str, str]:
    """Version helpers imported under another name: `from m import vllm_version_is as is_vllm` -> {is_vllm: vllm_version_is}."""
    return {a.asname: a.name for n in nodes if isinstance(n, ast.ImportFrom) for a in n.names
            if a.asname and a.asname != a.name and _VERSIONISH.search(a.name)}
