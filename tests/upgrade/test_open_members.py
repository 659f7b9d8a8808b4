"""Whether a member a class lacks in the tree may still exist at run time is one check over the whole
MRO inside the index (`TreeIndex.open_members`), used by every resolution: a `__getattr__` or a base
outside the tree anywhere in the ancestry makes the member unknown (no finding), a plain base
(`Generic[T]`, `ABC`, `Enum`) does not, so a member that really went away from such a class breaks;
torch.nn.Module's members are known, so a CustomOp-style layer stays checkable."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.index import TreeIndex
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/layers.py": """
        import torch.nn as nn


        class CustomOp(nn.Module):
            def forward(self, *args, **kwargs):
                return None


        class Rotary(CustomOp):
            def positions(self):
                return 0

            def cos_sin(self):
                return 0
    """,
    "upkg/ops.py": """
        import threading
        from abc import ABC
        from typing import Generic, TypeVar

        T = TypeVar("T")


        class Op(threading.Thread):
            def size(self):
                return 1


        class Fused(Op):
            def width(self):
                return 2


        class Lazy:
            def __getattr__(self, name):
                return name


        class Proxy(Lazy):
            def real(self):
                return 1


        class Box(Generic[T]):
            def get(self):
                return None

            def put(self, item):
                return None


        class Shape(ABC):
            def area(self):
                return 0

            def perimeter(self):
                return 0


        class Tall(Shape):
            def height(self):
                return 1
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/layers.py": """
        import torch.nn as nn


        class CustomOp(nn.Module):
            def forward(self, *args, **kwargs):
                return None


        class Rotary(CustomOp):
            def positions(self):
                return 0
    """,
    "upkg/ops.py": """
        import threading
        from abc import ABC
        from typing import Generic, TypeVar

        from upkg.factory import make_base

        T = TypeVar("T")


        class Op(threading.Thread):
            pass


        class Fused(Op):
            def width(self):
                return 2


        class Lazy:
            def __getattr__(self, name):
                return name


        class Proxy(Lazy):
            pass


        class Box(Generic[T]):
            def get(self):
                return None


        class Shape(ABC):
            def area(self):
                return 0


        class Tall(Shape):
            def height(self):
                return 1


        Dynamic = make_base()


        class Made(Dynamic):
            pass
    """,
    "upkg/factory.py": "def make_base():\n    return type('Base', (), {'extra': 1})\n",
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/layer_use.py": """
        from upkg.layers import Rotary


        def run():
            return Rotary.positions, Rotary.register_parameter, Rotary.cos_sin
    """,
    "myplug/use.py": """
        from upkg.ops import Box, Fused, Proxy, Tall


        def run(box: Box, fused: Fused, proxy: Proxy, tall: Tall):
            Fused.size            # an ancestor's base (threading.Thread) is outside the tree
            Fused.daemon          # ... and provides this one at run time
            Proxy.real            # Lazy.__getattr__ serves it
            Box.put               # Box(Generic[T]) is a plain base: `put` is gone
            Tall.perimeter        # Shape(ABC): `perimeter` is gone
            return box.get(), fused.width(), proxy.anything, tall.height()
    """,
}


@pytest.fixture
def report(project, tmp_path):
    old = write_tree(tmp_path / "open-old", OLD)
    new = write_tree(tmp_path / "open-new", NEW)
    plugin = write_tree(tmp_path / "open-plugin", PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def _about(report, member):
    return [r for r in report.records + report.notes if r.symbol == f"upkg.ops.{member}"]


def test_a_member_an_ancestor_outside_the_tree_may_provide_is_not_reported(report):
    assert not _about(report, "Fused.size")
    assert not _about(report, "Fused.daemon")


def test_a_member_an_ancestor_getattr_serves_is_not_reported(report):
    assert not _about(report, "Proxy.real")


@pytest.mark.parametrize("member", ["Box.put", "Tall.perimeter"])
def test_a_member_gone_from_a_class_with_only_plain_bases_breaks(report, member):
    found = _about(report, member)
    assert len(found) == 1 and found[0].severity is Severity.BREAKING
    assert [(s.path, s.line) for s in found[0].sites] == [("myplug/use.py", {"Box.put": 8, "Tall.perimeter": 9}[member])]


def test_every_class_of_the_ancestry_is_asked_not_only_the_class_itself(tmp_path):
    index = TreeIndex(write_tree(tmp_path / "open-new", NEW), ["upkg"])
    reason = lambda name: index.open_members(*index.class_of(f"upkg.ops.{name}"))  # noqa: E731
    assert "threading.Thread" in reason("Fused") and reason("Fused").startswith("Op ")
    assert reason("Proxy") == "Lazy defines __getattr__"
    assert "not a class of the tree" in reason("Made")  # Dynamic = make_base(): its members are unknown
    assert reason("Box") is None and reason("Tall") is None
    assert index.resolve_dotted("upkg.ops.Fused.size").status == "unknown"
    assert index.resolve_dotted("upkg.ops.Made.extra").status == "unknown"
    assert index.resolve_dotted("upkg.ops.Box.put").status == "missing"


def test_a_layer_deriving_from_torch_nn_module_keeps_its_members_checked(report, tmp_path):
    gone = [r for r in report.records if r.symbol == "upkg.layers.Rotary.cos_sin"]
    assert len(gone) == 1 and gone[0].severity is Severity.BREAKING
    assert not [r for r in report.records + report.notes if r.symbol in ("upkg.layers.Rotary.positions",
                                                                         "upkg.layers.Rotary.register_parameter")]
    index = TreeIndex(write_tree(tmp_path / "open-new2", NEW), ["upkg"])
    assert index.open_members(*index.class_of("upkg.layers.Rotary")) is None
    assert index.resolve_dotted("upkg.layers.Rotary.register_parameter").status == "found"
