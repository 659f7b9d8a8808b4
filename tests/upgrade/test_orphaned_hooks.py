"""An override of a hook that the upstream base's own methods called at the baseline and that the target's class
no longer defines (vllm 0.20.0 dropped FusedMoE._init_runner, which FusedMoE.__init__ called; vllm 0.11.2 dropped
AttentionBackend.get_metadata_cls, which its make_metadata called as `cls.get_metadata_cls()`): upstream never
calls the override again. Breaking when only upstream called it (what the override did silently stops); a note when some plugin class calls a method of
that name itself (its runner's `layer.forward_impl(...)`); nothing for a plugin helper upstream never called,
nor for a hook the target still has. Synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network."""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/layer.py": """
        class Layer:
            def __init__(self):
                self.runner = self._init_runner()
                self.kept = self._keep_hook()

            def _init_runner(self):
                return None

            def forward_native(self, x):
                return self.forward_impl(x)

            def forward_impl(self, x):
                return x

            def _keep_hook(self):
                return 1

            @staticmethod
            def get_metadata_cls():
                raise NotImplementedError

            @classmethod
            def make_metadata(cls, *args):
                return cls.get_metadata_cls()(*args)
    """,
    "upkg/runner.py": "class Runner:\n    def run(self, layer, x):\n        return x\n",
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/layer.py": """
        class Layer:
            def __init__(self):
                self.runner = object()
                self.kept = self._keep_hook()

            def forward_native(self, x):
                return x

            def _keep_hook(self):
                return 1
    """,
    "upkg/runner.py": "class Runner:\n    def run(self, layer, x):\n        return x\n",
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/layers.py": """
        from upkg.layer import Layer
        from upkg.runner import Runner


        class NpuLayer(Layer):
            def _init_runner(self):
                return "npu"

            def forward_impl(self, x):
                return x + 1

            def _keep_hook(self):
                return 3

            def _helper(self):
                return 4

            @staticmethod
            def get_metadata_cls():
                return dict


        class NpuRunner(Runner):
            def run(self, layer, x):
                return layer.forward_impl(x)
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def _hooks(report):
    return sorted((r.detail.get("method"), r.severity) for r in report.records + report.notes
                  if r.detail.get("change") == "hook_removed")


def test_hooks_upstream_stopped_calling_are_reported_by_who_still_calls_them(report):
    assert _hooks(report) == [("_init_runner", Severity.BREAKING), ("forward_impl", Severity.NOTE),
                              ("get_metadata_cls", Severity.BREAKING)]
