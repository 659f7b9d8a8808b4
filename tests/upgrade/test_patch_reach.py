"""A monkeypatch of a re-exported name reaches only the code that looks the name up where it is patched
(synthetic `myplug` on upkg 1.0 -> 2.0, no network).

`upkg.attn` re-exports `get_backend` from `upkg.attn.selector`; at 2.0 it gains `kind=`, which the plugin's
replacement (installed as `upkg.attn.get_backend`) does not take. Every 2.0 caller imports it from
`upkg.attn.selector` (or calls an object's own `get_backend` method): none calls the replacement, so the
mismatch is a note. A caller that imports it from `upkg.attn` makes it breaking again."""

from __future__ import annotations

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

SELECTOR = "def get_backend(head, dtype{kind}):\n    return head\n"
LAYER = """
    from upkg.attn.selector import get_backend


    class Layer:
        def get_backend(self):
            return None

        def build(self, other):
            other.get_backend()
            return get_backend(1, 2{kind})
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n',
       "upkg/attn/__init__.py": "from upkg.attn.selector import get_backend\n",
       "upkg/attn/selector.py": SELECTOR.format(kind=""), "upkg/attn/layer.py": LAYER.format(kind="")}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n',
       "upkg/attn/__init__.py": "from upkg.attn.selector import get_backend\n",
       "upkg/attn/selector.py": SELECTOR.format(kind=", kind=None"), "upkg/attn/layer.py": LAYER.format(kind=", kind='x'")}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/patch.py": """
        import upkg.attn


        def my_get_backend(head, dtype):
            return head


        upkg.attn.get_backend = my_get_backend
    """,
}
THROUGH_PACKAGE = """
    from upkg.attn import get_backend


    def pick():
        return get_backend(1, 2, kind="y")
"""


def _patch_findings(project, tmp_path, new=NEW):
    old, new = write_tree(tmp_path / "old", OLD), write_tree(tmp_path / "new", new)
    plugin = write_tree(tmp_path / "plugin", PLUGIN)
    report = run_analysis(AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                                          upstream_paths={"1.0": old, "2.0": new}, config=load_config()))
    return [r for r in report.records + report.notes if r.detail.get("change") == "patch_signature"]


def test_a_patch_no_caller_looks_up_where_it_is_installed_is_a_note(project, tmp_path):
    found = _patch_findings(project, tmp_path)
    assert len(found) == 1 and found[0].severity == Severity.NOTE and found[0].detail.get("unreached")
    assert "no upstream call looks get_backend up in upkg.attn" in found[0].message


def test_a_caller_importing_from_the_patched_module_keeps_it_breaking(project, tmp_path):
    found = _patch_findings(project, tmp_path, {**NEW, "upkg/picker.py": THROUGH_PACKAGE})
    assert len(found) == 1 and found[0].severity == Severity.BREAKING and not found[0].detail.get("unreached")
