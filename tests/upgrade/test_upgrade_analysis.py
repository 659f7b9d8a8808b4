"""run_analysis on the synthetic upkg 1.0 -> 2.0 pair: one finding per family, guards decide
records vs notes, re-exports / star imports / lazy modules resolve."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import DriftFamily, GuardKind, Outcome, Severity


@pytest.fixture
def report(project, trees):
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=trees["plugin"],
                              upstream_paths={"1.0": trees["v1"], "2.0": trees["v2"]}, config=load_config())
    return run_analysis(request)


def by_symbol(records):
    return {r.symbol: r for r in records}


def test_one_record_per_family(report):
    records = by_symbol(report.records)
    expected = {
        "upkg.core.gone_fn": DriftFamily.REMOVED,
        "upkg.core.Mover": DriftFamily.MOVED,
        "upkg.star.NotInAll": DriftFamily.MOVED,
        "upkg.core.compute_probs": DriftFamily.RENAMED,
        "upkg.core.make": DriftFamily.SIGNATURE,
        "upkg.core.build": DriftFamily.SIGNATURE,
        "upkg.core.Base.hook": DriftFamily.SIGNATURE,
        "upkg.core.Batch": DriftFamily.NEW_ATTRIBUTE,
        "upkg.core.Worker": DriftFamily.NEW_METHOD,
        "upkg.core.patched_fn": DriftFamily.MONKEYPATCH,
        "upkg.core.MAX_BATCH": DriftFamily.RENAMED,  # constants: renamed on name similarity alone
        "upkg.core.INPUT_REGISTRY": DriftFamily.REMOVED,  # ... and never to an unrelated new constant
        "upkg.ops.kernels": DriftFamily.MOVED,
        "upkg.closed.cdiv": DriftFamily.MOVED,  # a closed __getattr__ (deprecation map + AttributeError) does not serve it  # a submodule imported with `from upkg.ops import kernels`
    }
    assert {s: r.family for s, r in records.items()} == expected
    assert len({r.key for r in report.records}) == len(report.records), "keys must be unique"


def test_moved_and_renamed_point_at_the_new_home(report):
    records = by_symbol(report.records)
    moved = records["upkg.core.Mover"]
    assert moved.new_location.dotted == "upkg.new.place.Mover"
    assert moved.confidence > 0.8
    assert moved.new_location.file == "upkg/new/place.py"
    assert moved.suggested_strategy == "lazy_import_fallback"
    assert "re-exported from upkg.new (shorter import path)" in moved.evidence
    renamed = records["upkg.core.compute_probs"]
    assert renamed.new_location.dotted == "upkg.core.compute_probabilities"
    assert 0.6 <= renamed.confidence < 1
    assert records["upkg.core.gone_fn"].new_location is None
    assert records["upkg.star.NotInAll"].new_location.dotted == "upkg._starsrc.NotInAll"
    assert records["upkg.ops.kernels"].new_location.dotted == "upkg.new.kernels"
    assert records["upkg.closed.cdiv"].new_location.dotted == "upkg.math_utils.cdiv"


def test_signature_details(report):
    records = by_symbol(report.records)
    assert records["upkg.core.make"].detail["parameter"] == "flag"
    assert {s.path for s in records["upkg.core.make"].sites} == {"myplug/families.py", "myplug/guards.py"}
    assert records["upkg.core.make"].detail["change"] == "keyword_removed"
    assert records["upkg.core.build"].detail["parameter"] == "y"
    hook = records["upkg.core.Base.hook"]
    assert hook.detail["change"] == "override_mismatch" and hook.detail["added"] == ["b"]
    assert records["upkg.core.Batch"].detail["attributes"] == ["use_replayssm"]
    assert records["upkg.core.Batch"].detail["read_by_upstream"] == ["use_replayssm"]
    assert records["upkg.core.Batch"].severity == Severity.BREAKING
    worker = records["upkg.core.Worker"]
    assert worker.detail["methods"] == ["optional_hook", "sample_tokens"]
    assert worker.detail["kinds"] == {"optional_hook": "not_implemented", "sample_tokens": "abstract"}
    assert worker.severity == Severity.BREAKING
    rot = by_symbol(report.notes)["upkg.core.Rot"]  # a changed base list breaks nothing by itself: a note
    assert rot.family is DriftFamily.BASE_CHANGED and rot.severity == Severity.NOTE
    assert records["upkg.core.patched_fn"].sites[0].path == "myplug/families.py"


def test_guards_turn_breaks_into_notes(report):
    notes = by_symbol(report.notes)
    assert set(notes) == {"upkg.core.gone_type", "upkg.core.gone_guarded", "upkg.core.gone_tuple",
                          "upkg.core.gone_try", "upkg.core.gone_fallback", "upkg.core.gone_attr",
                          "upkg.core.gone_suppressed", "upkg.core.Rot",
                          "upkg.core.shape_of"}  # int -> tuple[int, int] into one name: a hint, a note
    assert notes["upkg.core.gone_suppressed"].guard.kind == GuardKind.IMPORT_ERROR
    assert notes["upkg.core.gone_type"].guard.kind == GuardKind.TYPE_CHECKING
    assert notes["upkg.core.gone_guarded"].guard.kind == GuardKind.VERSION
    assert notes["upkg.core.gone_guarded"].guard.live is False
    assert notes["upkg.core.gone_tuple"].guard.kind == GuardKind.VERSION
    assert notes["upkg.core.gone_try"].guard.kind == GuardKind.IMPORT_ERROR and notes["upkg.core.gone_try"].guard.live
    assert notes["upkg.core.gone_fallback"].guard.live is False
    assert notes["upkg.core.gone_attr"].guard.kind == GuardKind.HASATTR
    assert all(n.severity == Severity.NOTE for n in report.notes)


def test_reexports_star_imports_and_lazy_modules_resolve(report):
    verdicts = {v.symbol: v.status for v in report.verdicts}
    assert verdicts["upkg.Exported"] == "found"  # upkg -> upkg.core -> upkg._impl
    assert verdicts["upkg.star.Starred"] == "found"  # star import with __all__
    assert verdicts["upkg.lazy.old_name"] == "found"  # served by the module __getattr__ map
    assert verdicts["upkg.lazy.whatever_lazy"] == "unknown"  # an open lazy module may serve it: not missing
    assert verdicts["upkg.closed.legacy"] == "found"  # in the deprecation map
    assert verdicts["upkg.closed.cdiv"] == "missing"  # the closed __getattr__ raises AttributeError for it
    assert verdicts["upkg.core.gone_fn"] == "missing"
    assert "upkg.lazy.whatever_lazy" not in {r.symbol for r in report.records}


def test_outcome_and_excluded_tests(report):
    assert report.outcome.outcome == Outcome.C_PATCH
    assert any("may patch" in r for r in report.outcome.reasons)
    # tests/ of the plugin are excluded by default: their import of a missing name is not a finding
    assert all(not s.path.startswith("tests/") for r in report.records for s in r.sites)
    d = report.to_dict()
    assert d["summary"]["breaking"] == len(report.breaking) == 14
    assert d["baseline"]["label"] == "1.0" and d["target"]["version"] == "2.0"


def test_no_drift_at_the_same_version(project, trees):
    request = AnalysisRequest(plugin="myplug", target="1.0", baseline="1.0", plugin_path=trees["plugin"],
                              upstream_paths={"1.0": trees["v1"]}, config=load_config())
    report = run_analysis(request)
    assert report.breaking == []
    # At 1.0 the version guards flip: the 2.0-only branch is dead, and its import is only a note.
    assert "upkg.v2only.OnlyInTwo" not in {r.symbol for r in report.records if r.severity == Severity.BREAKING}


def test_foreign_sites_mean_c_report(project, trees, tmp_path):
    plugin = tmp_path / "foreign"
    (plugin / "core").mkdir(parents=True)
    (plugin / "core" / "x.py").write_text("from upkg.core import gone_fn\n")
    request = AnalysisRequest(plugin="foreign", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": trees["v1"], "2.0": trees["v2"]}, config=load_config())
    report = run_analysis(request)
    assert report.outcome.outcome == Outcome.C_REPORT
    assert "core/x.py:1" in " ".join(report.outcome.reasons)


def test_warm_run_uses_the_cache(project, trees):
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=trees["plugin"],
                              upstream_paths={"1.0": trees["v1"], "2.0": trees["v2"]}, config=load_config())
    first = run_analysis(request)
    second = run_analysis(request)
    assert first.index_stats["target"]["parsed"] > 0 and first.index_stats["result_cache"] == "miss"
    assert second.index_stats["result_cache"] == "hit"
    assert [r.to_dict() for r in first.records] == [r.to_dict() for r in second.records]
    # A plugin edit misses the result cache but reuses every parsed upstream module.
    extra = trees["plugin"] / "myplug" / "extra.py"
    extra.write_text("from upkg.core import gone_fn\n")
    third = run_analysis(request)
    assert third.index_stats["result_cache"] == "miss"
    assert third.index_stats["target"]["parsed"] == 0 and third.index_stats["target"]["cached"] > 0
    gone = next(r for r in third.records if r.symbol == "upkg.core.gone_fn")
    assert "myplug/extra.py" in {s.path for s in gone.sites}


def test_target_without_baseline_still_finds_missing_imports(project, trees):
    request = AnalysisRequest(plugin="myplug", target="2.0", plugin_path=trees["plugin"],
                              upstream_paths={"2.0": trees["v2"]}, config=load_config())
    # forks.yaml names baseline 1.0 for myplug; with no 1.0 tree registered it would need git, so
    # point the baseline at nothing by giving an explicit path-less request through a copy of the config.
    import dataclasses

    config = dataclasses.replace(load_config(), forks_file=Path("missing-forks.yaml"))
    report = run_analysis(dataclasses.replace(request, config=config))
    assert report.baseline is None
    symbols = {r.symbol for r in report.records}
    assert "upkg.core.gone_fn" in symbols and "upkg.core.Mover" in symbols
    assert "upkg.core.Rot" not in symbols  # base changes need a baseline


def test_progress_reports_scanning_and_indexing(project, trees):
    from contextlib import contextmanager

    class Recorder:
        def __init__(self):
            self.stages, self.advanced, self.messages = [], 0, []

        @contextmanager
        def progress(self, description, total=None):
            self.stages.append((description, total))

            def advance(n=1):
                self.advanced += n

            yield advance

        def status(self, message):
            self.messages.append(message)

    recorder = Recorder()
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=trees["plugin"],
                              upstream_paths={"1.0": trees["v1"], "2.0": trees["v2"]}, config=load_config())
    run_analysis(request, progress=recorder)
    names = [d for d, _ in recorder.stages]
    assert names[0] == "scanning myplug" and recorder.stages[0][1] == 4  # tests/ excluded
    assert "indexing upkg 2.0 and upkg 1.0" in names  # both trees in one parallel batch
    assert recorder.advanced >= 4 + 2
