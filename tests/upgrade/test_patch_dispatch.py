"""A replacement installed over a CustomOp's `forward_oot` (the out-of-tree platform's branch of the
`forward` dispatcher, `(self, *args, **kwargs)` upstream) receives what `forward` is called with: it
must take the arguments of the class's concrete `forward_native` / `forward_cuda` at the target. A
synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

CUSTOM_OP = """
    class CustomOp:
        def forward(self, *args, **kwargs):
            return self.forward_oot(*args, **kwargs)

        def forward_native(self, *args, **kwargs):
            raise NotImplementedError

        def forward_cuda(self, *args, **kwargs):
            raise NotImplementedError

        def forward_oot(self, *args, **kwargs):
            return self.forward_native(*args, **kwargs)
"""
OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/custom_op.py": CUSTOM_OP,
    "upkg/moe.py": """
        from upkg.custom_op import CustomOp


        class MoEMethod(CustomOp):
            def forward_cuda(self, layer, x, top_k):
                return x


        class Norm(CustomOp):
            def forward_native(self, x, eps=1e-6):
                return x
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/custom_op.py": CUSTOM_OP,
    "upkg/moe.py": """
        from upkg.custom_op import CustomOp


        class MoEMethod(CustomOp):
            def forward_cuda(self, layer, x, top_k, scaling_factor=1.0):
                return x

            def apply(self, layer, x):
                return self.forward(layer=layer, x=x, top_k=2, scaling_factor=1.0)


        class Norm(CustomOp):
            def forward_native(self, x, eps=1e-6):
                return x
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/patch_moe.py": """
        from upkg.moe import MoEMethod, Norm


        def forward_oot(self, layer, x, top_k):
            return x


        def norm_forward_oot(self, x, eps=1e-6):
            return x


        MoEMethod.forward_oot = forward_oot
        Norm.forward_oot = norm_forward_oot
    """,
}


@pytest.fixture
def report(project, tmp_path):
    old = write_tree(tmp_path / "pd-old", OLD)
    new = write_tree(tmp_path / "pd-new", NEW)
    plugin = write_tree(tmp_path / "pd-plugin", PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def test_a_forward_oot_replacement_must_take_what_the_concrete_forward_takes_at_the_target(report):
    found = [r for r in report.records if r.symbol == "upkg.moe.MoEMethod.forward_oot" and r.detail.get("change") == "patch_signature"]
    assert len(found) == 1 and found[0].severity is Severity.BREAKING
    assert found[0].detail["problems"] == ["does not accept 'scaling_factor'"]
    # the patch statement and the replacement's def (where the fix goes)
    assert [(s.path, s.line) for s in found[0].sites] == [("myplug/patch_moe.py", 4), ("myplug/patch_moe.py", 12)]


def test_a_replacement_that_still_fits_says_nothing(report):
    assert not [r for r in report.records + report.notes if r.symbol.startswith("upkg.moe.Norm")]
