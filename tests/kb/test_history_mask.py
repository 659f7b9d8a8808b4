"""The benchmark's quote mask (`--mask-quotes`) leaves out every part of a commit's message that quotes
the trace: the message lines, and also the error strings mined from the message, the title and the
description words that score a restated report. A fix found under the mask is found by evidence a
trace that no commit quotes would meet too."""

from __future__ import annotations

from porter.kb.history.candidates import QuoteMask, rank
from porter.kb.history.models import CommitRecord, TraceFacts

ERROR = "RuntimeError: npu_fused_infer_attention_score: block_table shape mismatch for kv_cache_layout"
TRACE = f"Traceback (most recent call last):\n  File \"run.py\", line 3, in <module>\n    main()\n{ERROR}\n"
BODY = "The kernel npu_fused_infer_attention_score read a stale block_table for this kv_cache_layout."
FACTS = TraceFacts((), "RuntimeError", ERROR.split(": ", 1)[1])


def _others() -> list[CommitRecord]:
    return [CommitRecord(f"{i}" * 40, 10 + i, f"[Feature] support a new {w} option", None, False, (), (), "")
            for i, w in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer", "sampler"), 1)]


def test_an_error_string_that_quotes_the_trace_is_masked():
    # the fix's pasted trace sits below the sections its trimmed body keeps: only its mined error string holds it
    fix = CommitRecord("a" * 40, 100, "[BugFix] Fix attention metadata (#12)", 12, True, (ERROR,), (), BODY)
    plain = rank([fix, *_others()], FACTS, {}, None, {}, error_text=ERROR)[0]
    assert [c.sha for c in plain] == [fix.sha]
    assert any(e.startswith("message quotes the error") for e in plain[0].evidence)
    masked = rank([fix, *_others()], FACTS, {}, None, {}, error_text=ERROR, mask=QuoteMask.of(TRACE))[0]
    assert not any(e.startswith("message quotes the error") for c in masked for e in c.evidence)
    # what is left is the description's prose, which a trace that no commit quotes meets too
    assert all(e.startswith(("message names", "bug-fix title", "its title names")) for c in masked for e in c.evidence)


def test_an_error_string_that_quotes_another_error_stays_under_the_mask():
    other = "RuntimeError: npu_fused_infer_attention_score: block_table shape mismatch for kv_cache_layout NZ"
    fix = CommitRecord("a" * 40, 100, "[BugFix] Fix attention metadata (#12)", 12, True, (other,), (), BODY)
    masked = rank([fix, *_others()], FACTS, {}, None, {}, error_text=ERROR, mask=QuoteMask.of(TRACE))[0]
    # the trace's own line is inside that string: it quotes the trace and is masked too
    assert not any(e.startswith("message quotes") for c in masked for e in c.evidence)
    same_form = "RuntimeError: npu_fused_infer_attention_score: block_table rank mismatch for kv_cache_layout"
    fix2 = CommitRecord("b" * 40, 100, "[BugFix] Fix attention metadata (#12)", 12, True, (same_form,), (), BODY)
    kept = rank([fix2, *_others()], FACTS, {}, None, {}, error_text=ERROR, mask=QuoteMask.of(TRACE))[0]
    assert [c.sha for c in kept] == [fix2.sha]  # a near quote of another error is no quote of this trace
    assert any(e.startswith("message quotes") for e in kept[0].evidence)


def test_a_title_that_quotes_the_report_gets_no_title_credit_under_the_mask():
    report = "Qwen3 MoE model crashes during decode when expert parallel is enabled with aclgraph"
    fix = CommitRecord("a" * 40, 100, report, None, False, (), (), "")
    plain = rank([fix, *_others()], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report)[0]
    assert [c.sha for c in plain] == [fix.sha]
    masked = rank([fix, *_others()], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report,
                  mask=QuoteMask.of(report))[0]
    assert not any("title" in e for c in masked for e in c.evidence)
