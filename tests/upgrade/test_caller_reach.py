"""An override that lacks a parameter the base gained with a default breaks only through a caller that can
reach it: on a synthetic plugin (`myplug` on upkg 1.0 -> 2.0), no network.
  * `MyImpl.run` never took `scale`, which upstream's opaque path passed already at 1.0: the plugin runs its
    own path; the opaque call, now also passing the new `block_scale`, does not reach the override (silent);
  * `MyMLA.decode` lacks the new `block_scale` that an upstream call otherwise fitting the override passes
    (breaking);
  * `MyWrapper.forward` overrides what was a dispatcher at 1.0 (`Op.forward(*args, **kwargs)`) and became an
    explicit method at 2.0: callers reached the override already, the base's new signature says nothing (silent)."""

from __future__ import annotations

import pytest

from porter.upgrade.callers import CallShape, bound
from porter.upgrade.drift import reaches
from porter.upgrade.index import Param, Signature
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

IMPL = """
    class Op:
        def forward(self, *args, **kwargs):
            raise NotImplementedError


    class Wrapper(Op):
{wrapper}


    class AttentionImpl:
        def run(self, layer, q, kv, output=None, scale=None{extra}):
            raise NotImplementedError


    class MLAImpl:
        def decode(self, layer, q, kv, output=None{extra}):
            raise NotImplementedError
"""
OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/attn.py": IMPL.format(extra="", wrapper="        pass"),
    "upkg/layer.py": """
        def opaque(impl, layer, q, kv, out, s):
            impl.run(layer, q, kv, output=out, scale=s)


        def direct(impl, layer, q, kv, out):
            impl.run(layer, q, kv, output=out)


        def mla(impl, layer, q, kv, out):
            impl.decode(layer, q, kv, output=out)
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/attn.py": IMPL.format(extra=", block_scale=None", wrapper="""        def forward(self, positions, hidden, scaling=None):
            return hidden"""),
    "upkg/layer.py": """
        def opaque(impl, layer, q, kv, out, s, b):
            impl.run(layer, q, kv, output=out, scale=s, block_scale=b)


        def direct(impl, layer, q, kv, out):
            impl.run(layer, q, kv, output=out)


        def mla(impl, layer, q, kv, out, b):
            impl.decode(layer, q, kv, output=out, block_scale=b)


        def wrapped(w, p, h, s):
            return w.forward(p, h, scaling=s)
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/attn.py": """
        from upkg.attn import AttentionImpl, MLAImpl, Wrapper


        class MyImpl(AttentionImpl):
            def run(self, layer, q, kv, output=None, trace=False):
                return output


        class MyMLA(MLAImpl):
            def decode(self, layer, q, kv, output=None):
                return output


        class MyWrapper(Wrapper):
            def forward(self, positions, hidden, kv_cache=None):
                return hidden
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def test_a_caller_that_passes_what_the_override_never_took_does_not_reach_it(report):
    assert [r for r in report.records if r.symbol == "upkg.attn.AttentionImpl.run"] == []


def test_a_caller_that_fits_the_override_but_for_the_new_parameter_breaks_it(report):
    records = [r for r in report.records if r.symbol == "upkg.attn.MLAImpl.decode"]
    assert len(records) == 1 and records[0].severity is Severity.BREAKING
    assert records[0].detail["passed_by_upstream_callers"] == ["block_scale"]


def test_an_override_of_what_was_a_dispatcher_at_the_baseline_says_nothing(report):
    assert [r for r in report.records if r.symbol == "upkg.attn.Wrapper.forward"] == []


def _sig(*names: str) -> Signature:
    return Signature(tuple(Param(n, "pos", i > 1) for i, n in enumerate(names)))


def test_reaches():
    override = bound(_sig("self", "q", "out"))  # q required, out optional
    shape = lambda n, *kw: CallShape(n, frozenset(kw), "f.py", 1)  # noqa: E731
    assert reaches(override, shape(1, "out", "new"), ["new"], {"new": 2})
    assert not reaches(override, shape(1, "out", "new", "other"), ["new"], {"new": 2})  # `other`: never fitted
    assert reaches(override, shape(3), ["new"], {"new": 2})  # passed by position: cut there
    assert not reaches(override, shape(4), ["new"], {"new": 3})  # one positional too many besides it
