"""An override that stopped fitting its base is no break where only the plugin can call it: the plugin
builds the class only into `self.<attr>` of its own classes, and no upstream code reads that attribute
(vllm-ascend's AscendRejectionSampler, held by NPUModelRunner, a LoRAModelRunnerMixin and not a
GPUModelRunner, at vllm 0.11.0 -> 0.11.2: RejectionSampler.forward changed, GPUModelRunner's calls never
reach the plugin's sampler). On a synthetic plugin (`myplug` on upkg 1.0 -> 2.0), no network:
  * MySampler, held by MyRunner(Mixin), whose upstream base never reads `self.sampler`: a note;
  * MyGpuSampler, held by MyGpuRunner(GpuRunner), whose base calls `self.sampler(...)`: breaking;
  * MyLeakedSampler, held in `self.drafter`, which upstream reads off a runner it is handed: breaking;
  * MyMentionedSampler, also named in an isinstance test: breaking (the instance may come from anywhere).
"""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane


def _upstream(version: str, forward: str) -> dict[str, str]:
    return {
        "upkg/__init__.py": f'__version__ = "{version}"\n',
        "upkg/sampler.py": f"""
            class Sampler:
                def forward{forward}:
                    return a
        """,
        "upkg/runner.py": """
            class Mixin:
                def load_lora(self, model):
                    return model


            class GpuRunner:
                def sample(self, x):
                    return self.sampler(x, None)
        """,
        "upkg/drafting.py": """
            def draft(runner, x):
                return runner.drafter(x, None)
        """,
    }


OLD = _upstream("1.0", "(self, a, b)")
NEW = _upstream("2.0", "(self, a, c)")
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/sampler.py": """
        from upkg.sampler import Sampler


        class MySampler(Sampler):
            def forward(self, a, b):
                return a


        class MyGpuSampler(Sampler):
            def forward(self, a, b):
                return a


        class MyLeakedSampler(Sampler):
            def forward(self, a, b):
                return a


        class MyMentionedSampler(Sampler):
            def forward(self, a, b):
                return a
    """,
    "myplug/runner.py": """
        from upkg.runner import GpuRunner, Mixin
        from myplug.sampler import MyGpuSampler, MyLeakedSampler, MyMentionedSampler, MySampler


        class MyRunner(Mixin):
            def __init__(self):
                self.sampler = MySampler()
                self.drafter = MyLeakedSampler()
                self.checker = MyMentionedSampler()

            def step(self, x):
                if isinstance(self.checker, MyMentionedSampler):
                    return self.sampler(x, None)
                return self.drafter(x, None)


        class MyGpuRunner(GpuRunner):
            def __init__(self):
                self.sampler = MyGpuSampler()
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def _override(report, cls):
    """(severity of the record, the change) for each override finding on `cls` (one record per symbol)."""
    return [(r.severity, c) for r in list(report.records) + list(report.notes)
            for c in r.detail.get("changes") or [r.detail]
            if c.get("change") == "override_mismatch" and c.get("plugin_class") == cls]


def test_an_override_only_the_plugin_holds_is_a_note(report):
    found = _override(report, "MySampler")
    assert [severity for severity, _ in found] == [Severity.NOTE]
    assert found[0][1]["held_by_plugin"] == "MyRunner.sampler"


@pytest.mark.parametrize("cls", ["MyGpuSampler", "MyLeakedSampler", "MyMentionedSampler"])
def test_an_override_upstream_may_reach_still_breaks(report, cls):
    found = _override(report, cls)
    assert [severity for severity, _ in found] == [Severity.BREAKING]
    assert "held_by_plugin" not in found[0][1]
