"""The two-lane plugin of two_lane_fixtures.py at upkg 1.0 -> 2.0: guard verdicts, lanes, typed
receivers, installed patches and the false-alarm rules, through run_analysis."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import DriftFamily, Severity
from tests.upgrade import two_lane_fixtures as T
from tests.upgrade.upgrade_fixtures import write_tree


@pytest.fixture
def lanes_report(project, tmp_path):
    old = write_tree(tmp_path / "lane-old", T.OLD)
    new = write_tree(tmp_path / "lane-new", T.NEW)
    plugin = write_tree(tmp_path / "lane-plugin", T.PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def _records(report):
    return {r.symbol: r for r in report.records}


def _guard(report, line):
    return next(g for g in report.dead_guards if g.path == "myplug/lanes.py" and g.line == line)


def test_each_guard_gets_its_verdict(lanes_report):
    assert _guard(lanes_report, 4).verdict == "collapse" and _guard(lanes_report, 4).kept == "else"
    retarget = _guard(lanes_report, 9)
    assert retarget.verdict == "retarget" and retarget.retarget_to == "2.0"
    assert _guard(lanes_report, 14).verdict == "collapse"  # a stale guard for a release older than both lanes
    doc = lanes_report.to_dict()
    assert {"path", "line", "end_line", "guard", "verdict"} <= set(doc["dead_guards"][0])
    assert doc["summary"]["guards"]["retarget"] == 1


def test_main_lane_code_is_checked_against_the_target_itself(lanes_report):
    main_only = _records(lanes_report)["upkg.core.main_only"]
    assert main_only.severity is Severity.BREAKING and main_only.lane == "main"
    assert main_only.verdict == "the dead branch is the one that resolves at 2.0: retarget the guard to 2.0"
    old_api = next(n for n in lanes_report.notes if n.symbol == "upkg.core.old_api")
    assert old_api.lane == "both" or old_api.lane == "release"
    assert old_api.verdict == "dead at 2.0: collapse"


def test_a_module_imported_only_under_a_dead_guard_is_dead(lanes_report):
    assert "myplug.legacy_path" in lanes_report.dead_modules and "myplug" not in lanes_report.dead_modules
    assert all(s.path != "myplug/legacy_path.py" for r in lanes_report.records for s in r.sites)


def test_typed_receivers_kwargs_dicts_and_self_uses(lanes_report):
    records = _records(lanes_report)
    execute = records["upkg.core.Runner.execute"]  # self.runner.execute(**{"batch": 1}), runner: Runner
    assert execute.family is DriftFamily.SIGNATURE and "'batch'" in execute.message
    lines = {s.line for s in execute.sites if s.path == "myplug/typed.py"}
    assert any("runner.execute(batch=3)" in s.code for s in execute.sites), lines  # receiver from an upstream factory
    assert records["upkg.core.Runner.prepare"].family is DriftFamily.REMOVED  # self.prepare() in a subclass
    assert records["upkg.core.Runner.cache"].severity is Severity.BREAKING  # the base __init__ stopped setting it


def test_installed_patches(lanes_report):
    records = _records(lanes_report)
    assert "does not accept 'b'" in records["upkg.core.hook_fn"].message
    assert records["upkg.core.aliased"].detail["change"] == "patch_alias"
    assert records["upkg.core.Thing"].detail["missing"] == ["stop"]
    assert "upkg.core.compute" not in records  # a sync hint, not a break
    copied = next(c for c in lanes_report.copies if c.symbol == "upkg.core.compute")
    assert copied.detail["change"] == "copied_body_changed" and "+scaled = logits / max(temperature, 1e-5)" in copied.detail["upstream_diff"]


def test_false_alarm_rules(lanes_report):
    symbols = {r.symbol for r in lanes_report.records}
    assert "upkg.core.Runner.create" not in symbols  # classmethod: its first parameter is bound, whatever its name
    assert "upkg.core.Runner.hook" not in symbols  # the base gained an optional parameter no upstream caller passes
    assert "upkg.core.make2" not in symbols  # the call runs the plugin's replacement
    assert "upkg.core.Worker" not in symbols  # sample_tokens is defined under `if not upkg_version_is(...)`
    # A subclass of a moved base is still checked against the base's new home.
    assert _records(lanes_report)["upkg.core.Mover.run"].detail["change"] == "override_mismatch"


def test_live_breaks_come_first(lanes_report):
    severities = [r.severity for r in lanes_report.records]
    assert severities == sorted(severities, key=lambda s: s is not Severity.BREAKING)
    assert Severity.RISKY in severities


def test_a_worker_must_answer_every_rpc_the_target_sends(lanes_report):
    rpc = [r for r in lanes_report.records if r.family is DriftFamily.NEW_METHOD and r.symbol == "upkg.worker_base.WorkerBase"]
    assert len(rpc) == 1 and rpc[0].severity is Severity.BREAKING and rpc[0].detail["methods"] == ["reset_cache"]
    assert rpc[0].detail["plugin_class"] == "NPUWorker"  # NPUWorkerDone defines it
