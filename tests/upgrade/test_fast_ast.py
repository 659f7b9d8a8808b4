"""The fast AST walk and visitor of porter.upgrade.index visit what the stdlib's do, in the same order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from porter.upgrade.index import FastVisitor, walk

SOURCES = [p for p in sorted((Path(__file__).resolve().parents[2] / "porter" / "upgrade").glob("*.py"))
           if p.stat().st_size > 4000 and b"from porter" in p.read_bytes()][:6]  # real sources with imports to collect


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_walk_matches_ast_walk(path):
    """ast.walk's nodes in its order, less the leaf types no caller asks for (contexts, operators)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    leaves = (ast.expr_context, ast.operator, ast.boolop, ast.cmpop, ast.unaryop)
    expected = [id(n) for n in ast.walk(tree) if not isinstance(n, leaves)]
    assert [id(n) for n in walk(tree)] == expected and len(expected) > 1000


def test_walk_leaves_out_only_leaves():
    tree = ast.parse("a = -b + (c < d) and not e\nf.g[h] = {i: j for i, j in k}\ndel m\n")
    kinds = {type(n).__name__ for n in walk(tree)}
    assert {"Name", "Attribute", "Subscript", "BinOp", "UnaryOp", "Compare", "BoolOp", "DictComp", "Delete"} <= kinds
    assert not kinds & {"Load", "Store", "Del", "Add", "USub", "Lt", "And", "Not"}


def _recorder(base: type) -> type:
    class Recorder(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.seen: list[str] = []

        def visit_Name(self, node: ast.Name) -> None:
            self.seen.append(f"name:{node.id}")

        def visit_Call(self, node: ast.Call) -> None:
            self.seen.append(f"call:{node.lineno}")
            self.generic_visit(node)

        def visit_Load(self, node: ast.Load) -> None:  # a leaf type visited explicitly is not skipped
            self.seen.append("load")

        def visit_Constant(self, node: ast.Constant) -> None:
            self.seen.append(f"const:{node.value!r}"[:40])

    return Recorder


def _leafless_recorder(base: type) -> type:
    class Recorder(base):  # type: ignore[misc, valid-type]
        """Visits no leaf type: a FastVisitor of it skips the context and operator fields."""

        def __init__(self) -> None:
            self.seen: list[str] = []

        def visit_Name(self, node: ast.Name) -> None:
            self.seen.append(f"name:{node.id}")

        def visit_Attribute(self, node: ast.Attribute) -> None:
            self.seen.append(f"attr:{node.attr}")
            self.generic_visit(node)

        def visit_Compare(self, node: ast.Compare) -> None:
            self.seen.append(f"compare:{node.lineno}")
            self.generic_visit(node)

        def visit_Constant(self, node: ast.Constant) -> None:
            self.seen.append(f"const:{node.value!r}"[:40])

    return Recorder


@pytest.mark.parametrize("make", [_recorder, _leafless_recorder], ids=["with-leaf-visit", "leafless"])
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_visitor_matches_node_visitor(path, make):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    fast, slow = make(FastVisitor)(), make(ast.NodeVisitor)()
    fast.visit(tree)
    slow.visit(tree)
    assert fast.seen == slow.seen and len(fast.seen) > 100


def test_visitor_dispatch_is_per_class():
    class OnlyNames(FastVisitor):
        def __init__(self) -> None:
            self.names: list[str] = []

        def visit_Name(self, node: ast.Name) -> None:
            self.names.append(node.id)

    class Nothing(FastVisitor):
        pass

    tree = ast.parse("x = f(y, 'z')\n")
    Nothing().visit(tree)  # fills its own dispatch table only
    names = OnlyNames()
    names.visit(tree)
    assert names.names == ["x", "f", "y"]


IMPORTS = '''
import vllm.a as first
from vllm.b import x
try:
    from vllm.c import y as first
except ImportError:
    from vllm.d import y
def f():
    import vllm.e as inner
    with open("p"):
        for i in range(2):
            from vllm.f import z as x
    match inner:
        case 1:
            from vllm.g import w
class C:
    if True:
        import vllm.h as first
    else:
        pass
    from vllm.i import v
value = [lambda: 0 for _ in ()]
'''


@pytest.mark.parametrize("text", [IMPORTS] + [p.read_text(encoding="utf-8") for p in SOURCES], ids=lambda t: str(len(t)))
def test_alias_collector_walks_statements_only_with_the_visit_order(text):
    from porter.upgrade.usage import _AliasCollector

    tree = ast.parse(text)
    visited, collected = _AliasCollector(frozenset({"vllm", "porter"})), _AliasCollector(frozenset({"vllm", "porter"}))
    visited.visit(tree)
    collected.collect(tree)
    assert list(collected.aliases.items()) == list(visited.aliases.items()) and visited.aliases


@pytest.mark.skipif(not hasattr(ast, "TypeAlias"), reason="`type X = ...` is Python 3.12+")
def test_walk_visits_a_type_alias_name():
    tree = ast.parse("type X = int\n")  # TypeAlias.name is a Name: the field table keeps that `name` field
    assert [type(n).__name__ for n in walk(tree)] == [type(n).__name__ for n in ast.walk(tree)
                                                     if not isinstance(n, (ast.expr_context,))]
