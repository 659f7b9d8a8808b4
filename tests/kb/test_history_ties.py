"""Ties between candidates that carry the same evidence: a commit whose title says it sidesteps the
failure (a switch to turn the feature off, a temporary workaround) ranks after the repair that quotes
the same error, whichever came first; without that word the first fix after the version stays first."""

from __future__ import annotations

from porter.kb.history.candidates import is_workaround, rank
from porter.kb.history.models import CommitRecord, FileChange, TraceFacts

ERROR = "Failed to compile /tmp/tmpab/launcher.cxx, error: g++: internal compiler error: Bus error signal terminated program cc1plus"


def _commit(sha: str, subject: str, time: int) -> CommitRecord:
    quote = f"RuntimeError: {ERROR}"
    return CommitRecord(sha * 40, time, subject, None, True, (quote,), (FileChange("plug/compile.py", "plug/compile.py", (), " "),),
                        f"Description: concurrent builds fail.\n{quote}\n")


def _order(older_subject: str) -> list[str]:
    newer = _commit("b", "fix(precompile): add file lock when compiling C++", 200)
    older = _commit("a", older_subject, 100)
    facts = TraceFacts((), "RuntimeError", ERROR)
    cands, _ = rank([newer, older], facts, {}, None, {})  # newest first, as the index holds them
    return [c.sha[0] for c in cands]


def test_a_workaround_that_quotes_the_same_error_ranks_after_the_repair():
    assert _order("fix(precompile): precompile add a switch") == ["b", "a"]
    assert _order("[BugFix] Temporarily disable precompile on high concurrency") == ["b", "a"]


def test_without_a_workaround_title_the_first_fix_after_the_version_stays_first():
    assert _order("fix(precompile): retry the compile once") == ["a", "b"]


def test_workaround_words_are_read_from_the_title_only_as_such():
    assert is_workaround("[Bugfix] Add an env variable to bypass the fused op (#12)")
    assert is_workaround("[Misc] workaround for the HCCL hang (#3)")
    assert not is_workaround("[BugFix] Fix switch statement in the dispatcher (#4)")
    assert not is_workaround("[Feature] Add toggles page to docs")


def test_a_title_that_holds_the_reports_phrase_outranks_one_that_shares_its_words_apart():
    from porter.kb.history.candidates import shared_phrase, title_sequence

    report = "[Bug]: Low MTP acceptance rate for GLM-5.2 in FullGraph mode (MRV1)"
    assert shared_phrase(title_sequence(report), title_sequence("[BugFix] Fix low MTP acceptance rate for SFA (#14)")) \
        == ("low", "mtp", "acceptance", "rate")
    in_order = CommitRecord("c" * 40, 100, "[BugFix] Fix low MTP acceptance rate for SFA (#14)", 14, True, (), (), "")
    scattered = CommitRecord("d" * 40, 100, "[BugFix] Fix rate limit for MTP when acceptance is low (#15)", 15, True, (), (), "")
    # unrelated history, so that the report's words have document frequencies to weigh them by
    others = [CommitRecord(f"{i:040x}", 10, f"[Feature] Support model family {i} on the worker (#{i})", i, False, (), (), "")
              for i in range(20)]
    cands, _ = rank([in_order, scattered, *others], TraceFacts((), "", ""), {}, None, {}, report=report)
    # both share the same four words; only the one that writes them as the report's phrase is proposed
    assert [c.sha[0] for c in cands] == ["c"]
    assert any("phrase `low mtp acceptance rate`" in e for e in cands[0].evidence)


def test_the_messages_longest_words_do_not_depend_on_the_hash_seed():
    """Equal-length words are kept in alphabetical order: sorted from a set by length alone, which three were kept
    (the pre-test for a fuzzy quote of the message) changed from one interpreter run to the next."""
    import os
    import subprocess
    import sys

    from porter.kb.history.candidates import _keys

    message = "ascend config is not initialized. please call init_ascend_config first"
    # the three longest and every word as long as the third: a tie at the cut is kept whole
    assert _keys(message) == ("init_ascend_config", "initialized", "ascend", "config", "please")
    code = f"from porter.kb.history.candidates import _keys; print(_keys({message!r}))"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3, 4, 5)}
    assert len(seen) == 1
