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
    the version helpers it imports under another name (`vllm_version_is as is_vllm`)."""

    def __init__(self, found: list[Predicate], renames: dict[str, str] | None = None):
        self.found = found
        self.renames = renames or {}  # local name -> the helper's own name
        self._by_name: dict[str, list[Predicate]] = {}
        for p in found:
            self._by_name.setdefault(p.name, []).append(p)

    def __bool__(self) -> bool:
        return bool(self.found or self.renames)

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
        used: list[Predicate] = []

        class _Swap(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                if node.id in renames and isinstance(node.ctx, ast.Load):
                    return ast.copy_location(ast.Name(renames[node.id], ast.Load()), node)
                found = lookup(node.id, line)
                if found is None or not isinstance(node.ctx, ast.Load):
                    return node
                used.append(found)
                return ast.parse(found.source, mode="eval").body

        lookup, renames = self.lookup, self.renames
        if not any(isinstance(n, ast.Name) and (n.id in self._by_name or n.id in renames) for n in ast.walk(test)):
            return ast.unparse(test), ()
        swapped = _Swap().visit(ast.parse(ast.unparse(test), mode="eval").body)
        return ast.unparse(swapped), tuple(dict.fromkeys(used))


NO_PREDICATES = Predicates([])


def find_predicates(tree: ast.Module) -> Predicates:
    """Every version predicate of a module (names assigned once in their scope from a version test)."""
    everything = list(ast.walk(tree))
    found = _scope_predicates(tree, (0, 0), everything)
    renames = helper_renames(everything)
    for node in everything:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += _scope_predicates(node, (node.lineno, node.end_lineno or node.lineno), None)
    return Predicates(found, renames) if found or renames else NO_PREDICATES


def helper_renames(nodes: list[ast.AST]) -> dict[str, str]:
    """Version helpers imported under another name: `from m import vllm_version_is as is_vllm` -> {is_vllm: vllm_version_is}."""
    return {a.asname: a.name for n in nodes if isinstance(n, ast.ImportFrom) for a in n.names
            if a.asname and a.asname != a.name and _VERSIONISH.search(a.name)}
