"""A base method the plugin's subclass does not define, that the baseline reached only through methods the
subclass overrides, and that the target also calls from outside the class (vllm 0.19.0's module-level
`_moe_forward` calling `runner.forward_impl_chunked(...)`, which 0.18.0 called only from the `forward_impl`
that vllm-ascend's AscendMoERunner overrides): upstream now runs the base's code on the plugin's object, past
the override. Nothing when other code already called it at the baseline, when the target still reaches it only
through overridden methods, or when the subclass defines it. Synthetic two-lane plugin (`myplug` on upkg
1.0 -> 2.0), no network."""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

RUNNER_OLD = """
    class Runner:
        def forward(self, x):
            return self.forward_impl(x)

        def forward_impl(self, x):
            if x > 10:
                return self.forward_chunked(x)
            return self.prepare(x)

        def forward_chunked(self, x):
            return x

        def prepare(self, x):
            return x

        def shared(self, x):
            return x

        def sync(self, x):
            return self.own_step(x)

        def own_step(self, x):
            return x


    def entry(runner, x):
        return runner.shared(x)
"""
RUNNER_NEW = """
    class Runner:
        def forward(self, x):
            return self.forward_impl(x)

        def forward_impl(self, x):
            return self.prepare(x)

        def forward_chunked(self, x):
            return x

        def prepare(self, x):
            return x

        def shared(self, x):
            return x

        def sync(self, x):
            return self.own_step(x)

        def own_step(self, x):
            return x


    def entry(runner, x):
        if runner.chunking:
            return runner.forward_chunked(x)
        runner.own_step(x)
        return runner.shared(x)
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/runner.py": RUNNER_OLD}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/runner.py": RUNNER_NEW}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/runners.py": """
        from upkg.runner import Runner


        class NpuRunner(Runner):
            def forward_impl(self, x):
                return x + 1

            def sync(self, x):
                return x + 2

            def shared(self, x):
                return x + 3


        class OtherRunner(Runner):
            def forward_impl(self, x):
                return x + 4

            def forward_chunked(self, x):
                return x + 5
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def test_a_path_only_an_override_reached_that_upstream_now_calls_directly_is_breaking(report):
    found = sorted((r.detail["plugin_class"], r.detail["method"], r.severity) for r in report.records
                   if r.detail.get("change") == "override_bypassed")
    # forward_chunked: reached only via NpuRunner.forward_impl at 1.0, called by entry() at 2.0.
    # own_step: reached only via the overridden sync at 1.0, and entry() calls it at 2.0 too.
    # shared: entry() already called it at 1.0 (and NpuRunner defines it); prepare: still only via forward_impl;
    # OtherRunner defines forward_chunked itself.
    assert found == [("NpuRunner", "forward_chunked", Severity.BREAKING), ("NpuRunner", "own_step", Severity.BREAKING)]
    first = next(r for r in report.records if r.detail.get("method") == "forward_chunked")
    assert first.detail["overridden"] == ["forward_impl"] and first.detail["called_from"] == ["upkg.runner"]
