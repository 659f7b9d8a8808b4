"""A patch whose replacement is a method of a plugin class (`Up.__init__ = Mine.__init__`) is checked like a
function replacement (synthetic `myplug` on upkg 1.0 -> 2.0, no network).

At 2.0 `Layer.__init__` gains `buffer=None` and `Model` builds its layers with `Layer(config, prefix, buffer)`;
the plugin installs `MyLayer.__init__(self, config, prefix)` over `Layer.__init__`: a breaking
`patch_signature` finding, sited at the patch statement and at the replacement's `def` (where the fix goes)."""

from __future__ import annotations

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

LAYER = """
    class Layer:
        def __init__(self, config, prefix{buffer}):
            self.prefix = prefix


    class Model:
        def __init__(self, config):
            self.layers = [Layer(config, str(i){arg}) for i in range(2)]
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/layer.py": LAYER.format(buffer="", arg="")}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/layer.py": LAYER.format(buffer=", buffer=None", arg=", None")}
PLUGIN = """
    from upkg.layer import Layer


    class MyLayer(Layer):
        def __init__(self, config, prefix):
            self.prefix = prefix + "!"


    Layer.__init__ = MyLayer.__init__
"""


def test_a_plugin_class_method_installed_over_an_upstream_method_is_checked(project, tmp_path):
    old, new = write_tree(tmp_path / "old", OLD), write_tree(tmp_path / "new", NEW)
    plugin = write_tree(tmp_path / "plugin", {"myplug/__init__.py": "", "myplug/layer.py": PLUGIN})
    report = run_analysis(AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                                          upstream_paths={"1.0": old, "2.0": new}, config=load_config()))
    found = [r for r in report.records if r.detail.get("change") == "patch_signature"]
    assert len(found) == 1 and found[0].symbol == "upkg.layer.Layer.__init__"
    assert found[0].severity is Severity.BREAKING
    assert "does not accept 'buffer'" in found[0].message and "MyLayer.__init__" in found[0].message
    assert [(s.path, s.line) for s in found[0].sites] == [("myplug/layer.py", 5), ("myplug/layer.py", 9)]
