"""Mechanisms that catch live code breaking at the target, found on the replay benchmark's dev
misses; each on a small synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/selector.py": """
        def get_backend(head_size, dtype, cache_dtype, block_size, use_mla=False, use_sparse=False):
            return None

        def pick(a, b, c=None):
            return a
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/selector.py": """
        def get_backend(head_size, dtype, cache_dtype, use_mla=False, use_sparse=False):
            return None

        def pick(a, c=None, b=None):
            return a
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/runner.py": """
        from upkg.selector import get_backend, pick


        def build(dtype, block_size):
            backend = get_backend(0, dtype, None, block_size, use_mla=True)
            other = pick(1, 2)
            same = get_backend(0, dtype, None, use_mla=True) if False else None
            return backend, other, same
    """,
}


@pytest.fixture
def report(project, tmp_path):
    old = write_tree(tmp_path / "live-old", OLD)
    new = write_tree(tmp_path / "live-new", NEW)
    plugin = write_tree(tmp_path / "live-plugin", PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def _shifts(report, symbol):
    return [r for r in report.records if r.symbol == symbol and r.detail.get("change") == "positional_shift"]


def test_a_positional_argument_that_lands_on_a_keyword_the_call_passes_breaks(report):
    shifted = _shifts(report, "upkg.selector.get_backend")
    assert len(shifted) == 1 and shifted[0].severity is Severity.BREAKING
    assert shifted[0].sites[0].line == 5  # the four-positional call, not the three-positional one
    assert "block_size" in shifted[0].message and "use_mla" in shifted[0].message


def test_a_positional_argument_that_binds_another_parameter_is_risky(report):
    shifted = _shifts(report, "upkg.selector.pick")
    assert len(shifted) == 1 and shifted[0].severity is Severity.RISKY
