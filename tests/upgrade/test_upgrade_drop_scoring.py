"""bench/upgrade_drop.py's scoring of porter's drop edits against the maintainers' guard verdicts:
one edit per guard, so one edit at a line never credits two guards that share it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from upgrade_drop import score_edits  # noqa: E402  (bench/upgrade_drop.py)


def _guard(line: int, verdict: str, guard: str = 'vllm_version_is("0.1")') -> dict:
    return {"path": "p.py", "line": line, "guard": guard, "verdict": verdict}


def test_one_edit_credits_one_guard_at_its_line():
    case = {"guards": [_guard(5, "collapse"), _guard(5, "collapse"), _guard(9, "retarget"), _guard(12, "keep")]}
    edits = [{"path": "p.py", "line": 5, "action": "collapse"}, {"path": "p.py", "line": 9, "action": "collapse"},
             {"path": "p.py", "line": 12, "action": "collapse"}, {"path": "p.py", "line": 5, "action": "remove_import"}]
    same, extra, missed = score_edits(case, edits)
    assert same == 1 and extra == 1
    assert [m.split(" (")[1] for m in missed] == ["collapse; porter: keep)", "retarget; porter: collapse)"]


def test_two_edits_at_one_line_credit_both_guards():
    case = {"guards": [_guard(5, "collapse"), _guard(5, "retarget")]}
    edits = [{"path": "p.py", "line": 5, "action": "retarget"}, {"path": "p.py", "line": 5, "action": "collapse"}]
    assert score_edits(case, edits) == (2, 0, [])
