"""The installed version's release line: a fix on `releases/vX` after the installed tag is what the
user's next patch release ships, so it gains a little over the same evidence on main."""

from __future__ import annotations

from porter.kb.history.candidates import RELEASE_LINE_POINTS, THRESHOLD, rank
from porter.kb.history.models import CommitRecord, FileChange, TraceFacts
from porter.kb.history.release_line import line_branch, release_line_commits

BRANCHES = ["main", "releases/v0.13.0", "releases/v0.23.0", "releases/v0.22.1rc", "v0.9.1-dev", "release/3.2.x",
            "songlin/v0.23.0-lora", "dependabot/pip/x-1.2"]


def test_line_branch_matches_the_tags_version():
    assert line_branch("v0.23.0rc1", BRANCHES) == "releases/v0.23.0"
    assert line_branch("v0.22.1rc2", BRANCHES) == "releases/v0.22.1rc"
    assert line_branch("v0.9.1", BRANCHES) == "v0.9.1-dev"
    assert line_branch("v3.2.4", BRANCHES) == "release/3.2.x"
    assert line_branch("v0.24.0rc1", BRANCHES) is None  # no release branch of that version yet
    assert line_branch("nightly", BRANCHES) is None


def _history(tmp_path):
    from .test_history import History

    h = History(tmp_path / "plug-repo")
    h.commit("[Core] worker (#1)", {"plug/__init__.py": "", "plug/worker.py": "def step(x):\n    return x\n"})
    h.tag("v0.2.0rc1")
    h.git("branch", "releases/v0.2.0")
    on_main = h.commit("[Feature] speed up step (#2)", {"plug/worker.py": "def step(x):\n    return x * 1\n"})
    h.git("checkout", "-q", "releases/v0.2.0")
    on_line = h.commit("[v0.2.0][BugFix] step (#3)", {"plug/worker.py": "def step(x):\n    return int(x)\n"})
    h.git("checkout", "-q", "main")
    return h.root, on_main, on_line


def test_release_line_commits_are_those_after_the_tag_on_its_branch(tmp_path):
    repo, on_main, on_line = _history(tmp_path)
    branch, shas = release_line_commits(repo, "v0.2.0rc1")
    assert branch == "releases/v0.2.0" and shas == frozenset({on_line})
    assert release_line_commits(repo, "v0.5.0") == (None, frozenset())


def test_a_commit_on_the_line_gains_only_with_evidence():
    facts = TraceFacts((), "", "")
    change = (FileChange("plug/worker.py", "plug/worker.py", ("step",), ""),)
    fix = CommitRecord("a" * 40, 2, "[BugFix] Fix the step of the async worker snapshot (#3)", 3, True, (), change)
    other = CommitRecord("b" * 40, 1, "[Misc] notes (#4)", 4, False, (), ())
    report = "[Bug]: async worker snapshot step is stale"
    plain, _ = rank([fix, other], facts, {}, None, {}, report=report)
    lined, _ = rank([fix, other], facts, {}, None, {}, report=report,
                    line=("releases/v0.2.0", frozenset({fix.sha, other.sha})))
    assert [c.sha for c in lined] == [fix.sha]  # the commit without evidence stays out
    if plain:  # the same evidence, plus the line's points
        assert abs(lined[0].score - plain[0].score - RELEASE_LINE_POINTS) < 1e-9
    else:  # the line's points lifted it over the threshold
        assert lined[0].score < THRESHOLD + RELEASE_LINE_POINTS
    assert "on your release line (releases/v0.2.0)" in lined[0].evidence
