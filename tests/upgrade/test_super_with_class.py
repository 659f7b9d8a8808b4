"""`super(Cls, self).m(...)` skips Cls: the call is checked against the next class of Cls's MRO, on a
synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network.

vllm-ascend's `super(UnquantizedFusedMoEMethod, self).process_weights_after_loading(layer)` runs
FusedMoEMethodBase's method, not UnquantizedFusedMoEMethod's. Here the grandparent `Base.process`
gains a required parameter at 2.0 while `Mid.process` stays the same: the call through
`super(Mid, self)` is reported, the plain `super().process(...)` (which runs Mid's) is not."""

from __future__ import annotations

import pytest

from tests.upgrade.upgrade_fixtures import analyze_two_lane

OLD_MOD = """
    class Base:
        def process(self, layer):
            return layer

        def setup(self, layer):
            return layer


    class Mid(Base):
        def process(self, layer, extra=None):
            return layer
"""
NEW_MOD = """
    class Base:
        def process(self, layer, flag):
            return layer

        def setup(self, layer):
            return layer


    class Mid(Base):
        def process(self, layer, extra=None):
            return layer
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/layers.py": OLD_MOD}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/layers.py": NEW_MOD}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/layers.py": """
        from upkg.layers import Mid


        class NPUMethod(Mid):
            def process(self, layer, extra=None):
                super(Mid, self).process(layer)
                return super().process(layer)

            def setup(self, layer):
                return super(NPUMethod, self).setup(layer)
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def test_super_with_a_class_is_checked_past_that_class(report):
    found = sorted((c.get("parameter"), s.line) for r in report.records
                   for c in r.detail.get("changes", [r.detail]) if c.get("change") == "new_required_parameter"
                   for s in r.sites)
    assert found == [("flag", 6)]
