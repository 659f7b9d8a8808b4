"""Candidate recall across branches: a fix cherry-picked onto a release line is one answer with its
copies (`also`), a version that holds either copy holds the fix, and unrelated commits that share a
generic title stay apart. Small git histories built here: main with a bug and its fix, a release
branch with the backport, tags on both."""

from __future__ import annotations

from porter.kb.history import mine
from porter.kb.history.candidates import change_key, is_backport, rank
from porter.kb.history.lookup import HistorySource, analyse
from porter.kb.history.models import CommitRecord, FileChange, TraceFacts

from .test_history import BUGGY, FIXED, TRACE, History, _blocks

FIX_TITLE = "[BugFix] Fix KeyError when block_size is not configured"
FIX_BODY = "\n\nLoading a config without block_size raised `KeyError: 'block_size'` in load().\n"


def _history_with_backport(tmp_path):
    """main: v0.1.0 (bug), the fix (#7), v0.2.0; releases/v0.1: the fix's cherry-pick (#8), v0.1.1."""
    h = History(tmp_path / "plug-repo")
    h.commit("[Core] initial worker", {"plug/__init__.py": "", "plug/worker.py": BUGGY})
    h.tag("v0.1.0")
    h.commit("[Feature] add a helper (#5)", {"plug/helper.py": "def helper():\n    return 2\n"})
    fix = h.commit(f"{FIX_TITLE} (#7)" + FIX_BODY, {"plug/worker.py": FIXED})
    h.tag("v0.2.0")
    h.git("checkout", "-q", "-b", "releases/v0.1", "v0.1.0")
    backport = h.commit(f"[v0.1.0][BugFix] Fix KeyError when block_size is not configured (#8)" + FIX_BODY,
                        {"plug/worker.py": FIXED})
    h.tag("v0.1.1")
    h.git("checkout", "-q", "main")
    return h, fix, backport


def test_release_tags_and_cherry_pick_markers_make_a_backport_and_the_title_key_drops_them():
    def commit(subject: str, body: str = "") -> CommitRecord:
        return CommitRecord("a" * 40, 1, subject, None, True, (), (), body)

    assert is_backport(commit("[BugFix][v0.20.2rc] Fix DSA compressed idle dummy graph OOB (#9817)"))
    assert is_backport(commit("[0.13.0][Bugfix] Fix Triton operator usage for multimodal models (#6100)"))
    assert is_backport(commit("[Cherry-pick][releases/v0.24.0rc][Refactor] Replace MiniMax parser backports (from #10758)"))
    assert is_backport(commit("[Bugfix] Fix the crash", "(cherry picked from commit " + "b" * 40 + ")"))
    assert not is_backport(commit("[BugFix] Fix DSA compressed idle dummy graph OOB (#9818)"))
    assert not is_backport(commit("[Bugfix] Support Qwen2.5 in v0.9 style configs (#1)"))
    assert change_key("[BugFix][v0.20.2rc] Fix DSA compressed idle dummy graph OOB (#9817)") \
        == change_key("[BugFix] Fix DSA compressed idle dummy graph OOB (#9818)") == "fix dsa compressed idle dummy graph oob"
    assert change_key("[CI] fix ci (#12)") == ""  # too short to tell one change from another


def test_a_fix_and_its_cherry_pick_are_one_candidate_that_names_both(tmp_path):
    h, fix, backport = _history_with_backport(tmp_path)
    cache = tmp_path / "cache"
    mine.build_index(h.root, cache, mine.ALL_BRANCHES)
    rep = analyse(HistorySource("plug", h.root, packages=("plug",)), _blocks(TRACE), TRACE, {"plug": "0.1.0"}, cache)
    assert rep.index_used
    # one candidate; the installed v0.1.0's release line (releases/v0.1) ships the copy in v0.1.1, so that copy
    # leads (release_line.py) and main's change is in `also`
    assert [c.sha for c in rep.candidates] == [backport]
    assert rep.candidates[0].also == ((fix, "v0.2.0"),)
    assert "first in v0.1.1; also " + fix[:12] + " (first in v0.2.0)" in rep.candidates[0].headline
    assert rep.to_dict()["candidates"][0]["also"] == [{"sha": fix, "first_tag": "v0.2.0"}]
    assert "on your release line (releases/v0.1)" in rep.candidates[0].evidence


def test_a_release_line_version_that_holds_the_backport_holds_the_fix(tmp_path):
    h, fix, backport = _history_with_backport(tmp_path)
    cache = tmp_path / "cache"
    mine.build_index(h.root, cache, mine.ALL_BRANCHES)
    src = HistorySource("plug", h.root, packages=("plug",))
    rep = analyse(src, _blocks(TRACE), TRACE, {"plug": "0.1.1"}, cache)
    assert fix not in {c.sha for c in rep.candidates}  # main's copy is not in v0.1.1, yet the fix is
    assert [c.sha for c in rep.contained] == [backport] and rep.contained[0].also == ((fix, "v0.2.0"),)
    assert rep.contained[0].headline.startswith("your version already contains this fix")


def test_commits_that_share_a_title_without_a_release_marker_stay_two_candidates():
    change = (FileChange("plug/worker.py", "plug/worker.py", ("load",), " "),)

    def commit(sha: str, subject: str) -> CommitRecord:
        return CommitRecord(sha * 40, 1, subject, None, True,
                            ("KeyError: 'block_size'",), change, "raised `KeyError: 'block_size'`")

    commits = [commit("b", "[BugFix] Fix KeyError in the worker loader (#20)"),
               commit("a", "[BugFix] Fix KeyError in the worker loader (#10)")]
    facts = TraceFacts((), "KeyError", "'block_size'")
    cands, _ = rank(commits, facts, {}, None, {})
    assert {c.sha for c in cands} == {"a" * 40, "b" * 40} and all(not c.also for c in cands)


def test_the_default_index_holds_release_branches_and_not_feature_branches(tmp_path, cli):
    import json

    h, fix, backport = _history_with_backport(tmp_path)
    h.git("checkout", "-q", "-b", "songlin/try-a-refactor", "main")
    wip = h.commit("[Refactor] Fix KeyError when block_size is not configured, differently", {"plug/worker.py": FIXED + "\n"})
    h.git("checkout", "-q", "main")
    assert mine.is_release_branch("releases/v0.13.0") and mine.is_release_branch("v0.9.1-dev")
    assert mine.is_release_branch("release/3.2.x") and not mine.is_release_branch("revert-4430-gm/fix_mem_leak")
    assert not mine.is_release_branch("songlin/try-a-refactor") and not mine.is_release_branch("main")
    code, out = cli(["kb", "mine-history", str(h.root), "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["ref"] == mine.ALL_BRANCHES
    built, _, was_built = mine.build_index(h.root, tmp_path / "cache", mine.ALL_BRANCHES)  # the CLI's cache
    assert not was_built
    shas = {c.sha for c in built.commits}
    assert {fix, backport} <= shas and wip not in shas and doc["commits"] == len(built.commits)
