"""Stored runs: `--compare` (new failures, fixes, metric drift) and the HTML `--report`."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from porter.smoke.compare import compare_runs
from porter.smoke.report import sparkline
from porter.smoke.store import RunStore
from tests.smoke.smoke_helpers import invoke


def _result(gate, verdict, level="L3", **values):
    return {"gate": gate, "name": gate, "level": level, "verdict": verdict, "values": values,
            "thresholds": {"abs_diff": 1e-6} if "abs_diff" in values else {}}


def _run(host, run_id, results, error=None):
    return {"schema": "porter.smoke-run/1", "host": host, "run_id": run_id, "level": "L3", "ok": error is None,
            "transport": "local", "stack": {"upstreams": {"torch": {"version": "2.13.0"}}, "forks": {}},
            "report": {"schema": "vime.smoke/1", "level": "L3", "results": results} if results is not None else None,
            "error": error}


def _store(project: Path, *runs) -> RunStore:
    store = RunStore(project / "runs")
    for run in runs:
        path = project / "runs" / run["host"] / run["run_id"]
        path.mkdir(parents=True)
        store.save(path, run)
    return store


OLD = _run("a3", "20261129T090000Z", [
    _result("G1", "pass", abs_diff=0.010), _result("G2", "fail", sha_equal=False),
    _result("G4", "pass", max_diff=2.0e-12), _result("L1.import.vllm", "skip", level="L1"),
])
NEW = _run("a3", "20261129T100000Z", [
    _result("G1", "fail", abs_diff=0.020), _result("G2", "pass", sha_equal=True),
    _result("G4", "pass", max_diff=9.0e-12), _result("G5", "error"),
])


def test_compare_new_failures_fixes_and_drift():
    c = compare_runs(OLD, NEW, tolerance=0.10)
    assert c.new_failures == ["G1", "G5"]
    assert c.fixed == ["G2"] and c.added == ["G5"] and c.removed == ["L1.import.vllm"]
    assert [(d.gate, d.metric) for d in c.drift] == [("G1", "abs_diff")]
    assert math.isclose(c.drift[0].rel_change, 1.0)
    assert c.regressed
    # Sub-noise values (1e-12 scale) never count as drift; identical runs do not regress.
    assert not compare_runs(OLD, OLD).regressed and compare_runs(OLD, OLD).drift == []


def test_compare_run_level_error_is_a_regression():
    broken = _run("a3", "20261129T110000Z", None, error={"message": "host a3 is unreachable"})
    assert compare_runs(OLD, broken).error_change == "new" and compare_runs(OLD, broken).regressed
    assert compare_runs(broken, OLD).error_change == "gone"


def test_cli_compare_previous_with_the_next_run(project):
    _store(project, OLD, NEW)
    code, doc, _ = invoke("smoke", "--compare", "a3/20261129T090000Z", "--json")
    assert code == 1
    assert doc["comparison"]["new_failures"] == ["G1", "G5"] and doc["comparison"]["regressed"] is True
    assert doc["comparison"]["new_run"] == "a3/20261129T100000Z"
    # The latest run has nothing newer: a usage problem, said so.
    code, doc, _ = invoke("smoke", "--compare", "a3/20261129T100000Z", "--json")
    assert code == 2 and "newer than" in doc["error"]["message"]
    # A bare HOST without --host: what changed in its latest run, against the one before.
    code, doc, _ = invoke("smoke", "--compare", "a3", "--json")
    assert code == 1 and doc["comparison"]["old_run"] == "a3/20261129T090000Z"
    assert doc["comparison"]["new_run"] == "a3/20261129T100000Z"
    code, _, text = invoke("smoke", "--compare", str(project / "runs/a3/20261129T090000Z/result.json"))
    assert code == 1 and "new failures: G1, G5" in text and "drift G1.abs_diff" in text


def test_cli_compare_after_a_real_run(project, tmp_path):
    """--host and --compare together: the new run is compared with the stored one."""
    import sys

    from tests.smoke.smoke_helpers import write_config

    write_config(project, {"box": {"transport": "local", "python": sys.executable, "workdir": str(tmp_path / "w")}})
    code, first, _ = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    assert code == 0
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--compare", "box", "--json")
    assert code == 0
    assert doc["comparison"]["old_run"] == f"box/{first['run']['run_id']}"
    assert doc["comparison"]["new_failures"] == [] and doc["comparison"]["regressed"] is False


def test_html_report_is_self_contained_with_sparklines(project):
    third = _run("a3", "20261129T120000Z", [_result("G1", "pass", abs_diff=0.005)])
    local = _run("local", "20261129T090500Z", [_result("L2.matmul", "pass", level="L2", max_rel_err=3e-7)])
    _store(project, OLD, NEW, third, local)
    out = project / "report.html"
    umask = os.umask(0o022)
    try:
        code, doc, _ = invoke("smoke", "--report", str(out), "--json")
    finally:
        os.umask(umask)
    assert code == 0 and doc["report_file"] == str(out)
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert out.stat().st_mode & 0o777 == 0o644  # a report is for sharing: umask 022, not mkstemp's 0600
    assert "<script" not in html and not re.search(r"""(src|href)=["']https?://""", html)
    assert ">a3 <" in html and ">local <" in html
    # G1 has three measured points over time -> one polyline with three points.
    g1_row = html[html.index(">G1<"):].split("</tr>")[0]
    points = re.search(r'points="([^"]+)"', g1_row).group(1).split()
    assert len(points) == 3
    assert "threshold 1e-06" in g1_row


def test_sparkline_handles_gaps_and_constant_series():
    svg = sparkline([1.0, None, 1.0])
    points = re.search(r'points="([^"]+)"', svg).group(1).split()
    assert points == ["0.0,14.0", "140.0,14.0"]  # the gap is skipped; a flat series sits mid-height
    assert sparkline([None, None]) == ""


def test_store_resolve_forms(project):
    store = _store(project, OLD, NEW)
    assert store.resolve("a3").run_id == NEW["run_id"]
    assert store.resolve("a3/20261129T090000Z").run_id == OLD["run_id"]
    assert store.resolve(str(project / "runs/a3/20261129T100000Z")).run_id == NEW["run_id"]
    code, doc, _ = invoke("smoke", "--compare", "nowhere", "--json")
    assert code == 2 and "no stored smoke run" in doc["error"]["message"]
    saved = json.loads((project / "runs/a3/20261129T090000Z/result.json").read_text())
    assert saved["run_id"] == OLD["run_id"]


def test_unwritable_runs_dir_is_an_environment_error(project, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the runs directory should be")
    (project / "porter.yaml").write_text(f"runs_dir: {blocker}/runs\n")
    code, doc, _ = invoke("smoke", "--host", "local", "--level", "L0", "--json")
    assert code == 3 and "cannot create the run record directory" in doc["error"]["message"]


def test_compare_host_with_a_single_run_says_so(project):
    _store(project, OLD)
    code, doc, _ = invoke("smoke", "--compare", "a3", "--json")
    assert code == 2 and "only one stored run" in doc["error"]["message"]


def test_unwritable_report_or_stack_path_is_an_input_error(project, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for target in (tmp_path, blocker / "r.html"):  # a directory; a path under a file
        code, doc, _ = invoke("smoke", "--report", str(target), "--json")
        assert code == 2 and "cannot write the HTML report" in doc["error"]["message"], doc
        code, doc, _ = invoke("apply", "torch==2.13.0", "--to", "vime", "--stack", str(target), "--json")
        assert code == 2 and "cannot write the stack file" in doc["error"]["message"], doc
