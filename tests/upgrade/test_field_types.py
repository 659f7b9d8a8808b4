"""Typed reads through upstream fields whose annotation changed, on a synthetic two-lane plugin (`myplug`
on upkg 1.0 -> 2.0), no network.

The scheduler-output pattern: at 1.0 `Output.cached` is a `list[Cached]` and `Cached.new_ids` a
`list[int]`; at 2.0 `Output.cached` is one `Cached` whose fields are per-request lists
(`new_ids: list[list[int]]`). The plugin's release lane iterates the list; its main lane, written for
2.0, reads `cached.new_ids[i]` through a parameter annotated `Output`. The main-lane read is typed
through the target's field (the baseline's is a list: its element class is not followed there) and the
field's changed annotation is reported at the site, as a note; an annotation spelled differently but
meaning the same (`Optional[int]` / `int | None`) is not."""

from __future__ import annotations

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

OUTPUT_OLD = """
    from dataclasses import dataclass
    from typing import Optional


    @dataclass
    class Cached:
        req_id: str
        new_ids: list[int]
        step: Optional[int]


    @dataclass
    class Output:
        cached: list[Cached]
        total: int
"""
OUTPUT_NEW = """
    from dataclasses import dataclass


    @dataclass
    class Cached:
        req_ids: list[str]
        new_ids: list[list[int]]  # per request
        step: int | None


    @dataclass
    class Output:
        cached: Cached
        total: int
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/output.py": OUTPUT_OLD}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/output.py": OUTPUT_NEW}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/runner.py": """
        from upkg.output import Output

        from myplug.utils import upkg_version_is


        def update(out: Output):
            if upkg_version_is("1.0"):
                for data in out.cached:
                    data.new_ids.append(0)
            else:
                data = out.cached
                for i, req_id in enumerate(data.req_ids):
                    ids = data.new_ids[i]
                    step = data.step
            return out.total
    """,
}


def _report(project, tmp_path):
    old, new = write_tree(tmp_path / "old", OLD), write_tree(tmp_path / "new", NEW)
    plugin = write_tree(tmp_path / "plugin", PLUGIN)
    return run_analysis(AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                                        upstream_paths={"1.0": old, "2.0": new}, config=load_config()))


def test_a_main_lane_read_through_a_retyped_field_is_a_note_at_its_site(project, tmp_path):
    report = _report(project, tmp_path)
    retyped = {r.symbol: r for r in report.notes if r.detail.get("change") == "field_annotation"}
    assert "upkg.output.Cached.new_ids" in retyped  # typed through the target's Output.cached
    note = retyped["upkg.output.Cached.new_ids"]
    assert note.severity == Severity.NOTE
    assert (note.detail["old_annotation"], note.detail["new_annotation"]) == ("list[int]", "list[list[int]]")
    assert [s.line for s in note.sites] == [13]
    assert "upkg.output.Cached.step" not in retyped  # Optional[int] and int | None are the same type
    assert "upkg.output.Output.total" not in retyped  # unchanged
    # the main lane's reads resolve at the target: nothing breaks there
    assert not [r for r in report.records if r.symbol.startswith("upkg.output.Cached")]
