"""An override that no call written for the *baseline's* method could reach is the plugin's own method: the
plugin ran at the baseline, so upstream did not call it through the base, and the base's drift is a note,
not a break. On a synthetic plugin (`myplug` on upkg 1.0 -> 2.0), no network:
  * `MyRunner.reshape(self, config, raw)` lacked the base's required `block_sizes` at 1.0 already; 2.0 drops
    `config` from the base: a note (vllm-ascend's NPUModelRunner._reshape_kv_cache_tensors, 0.19 -> 0.20);
  * `MyMethod.apply(self, layer, x, logits, top_k, renormalize, **kw)` required `top_k` / `renormalize` that the
    1.0 base never took: a note;
  * `MyFitting.run(self, q, kv)` fitted the 1.0 base exactly; 2.0 drops `kv`, which it still requires: breaking.
"""

from __future__ import annotations

import pytest

from porter.upgrade.callers import bound, fits_base_calls
from porter.upgrade.index import Param, Signature
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/runner.py": """
        class Runner:
            def reshape(self, config, raw, block_sizes):
                return raw


        class Method:
            def apply(self, layer, router, x, logits):
                raise NotImplementedError


        class Fitting:
            def run(self, q, kv):
                raise NotImplementedError
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/runner.py": """
        class Runner:
            def reshape(self, raw, block_sizes):
                return raw


        class Method:
            def apply(self, layer, x, weights, ids):
                raise NotImplementedError


        class Fitting:
            def run(self, q):
                raise NotImplementedError
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/runner.py": """
        from upkg.runner import Fitting, Method, Runner


        class MyRunner(Runner):
            def reshape(self, config, raw):
                return raw


        class MyMethod(Method):
            def apply(self, layer, x, logits, top_k, renormalize, **kwargs):
                return x


        class MyFitting(Fitting):
            def run(self, q, kv):
                return q
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def _findings(report, symbol):
    return [f for f in list(report.records) + list(report.notes) if f.symbol == symbol]


@pytest.mark.parametrize("symbol", ["upkg.runner.Runner.reshape", "upkg.runner.Method.apply"])
def test_an_override_no_baseline_call_could_reach_is_a_note(report, symbol):
    found = _findings(report, symbol)
    assert found and all(f.severity is Severity.NOTE for f in found)
    assert found[0].detail["unreached_at_baseline"] is True
    assert not [r for r in report.records if r.symbol == symbol]


def test_an_override_that_fitted_the_baseline_still_breaks(report):
    records = [r for r in report.records if r.symbol == "upkg.runner.Fitting.run"]
    assert len(records) == 1 and records[0].severity is Severity.BREAKING
    assert "unreached_at_baseline" not in records[0].detail


def _sig(*params: tuple[str, str, bool]) -> Signature:
    return Signature(tuple(Param(n, kind, default) for n, kind, default in params))


def test_fits_base_calls():
    pos = lambda n, d=False: (n, "pos", d)  # noqa: E731
    base = bound(_sig(pos("self"), pos("a"), pos("b"), pos("c", True)))
    assert fits_base_calls(bound(_sig(pos("self"), pos("x"), pos("y"))), base)  # positional a, b bind x, y
    assert fits_base_calls(bound(_sig(pos("self"), ("a", "kwonly", False), ("b", "kwonly", False))), base)  # keywords
    assert not fits_base_calls(bound(_sig(pos("self"), pos("a"))), base)  # b passed, no slot for it
    assert fits_base_calls(bound(_sig(pos("self"), pos("a"), pos("b"), pos("d"))), base)  # c passed by position fills d
    assert not fits_base_calls(bound(_sig(pos("self"), pos("a"), pos("b"), pos("c"), pos("d"))), base)  # requires d
    assert fits_base_calls(bound(_sig(pos("self"), ("args", "varargs", False), ("kw", "varkw", False))), base)
