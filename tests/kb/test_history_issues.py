"""`porter diagnose --history REPO --issue N`: the issue a report came from, when the user names it. A
commit whose full message says it fixes that issue (the reference often stands below the PR template,
past what the index keeps of a message) is the maintainers' answer and ranks first, whatever the
trace's words share with it; another number, another repository's issue or a mere mention does not.
A small git history is built here."""

from __future__ import annotations

from porter.kb.history import mine
from porter.kb.history.candidates import rank
from porter.kb.history.issues import fixing_commits, message_fixes, repo_names
from porter.kb.history.lookup import HistorySource, analyse
from porter.kb.history.models import CommitRecord, FileChange, TraceFacts

from .test_history import BUGGY, FIXED, History

TEMPLATE = "### What this PR does / why we need it?\n\n" + "Some words about the change.\n" * 80


def test_the_forms_a_fix_names_its_issue_with():
    for body in ("Fixes #1420", "close #1420.", "Fix https://github.com/volcengine/verl/issues/1420",
                 "- **Issue Number**: fix https://github.com/volcengine/verl/issues/1420", "Resolves: #1420", "fixes issue #1420"):
        assert message_fixes(body, 1420, ("verl",)), body
    for body in ("Fixes #14201", "Related to #1420", "Fix https://github.com/vllm-project/vllm/issues/1420",
                 "Fix https://github.com/volcengine/verl/pull/1420", "prefix#1420"):
        assert not message_fixes(body, 1420, ("verl",)), body
    assert message_fixes("fix #1534, sglang_async missing offload_param config", 1534)
    assert repo_names("vllm-ascend", "https://github.com/vllm-project/vllm-ascend.git") == ("vllm-ascend",)


def test_git_finds_the_commit_whose_full_message_fixes_the_issue(tmp_path):
    h = History(tmp_path / "plug")
    h.commit("[Core] initial worker", {"plug/__init__.py": "", "plug/worker.py": BUGGY})
    mention = h.commit("[Doc] note the block_size default\n\nRelated to #7\n", {"README": "x"})
    fix = h.commit(f"[Core] read block_size with a default (#9)\n\n{TEMPLATE}\nCloses: https://github.com/o/plug/issues/7\n",
                   {"plug/worker.py": FIXED})
    other = h.commit("[BugFix] fix #70 in the worker\n", {"plug/worker.py": FIXED + "\n"})
    assert fixing_commits(h.root, 7, ("plug",)) == {fix}
    assert fixing_commits(h.root, 70, ("plug",)) == {other}
    assert mention not in fixing_commits(h.root, 7)
    # the index keeps the head of a message only: the reference is past it, so git reads the whole message
    index = mine.build_index(h.root, tmp_path / "cache", "HEAD")[0]
    assert "issues/7" not in next(c for c in index.commits if c.sha == fix).body
    trace = "Traceback (most recent call last):\nRuntimeError: the worker failed at start\n"
    src = HistorySource("plug", h.root, packages=("plug",))
    given = analyse(src, [trace.splitlines()], trace, {}, tmp_path / "cache", index=index, issue=7)
    assert [c.sha for c in given.candidates][:1] == [fix]
    assert any("fixes issue #7" in e for e in given.candidates[0].evidence)
    assert fix not in [c.sha for c in analyse(src, [trace.splitlines()], trace, {}, tmp_path / "cache", index=index).candidates]


def test_an_issue_fix_outranks_a_quote_and_is_anchored_behind_the_environment_gate():
    facts = TraceFacts((), "RuntimeError", "NCCL watchdog caught collective operation timeout in _build_rollout")
    named = CommitRecord("a" * 40, 100, "[sglang] Add a barrier before broadcast_pyobj", None, False, (),
                         (FileChange("plug/a.py", "plug/a.py", (), " "),), "close #1420\n")
    quoting = CommitRecord("b" * 40, 200, "[rollout] fix: NCCL timeout in _build_rollout", None, True, (),
                           (FileChange("plug/b.py", "plug/b.py", (), " "),),
                           "RuntimeError: NCCL watchdog caught collective operation timeout in _build_rollout\n")
    assert [c.sha[0] for c in rank([quoting, named], facts, {}, None, {})[0]] == ["b"]
    assert [c.sha[0] for c in rank([quoting, named], facts, {}, None, {}, issue=(1420, frozenset({named.sha})))[0]] == ["a", "b"]
    env = TraceFacts((), "RuntimeError", "HCCL init failed")
    assert [c.sha[0] for c in rank([named], env, {}, None, {}, strict=True, issue=(1420, frozenset({named.sha})))[0]] == ["a"]
    assert rank([named], env, {}, None, {}, strict=True)[0] == []


def test_diagnose_refuses_an_issue_without_a_history(tmp_path):
    from typer.testing import CliRunner

    from porter.cli import app

    trace = tmp_path / "t.log"
    trace.write_text("RuntimeError: boom\n")
    res = CliRunner().invoke(app, ["diagnose", str(trace), "--issue", "12"])
    assert res.exit_code == 2
    assert "--issue needs --history" in res.output
