"""A run that unpacks upstream archives submits the plugin scan before it waits for the trees
(analyze._early_scan): the report equals that of a run without workers, and a run from unpacked
trees (which may hit the result cache) scans only after the cache check, as before."""

from __future__ import annotations

import textwrap

from porter.config import load_config
from porter.upgrade import analyze
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from tests.upgrade.upgrade_fixtures import UPKG_V1, UPKG_V2, make_wheel, write_tree

FILLERS = 60  # more plugin files than the scan's parallel threshold


def _fillers(version: str) -> dict[str, str]:
    gone = version == "2.0"  # every 9th function is renamed at 2.0: the plugin's import of it breaks
    return {f"upkg/fill/m{i:02d}.py": f"def {'g' if gone and i % 9 == 0 else 'f'}{i}(a, b=1):\n    return a\n"
            for i in range(FILLERS)} | {"upkg/fill/__init__.py": ""}


def _stable(report) -> dict:
    doc = report.to_dict()
    for volatile in ("timings", "index", "notices"):
        doc.pop(volatile, None)
    for key in ("plugin_tree", "baseline", "target"):
        for volatile in ("root", "from_cache", "origin"):
            doc[key].pop(volatile, None)
    return doc


def test_the_scan_started_while_archives_unpack_gives_the_serial_report(project, trees, tmp_path, monkeypatch):
    write_tree(trees["plugin"], {f"myplug/use{i:02d}.py": f"from upkg.fill.m{i:02d} import f{i}\n\nf{i}(1, b=2)\n"
                                 for i in range(FILLERS)})
    wheels = {v: make_wheel(tmp_path / f"upkg-{v}.whl", {k: textwrap.dedent(t).lstrip("\n") for k, t in (files | _fillers(v)).items()},
                            version=v) for v, files in (("1.0", UPKG_V1), ("2.0", UPKG_V2))}
    real_prepare = analyze.Sources.prepare_archives
    monkeypatch.setattr(analyze.Sources, "prepare_archives",  # the test's archives are small: unpack them in the pool too
                        lambda self, archives, pool, min_bytes=0, lean=False: real_prepare(self, archives, pool, 0, lean))
    started: list[object] = []
    real_early = analyze._early_scan

    def early_scan(*args):
        answer = real_early(*args)
        if answer is not None and answer.collect is not None:
            started.append(answer)
        return answer

    monkeypatch.setattr(analyze, "_early_scan", early_scan)

    def run(workers: int, cache: str):
        monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / cache))
        return run_analysis(AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=trees["plugin"],
                                            upstream_paths=dict(wheels), config=load_config(), workers=workers))

    early = run(2, "pooled")
    assert len(started) == 1  # submitted before the trees were awaited
    serial = run(1, "serial")
    assert len(started) == 1  # no pool: the scan runs where it always did
    assert early.usage.files_scanned == serial.usage.files_scanned >= FILLERS
    assert _stable(early) == _stable(serial)
    assert any(r.symbol.startswith("upkg.fill.") for r in early.records + early.notes)  # the fillers' drift is in it

    again = run(2, "pooled")  # trees unpacked already: the result cache answers, nothing is scanned
    assert len(started) == 1 and again.index_stats["result_cache"] == "hit"
