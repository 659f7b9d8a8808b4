"""bench/replay.py's use of `known_real` entries: an entry that names a path and a family judges the
findings it fits; one that leaves the path or the family open stands for one finding, and judges
none when two unmatched findings of the case fit it (a verdict on one claim about a symbol is not a
verdict on another claim about it, or on another plugin site)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from replay import Case, Judged, score_case  # noqa: E402  (bench/replay.py)


def finding(family: str, path: str, symbol: str = "vllm.x.f") -> dict:
    return {"key": f"{family}:{symbol}", "family": family, "symbol": symbol, "severity": "breaking",
            "sites": [{"path": path, "line": 3}]}


def case(*known_real: Judged) -> Case:
    return Case(id="c", kind="upgrade", commit="0" * 40, parent="1" * 40, title="", old="1", new="2", split="dev",
                items=(), guards=(), known_real=known_real, known_false=())


def test_an_open_entry_judges_its_one_finding():
    score = score_case(case(Judged(symbol="vllm.x.f")), {"records": [finding("F1", "a.py")]}, 0.0)
    assert (score.real_unchanged, score.false_alarms) == (1, 0)


def test_an_open_entry_that_fits_two_findings_judges_neither():
    records = [finding("F1", "a.py"), finding("F3", "b.py")]
    assert (score_case(case(Judged(symbol="vllm.x.f")), {"records": records}, 0.0).false_alarms) == 2
    # a path alone still leaves the family open: two claims at that path
    records = [finding("F1", "a.py"), finding("F3", "a.py")]
    assert score_case(case(Judged(symbol="vllm.x.f", path="a.py")), {"records": records}, 0.0).false_alarms == 2


def test_entries_that_name_path_and_family_judge_each_their_own():
    records = [finding("F1", "a.py"), finding("F3", "b.py")]
    score = score_case(case(Judged(symbol="vllm.x.f", path="a.py", family="F1")), {"records": records}, 0.0)
    assert (score.real_unchanged, score.false_alarms) == (1, 1)
    score = score_case(case(Judged(symbol="vllm.x.f", path="a.py", family="F1"),
                            Judged(symbol="vllm.x.f", path="b.py", family="F3")), {"records": records}, 0.0)
    assert (score.real_unchanged, score.false_alarms) == (2, 0)
