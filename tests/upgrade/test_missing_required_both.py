"""A live call that lacks a required parameter at the baseline and at the target still fails at the target
(target-absolute checking), on a synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network.

`self.no_forward(out)` into an upstream mixin's staticmethod `no_forward(out, config)` (the same at 1.0 and
2.0: vllm-ascend 45889a6185's `kv_connector_no_forward`) is reported `risky` with change
`missing_required_parameter`; a call that passes both, the same short call in the release lane (dead at
2.0), and a plain function call short of a parameter at both (only `self.m(...)` into the base is checked
this way) are not records."""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

MIXIN = """
    class ConnectorMixin:
        @staticmethod
        def no_forward(out, config):
            return out


    class Runner(ConnectorMixin):
        def __init__(self, config):
            self.config = config


    def helper(out, config):
        return out
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/runner.py": MIXIN}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/runner.py": MIXIN + "\n    def extra():\n        return 2\n"}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/runner.py": """
        from upkg.runner import Runner, helper
        from myplug.utils import upkg_version_is


        class NPURunner(Runner):
            def execute(self, out):
                if not out:
                    return self.no_forward(out)
                return self.no_forward(out, self.config)

            def old_path(self, out):
                if upkg_version_is("1.0"):
                    return self.no_forward(out)
                return out

            def plain(self, out):
                return helper(out)
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def _changes(findings):
    return sorted((r.severity, c.get("parameter"), s.line) for r in findings if r.symbol.endswith("no_forward")
                  for c in r.detail.get("changes", [r.detail]) if c.get("change") == "missing_required_parameter"
                  for s in r.sites)


def test_a_live_call_missing_a_parameter_required_at_both_is_risky(report):
    assert _changes(report.records) == [(Severity.RISKY, "config", 8)]


def test_the_full_call_and_the_dead_release_lane_are_not_records(report):
    lines = {s.line for r in report.records if r.symbol.endswith("no_forward") for s in r.sites}
    assert lines == {8}
    assert not [r for r in report.records if r.symbol.endswith("helper")]
