"""The warm path: a result-cache hit reads no plugin file's scan and starts no worker process,
and serves what the cold run computed; what the scan depends on is part of the result key."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade import analyze
from porter.upgrade.analyze import AnalysisRequest, run_analysis


def _request(trees, workers=None):
    return AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=trees["plugin"],
                           upstream_paths={"1.0": trees["v1"], "2.0": trees["v2"]}, config=load_config(), workers=workers)


def test_a_hit_serves_the_cold_report_without_scanning(project, trees, monkeypatch):
    first = run_analysis(_request(trees))
    assert first.index_stats["result_cache"] == "miss" and first.usage.uses > 0

    def no_scan(*args, **kwargs):
        raise AssertionError("a result-cache hit scanned the plugin")

    monkeypatch.setattr(analyze, "scan_plugin", no_scan)
    second = run_analysis(_request(trees))
    assert second.index_stats["result_cache"] == "hit"
    cold, warm = first.to_dict(), second.to_dict()
    for doc in (cold, warm):
        doc.pop("timings", None)
        doc.pop("index", None)
    assert warm == cold  # usage summary included: it travels in the cache entry


def test_an_old_format_entry_is_recomputed(project, trees, monkeypatch):
    """An entry that is not (result, usage) (a damaged file, an older porter's layout) is a miss."""
    import pickle

    first = run_analysis(_request(trees))
    entries = list((load_config().cache_dir / "results").rglob("*.pkl"))
    assert len(entries) == 1
    result, _usage = pickle.loads(entries[0].read_bytes())
    entries[0].write_bytes(pickle.dumps(result))  # the bare result, as version 1 stored it
    again = run_analysis(_request(trees))
    assert again.index_stats["result_cache"] == "miss"
    assert [r.to_dict() for r in again.records] == [r.to_dict() for r in first.records]


def test_scan_inputs_are_in_the_result_key(project, trees):
    """Singletons change what the scan records: a registry edit of them must not serve the old result."""
    run_analysis(_request(trees))
    registry = project / "knowledge" / "upstreams.yaml"
    text = registry.read_text(encoding="utf-8")
    registry.write_text(text.replace("    packages: [myplug]\n",
                                     "    packages: [myplug]\n    singletons:\n      upkg.core.thing: upkg.core.Base\n", 1),
                        encoding="utf-8")
    assert "singletons" in registry.read_text(encoding="utf-8")
    again = run_analysis(_request(trees))
    assert again.index_stats["result_cache"] == "miss"


def test_the_pool_starts_only_when_a_job_is_submitted(project, trees, monkeypatch):
    made = []
    real = analyze._LazyPool._executor

    def executor(self):
        made.append(self)
        return real(self)

    monkeypatch.setattr(analyze._LazyPool, "_executor", executor)
    run_analysis(_request(trees, workers=2))  # cold: the tiny trees parse in the main process
    made.clear()
    warm = run_analysis(_request(trees, workers=2))
    assert warm.index_stats["result_cache"] == "hit"
    assert made == []


def test_lazy_pool_runs_jobs_like_an_executor():
    pool = analyze._LazyPool(2)
    assert not pool.started
    pool.shutdown(wait=True)  # before any job: nothing to stop
    assert not pool.started
    try:
        assert pool.submit(pow, 2, 5).result() == 32
        assert list(pool.map(abs, [-1, -2, 3], chunksize=2)) == [1, 2, 3]
        assert pool.started
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("workers", [1])
def test_single_core_has_no_pool(workers):
    assert analyze._worker_pool(workers) is None
