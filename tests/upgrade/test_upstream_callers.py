"""Overrides checked against how the target's own code calls them, on a synthetic two-lane plugin
(`myplug` on upkg 1.0 -> 2.0), no network:
  * a constructor override of a class the plugin installs (CustomOp-style OOT registration, keyword
    or decorator form) that lacks a keyword the base gained: breaking only when upstream builds the
    class with that keyword; an unregistered subclass upstream never builds says nothing;
  * an interface whose abstract `__init__` dropped a positional parameter, while the override keeps the
    old order: upstream's positional call fills the override's parameters wrongly;
  * a staticmethod override narrower than its unchanged base: breaking when the target starts calling
    it with the base's optional argument (positionally or by keyword), silent when no new call does."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.callers import binds, bound, narrower
from porter.upgrade.index import Param, Signature
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

LINEAR = """
    class CustomOp:
        @classmethod
        def register_oot(cls, _decorated_op_cls=None, name=None):
            return _decorated_op_cls


    class ColumnLinear(CustomOp):
        def __init__(self, size, bias=True{extra}):
            self.size = size


    class RowLinear(CustomOp):
        def __init__(self, size, bias=True{extra}):
            self.size = size


    class PlainLinear:
        def __init__(self, size, bias=True{extra}):
            self.size = size
"""
ATTN_OLD = """
    from abc import ABC, abstractmethod


    class AttentionImpl(ABC):
        @abstractmethod
        def __init__(self, heads, scale, sparse=None, soft_cap=None, kind="decoder"):
            raise NotImplementedError


    class Backend:
        @staticmethod
        def kv_shape(blocks, block_size, heads, cache_dtype="auto"):
            raise NotImplementedError
"""
OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/linear.py": LINEAR.format(extra=""),
    "upkg/attn.py": ATTN_OLD,
    "upkg/layer.py": """
        from upkg.linear import ColumnLinear, PlainLinear, RowLinear


        def build(impl_cls, backend):
            ColumnLinear(4, bias=False)
            RowLinear(4)
            PlainLinear(4)
            impl = impl_cls(8, 0.1, None, 30.0, "decoder")
            return impl, backend.kv_shape(1, 16, 8)
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/linear.py": LINEAR.format(extra=", disable_tp=False"),
    "upkg/attn.py": ATTN_OLD.replace("scale, sparse=None, soft_cap", "scale, soft_cap"),
    "upkg/layer.py": """
        from upkg.linear import ColumnLinear, PlainLinear, RowLinear


        def build(impl_cls, backend):
            ColumnLinear(4, bias=False, disable_tp=True)
            RowLinear(4)
            PlainLinear(4, disable_tp=True)
            impl = impl_cls(8, 0.1, 30.0, "decoder")
            return impl, backend.kv_shape(1, 16, 8, "fp8")
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/linear.py": """
        from upkg.linear import ColumnLinear, CustomOp, PlainLinear, RowLinear


        class MyColumn(ColumnLinear):
            def __init__(self, size, bias=True):
                super().__init__(size, bias)


        @CustomOp.register_oot(name="RowLinear")
        class MyRow(RowLinear):
            def __init__(self, size, bias=True):
                super().__init__(size, bias)


        class MyPlain(PlainLinear):
            def __init__(self, size, bias=True):
                super().__init__(size, bias)
    """,
    "myplug/register.py": """
        from upkg.linear import CustomOp

        from myplug.linear import MyColumn


        def register():
            CustomOp.register_oot(_decorated_op_cls=MyColumn, name="ColumnLinear")
    """,
    "myplug/attn.py": """
        from upkg.attn import AttentionImpl, Backend


        class MyBackend(Backend):
            @staticmethod
            def kv_shape(blocks, block_size, heads):
                return (blocks, block_size, heads)


        class MyImpl(AttentionImpl):
            def __init__(self, heads, scale, sparse=None, soft_cap=None, kind="decoder"):
                self.heads = heads
    """,
}


@pytest.fixture
def report(project, tmp_path):
    tmp = tmp_path
    old, new = write_tree(tmp / "old", OLD), write_tree(tmp / "new", NEW)
    plugin = write_tree(tmp / "plugin", PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def _found(report, symbol):
    return [(r.severity, [(s.path, s.line) for s in r.sites]) for r in report.records if r.symbol == symbol]


def test_a_registered_constructor_missing_a_keyword_upstream_now_passes_breaks(report):
    found = _found(report, "upkg.linear.ColumnLinear.__init__")
    assert found and found[0][0] is Severity.BREAKING
    assert found[0][1] == [("myplug/linear.py", 4)]  # the class line


def test_a_keyword_no_upstream_caller_passes_or_an_unregistered_class_say_nothing(report):
    assert _found(report, "upkg.linear.RowLinear.__init__") == []  # registered, but RowLinear(4) only
    assert _found(report, "upkg.linear.PlainLinear.__init__") == []  # upstream builds PlainLinear, not MyPlain


def test_an_interface_init_that_dropped_a_positional_parameter_breaks_the_old_order(report):
    records = [r for r in report.records if r.symbol == "upkg.attn.AttentionImpl.__init__"]
    assert records and records[0].severity is Severity.BREAKING
    assert "soft_cap" in records[0].detail["positional_shift"] and "sparse" in records[0].detail["positional_shift"]


def test_a_narrow_override_breaks_when_the_target_starts_passing_the_optional_argument(report):
    records = [r for r in report.records if r.symbol == "upkg.attn.Backend.kv_shape"]
    assert len(records) == 1 and records[0].severity is Severity.BREAKING
    assert records[0].detail["change"] == "override_new_callers"
    assert records[0].detail["calls"] == ["upkg/layer.py:9"]


def _sig(*params: tuple[str, str, bool]) -> Signature:
    return Signature(tuple(Param(n, k, d) for n, k, d in params))


def test_binding_rules():
    sig = bound(_sig(("self", "pos", False), ("a", "pos", False), ("b", "pos", True), ("c", "kwonly", True)))
    assert binds(sig, 1, []) and binds(sig, 2, ["c"]) and binds(sig, 1, ["b"])
    assert not binds(sig, 3, []) and not binds(sig, 0, []) and not binds(sig, 2, ["b"]) and not binds(sig, 1, ["d"])
    base = _sig(("a", "pos", False), ("b", "pos", True))
    assert narrower(_sig(("a", "pos", False)), base)
    assert not narrower(base, base)
    assert not narrower(_sig(("args", "varargs", True), ("kw", "varkw", True)), base)


# The call finder parses only the functions that hold a matched line; whatever it cannot place in a
# function (module or class level, a docstring at column 0, a lone CR) parses the whole file. Either
# way the calls must be those a whole-file walk finds.
SHAPES_SOURCE = '''
import upkg

def top(runner):
    runner.step(1, 2)

    def inner(x):
        return x.step(k=3)
    return inner


class Runner:
    table = upkg.Table(4)  # class level: the whole file is parsed

    @upkg.wrap(lambda r: r.step(5))
    def method(
        self,
        n,
    ) -> None:
        self.other.step(n, flag=True)
        doc = """
text at column 0: runner.step(9)
"""
        return doc

async def later(r):
    await r.step(*r.args)  # star arguments: not a shape
'''


def _whole_file_calls(text: bytes, methods: set[str], constructors: set[str]):
    import ast

    out = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if (name in methods and isinstance(func, ast.Attribute)) or name in constructors:
                if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                    continue
                out.add((node.lineno, name, len(node.args), frozenset(k.arg for k in node.keywords if k.arg)))
    return out


@pytest.mark.parametrize("transform", [
    lambda s: s,                                              # a class-level call: whole file
    lambda s: s.replace("    table = upkg.Table(4)  # class level: the whole file is parsed\n", ""),
    lambda s: s.split("\n\nclass Runner")[0] + "\n",          # functions only: segments
    lambda s: s.replace("\n", "\r\n"),
    lambda s: s.replace("\n", "\r"),                          # lone CRs end lines for the parser too
])
def test_the_call_finder_finds_what_a_whole_file_walk_finds(transform):
    from porter.upgrade.callers import _call_pattern, _file_calls

    text = transform(SHAPES_SOURCE).encode()
    methods, constructors = {"step"}, {"Table"}
    found = _file_calls(text, _call_pattern(methods, constructors), methods, constructors)
    assert found is not None and {c[:4] for c in found if c[2] >= 0} == _whole_file_calls(text, methods, constructors)
    assert found  # the fixture does call step()


def test_segments_are_the_innermost_function_and_a_class_level_line_has_none():
    from porter.upgrade.callers import _function_segments

    source = SHAPES_SOURCE.encode().split(b"\n")
    line = next(i for i, s in enumerate(source, 1) if b"x.step(k=3)" in s)
    inner_def = next(i for i, s in enumerate(source, 1) if b"def inner" in s)
    assert _function_segments(source, [line]) == [(inner_def, line, 4)]
    wrapped = next(i for i, s in enumerate(source, 1) if b"self.other.step" in s)
    (first, last, indent), = _function_segments(source, [wrapped])
    assert source[first - 1].strip() == b"def method(" and indent == 4 and last >= wrapped
    class_level = next(i for i, s in enumerate(source, 1) if b"upkg.Table(4)" in s)
    assert _function_segments(source, [class_level]) is None
