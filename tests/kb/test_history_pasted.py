"""A fix whose pull-request description pastes the traceback it fixes: the same failing function with
the same source line is found there, even when the fix changed another file and the error's own message
(`KeyError: 132`) is too short to quote."""

from __future__ import annotations

import textwrap

from porter.kb.history import mine
from porter.kb.history.candidates import anchored, rank
from porter.kb.history.frames import PathMapper, trace_facts
from porter.kb.history.lookup import HistorySource, analyse
from porter.kb.history.models import CommitRecord, FileChange

from .test_history import History

ATTENTION = textwrap.dedent(
    """\
    def full_graph_fia(graph_params, num_tokens, event):
        graph_params.events[num_tokens].append(event)


    def other_fia(graph_params, num_tokens, event):
        graph_params.handles[num_tokens].append(event)
    """
)
TRACE = textwrap.dedent(
    """\
    Traceback (most recent call last):
      File "/usr/local/lib/python3.11/site-packages/plug/attention.py", line 2, in full_graph_fia
        graph_params.events[num_tokens].append(event)
        ~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^
    KeyError: 132
    """
)
# the description's sections that the index keeps end at `### Does this PR introduce`; the trace is pasted below them
FIX_MESSAGE = textwrap.dedent(
    """\
    [BugFix] Repair the drafter in FULL mode (#71)

    The merged draft graph is broken now; this PR solves it.

    ### Does this PR introduce _any_ user-facing change?
    N/A

    ### How was this patch tested?
    Before it:
    ```
    (EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1]   File "/vllm-workspace/plug/plug/attention.py", line 2, in full_graph_fia
    (EngineCore_DP0 pid=9) ERROR 01-01 00:00:00 [core.py:1]     graph_params.events[num_tokens].append(event)
    ```
    """
)
# the same function's name, another line pasted: another failure of that code, not this one
OTHER_MESSAGE = textwrap.dedent(
    """\
    [BugFix] Repair graph handles (#72)

    ### How was this patch tested?
      File "/x/plug/attention.py", line 6, in full_graph_fia
        graph_params.handles[num_tokens].append(event)
    """
)


def test_pasted_frames_reads_the_whole_message_past_the_kept_sections():
    pasted = mine.pasted_frames(FIX_MESSAGE)
    key = mine.line_key("graph_params.events[num_tokens].append(event)")
    assert pasted == f" full_graph_fia:{key} "
    assert "full_graph_fia" not in mine.trim_body(FIX_MESSAGE.partition("\n")[2])  # the body alone would miss it
    # caret lines and frames without a source line are no source; a message without frames pastes nothing
    assert mine.pasted_frames('File "/a/b.py", line 3, in f\n    ^^^^^^^^^^\n') == ""
    assert mine.pasted_frames("[BugFix] fix KeyError: 132") == ""
    record = next(mine.parse_log(f"\x00Cabc\x1f1\x1f{FIX_MESSAGE}\x1e"))
    assert record.pastes("full_graph_fia", key) and not record.pastes("other_fia", key)
    assert CommitRecord.from_dict(record.to_dict()).pasted == record.pasted  # kept in the index


def _history(tmp_path):
    h = History(tmp_path / "plug-repo")
    h.commit("[Core] attention (#1)", {"plug/__init__.py": "", "plug/attention.py": ATTENTION})
    h.tag("v0.1.0")
    other = h.commit(OTHER_MESSAGE, {"plug/graph.py": "def handles():\n    return []\n"})
    fix = h.commit(FIX_MESSAGE, {"plug/drafter.py": "def propose(n):\n    return n + 1\n"})  # another file than the frame's
    return h.root, fix, other


def test_the_fix_that_pastes_the_failing_frame_is_the_candidate(tmp_path):
    repo, fix, other = _history(tmp_path)
    cache = tmp_path / "cache"
    mine.build_index(repo, cache)
    rep = analyse(HistorySource("plug", repo), [TRACE.splitlines()], TRACE, {}, cache)
    assert rep.index_used and [c.sha for c in rep.candidates] == [fix]
    top = rep.candidates[0]
    assert any(e.startswith("message pastes the failing frame full_graph_fia()") for e in top.evidence)
    assert anchored(top.evidence)  # it ties the commit to this very trace: it passes the environment gate too
    # the quote-mask ablation leaves pasted frames out (they quote the trace): nothing else ties the fix to it
    masked = analyse(HistorySource("plug", repo), [TRACE.splitlines()], TRACE, {}, cache, mask_quotes=True)
    assert fix not in {c.sha for c in masked.candidates}


def test_a_pasted_frame_counts_only_for_the_innermost_plugin_frames_with_their_line():
    key = mine.line_key("graph_params.events[num_tokens].append(event)")
    commit = CommitRecord("f" * 40, 1, "[Misc] notes (#3)", 3, False, (), (FileChange("plug/notes.py", "", (), ""),),
                          "", f" full_graph_fia:{key} ")
    mapper = PathMapper({"plug/attention.py", "plug/notes.py"})
    facts = trace_facts([TRACE.splitlines()], mapper)
    found, _ = rank([commit], facts, {}, None, {})
    assert [c.sha for c in found] == [commit.sha]  # pasted frame (4.0) alone passes the threshold
    wrong_line = CommitRecord("e" * 40, 1, "[Misc] notes (#4)", 4, False, (), (), "",
                              f" full_graph_fia:{mine.line_key('graph_params.handles[num_tokens].append(event)')} ")
    assert rank([wrong_line], facts, {}, None, {})[0] == []
    assert rank([commit], facts, {}, None, {}, use_message=False)[0] == []  # message evidence: off without messages
