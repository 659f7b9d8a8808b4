"""bench/replay.py's pairing of truth guards with porter's `dead_guards` entries: one entry is the
verdict on one guard, and a guard porter did not list is never credited with the verdict on a
neighbouring or enclosing guard (the scorer once took any entry within a line or enclosing the guard)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from replay import GuardItem, guard_versions, match_guards  # noqa: E402  (bench/replay.py)

P = "pkg/mod.py"


def guard(line: int, end: int, text: str = 'vllm_version_is("0.13.0")', verdict: str = "collapse") -> GuardItem:
    return GuardItem(path=P, line=line, end_line=end, guard=text, verdict=verdict)


def entry(line: int, end: int, text: str = "vllm_version_is('0.13.0')", verdict: str = "collapse") -> dict:
    return {"path": P, "line": line, "end_line": end, "guard": text, "verdict": verdict}


def test_versions_ignore_quotes_and_v():
    assert guard_versions('vllm_version_is("v0.13.0")') == guard_versions("vllm_version_is('0.13.0')") == {"0.13.0"}


def test_exact_line_wins_and_entries_are_not_shared():
    guards = (guard(10, 12), guard(11, 11))  # an if and a ternary one line below it
    dead = [entry(11, 11, verdict="retarget"), entry(10, 12)]
    got = match_guards(guards, dead)
    assert got[0]["line"] == 10 and got[1]["line"] == 11


def test_neighbours_entry_is_not_credited():
    guards = (guard(10, 10), guard(11, 11))
    got = match_guards(guards, [entry(11, 11)])  # porter listed only the second guard
    assert 0 not in got and got[1]["line"] == 11


def test_enclosing_guard_with_other_versions_is_not_credited():
    guards = (guard(20, 20, 'vllm_version_is("0.14.0")'),)
    got = match_guards(guards, [entry(15, 30)])  # an outer 0.13.0 guard around it
    assert got == {}


def test_a_statement_reported_at_its_first_line_still_counts():
    guards = (guard(21, 21),)  # the call sits on the second line of a multi-line assignment
    got = match_guards(guards, [entry(20, 23)])
    assert got[0]["line"] == 20


def test_other_path_never_matches():
    guards = (guard(10, 10),)
    assert match_guards(guards, [{**entry(10, 10), "path": "pkg/other.py"}]) == {}


def test_an_entry_on_the_guards_line_naming_other_versions_is_not_its_verdict():
    # two guards on one line (`x = A if vllm_version_is("0.13.0") else B` inside `if vllm_version_is("0.12.0")`):
    # porter listed only the 0.12.0 one; the 0.13.0 guard is not credited with its verdict
    guards = (guard(30, 30), guard(30, 30, 'vllm_version_is("0.12.0")', verdict="retarget"))
    got = match_guards(guards, [entry(30, 30, "vllm_version_is('0.12.0')", verdict="retarget")])
    assert 0 not in got and got[1]["verdict"] == "retarget"
