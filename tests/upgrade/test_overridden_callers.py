"""A narrow override's new upstream callers, when the calling upstream method is itself overridden by
the plugin (synthetic `myplug` on upkg 1.0 -> 2.0, no network).

The quant-method pattern: upstream's `Layer.forward_impl` calls `self.quant_method.apply(...)`; at 2.0
it starts passing `top_k=` (and a new `forward_impl_chunked`, which only `forward_impl` calls, passes
`extra=`). The plugin's `MyMethod.apply` takes neither, but the plugin's `MyLayer` overrides
`forward_impl` and calls `apply` its own way: the new upstream calls never reach the override. Without
`MyLayer`'s override they do, and the finding stands; a call from another file to the chunked helper
keeps it reachable, and so does an override that calls `super().forward_impl(...)`."""

from __future__ import annotations

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from tests.upgrade.upgrade_fixtures import write_tree

METHOD = """
    class MethodBase:
        def apply(self, layer, x, top_k=None, extra=None):
            raise NotImplementedError
"""
OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/method.py": METHOD,
    "upkg/layer.py": """
        class Layer:
            def __init__(self, method):
                self.quant_method = method

            def forward(self, x):
                return self.forward_impl(x)

            def forward_impl(self, x):
                return self.quant_method.apply(self, x)
    """,
}
NEW_LAYER = """
    class Layer:
        def __init__(self, method):
            self.quant_method = method

        def forward(self, x):
            return self.forward_impl(x)

        def forward_impl(self, x):
            if x is None:
                return self.forward_impl_chunked(x)
            return self.quant_method.apply(self, x, top_k=2)

        def forward_impl_chunked(self, x):
            return self.quant_method.apply(self, x, extra=1)
"""
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/method.py": METHOD,
    "upkg/layer.py": NEW_LAYER,
}
PLUGIN_METHOD = """
    from upkg.method import MethodBase


    class MyMethod(MethodBase):
        def apply(self, layer, x):
            return x
"""
PLUGIN_LAYER = """
    from upkg.layer import Layer


    class MyLayer(Layer):
        def forward_impl(self, x):
            return self.quant_method.apply(self, x)
"""


def _apply_records(project, tmp_path, plugin_files, new=NEW):
    old, new = write_tree(tmp_path / "old", OLD), write_tree(tmp_path / "new", new)
    plugin = write_tree(tmp_path / "plugin", {"myplug/__init__.py": "", **plugin_files})
    report = run_analysis(AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                                          upstream_paths={"1.0": old, "2.0": new}, config=load_config()))
    return [r for r in report.records if r.symbol == "upkg.method.MethodBase.apply"
            and r.detail.get("change") == "override_new_callers"]


def test_new_calls_from_a_method_the_plugin_does_not_override_break(project, tmp_path):
    records = _apply_records(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD})
    assert len(records) == 1
    assert set(records[0].detail["calls"]) == {"upkg/layer.py:11", "upkg/layer.py:14"}


def test_new_calls_only_from_overridden_methods_or_what_only_they_reach_say_nothing(project, tmp_path):
    assert _apply_records(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD, "myplug/layer.py": PLUGIN_LAYER}) == []


def test_a_helper_another_upstream_file_calls_stays_a_caller(project, tmp_path):
    new = {**NEW, "upkg/runner.py": """
        def run(layer, x):
            return layer.forward_impl_chunked(x)
    """}
    records = _apply_records(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD, "myplug/layer.py": PLUGIN_LAYER}, new)
    assert len(records) == 1 and records[0].detail["calls"] == ["upkg/layer.py:14"]


def test_an_override_that_calls_super_still_runs_the_upstream_calls(project, tmp_path):
    layer = PLUGIN_LAYER.replace("return self.quant_method.apply(self, x)", "return super().forward_impl(x)")
    records = _apply_records(project, tmp_path, {"myplug/method.py": PLUGIN_METHOD, "myplug/layer.py": layer})
    assert len(records) == 1 and set(records[0].detail["calls"]) == {"upkg/layer.py:11", "upkg/layer.py:14"}
