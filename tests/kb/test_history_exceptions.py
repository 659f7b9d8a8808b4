"""The trace's exception as a report writes it: Python's bare `Exception: ...` (raised as
`raise Exception("...")`), and an error line the report's prose wraps, which goes on past the line
the extractor kept (and ends at the quote that opened it)."""

from __future__ import annotations

from porter.kb.history.candidates import rank
from porter.kb.history.frames import segments
from porter.kb.history.lookup import embedded_exception, fallback_exception, named_exception
from porter.kb.history.models import CommitRecord, FileChange, TraceFacts


def test_a_bare_exception_is_the_reports_exception():
    line = "Exception: Could not find the transformer layer class to wrap in the model."
    assert embedded_exception(line) == ("Exception", "Could not find the transformer layer class to wrap in the model.")
    assert fallback_exception(None, line, line) == ("Exception", "Could not find the transformer layer class to wrap in the model.")
    assert named_exception('it raised Exception("no layer class") at start') == ("Exception", "no layer class")
    # a word that only contains it is no class: `MyException` still reads as one, `Exceptional` does not
    assert embedded_exception("Exceptional: nothing here") is None
    assert embedded_exception("MyException: bad thing") == ("MyException", "bad thing")


def test_a_bare_exception_ends_a_traceback_segment():
    seg = segments(['Traceback (most recent call last):', '  File "/x/plug/utils.py", line 3, in wrap',
                    '    raise Exception("no layer")', "Exception: no layer"])[-1]
    assert (seg.exception_type, seg.exception_message) == ("Exception", "no layer")


def test_an_error_line_cut_where_the_prose_wraps_is_read_whole_up_to_its_closing_quote():
    text = ('Without this PR, it will raise error "ValueError: Attention backend\n'
            'reorders decodes with threshold 15 but other backend uses threshold 8"\n'
            "when you try to launch the server.\n")
    cut = 'Without this PR, it will raise error "ValueError: Attention backend'  # the extractor's error line
    assert fallback_exception(None, cut, text) == (
        "ValueError", "Attention backend reorders decodes with threshold 15 but other backend uses threshold 8")
    # without the quote the message runs to the line's end, as before
    assert embedded_exception("it failed with ValueError: bad shape here") == ("ValueError", "bad shape here")


def test_the_whole_message_finds_the_commit_that_quotes_it_and_the_cut_one_does_not():
    quote = "ValueError: Attention backend reorders decodes with threshold 15 but other backend uses threshold 8"
    fix = CommitRecord("f" * 40, 200, "[Feature] Support the new drafter and sync the reorder threshold", None, False, (quote,),
                       (FileChange("plug/runner.py", "plug/runner.py", (), " "),), f"It raised {quote}.\n")
    other = CommitRecord("a" * 40, 100, "[Bugfix] fix pipeline parallel for the mla attention backend", None, True,
                         ("AttributeError: 'PPMissingLayer' object has no attribute 'self_attn'",),
                         (FileChange("plug/mla.py", "plug/mla.py", (), " "),), "Fix the mla attention backend.\n")
    whole = TraceFacts((), "ValueError", quote.split(": ", 1)[1])
    cands, _ = rank([fix, other], whole, {}, None, {})
    assert [c.sha[0] for c in cands] == ["f"]
    cut = TraceFacts((), "ValueError", "Attention backend")
    assert "f" not in [c.sha[0] for c in rank([fix, other], cut, {}, None, {})[0]][:1]


def test_a_traceback_the_extractor_cut_in_two_is_read_as_one_whose_innermost_frames_are_the_remote_task():
    from porter.kb.history.frames import PathMapper, trace_facts

    driver = ['Traceback (most recent call last):',
              '  File "/site/plug/trainer/main.py", line 64, in main', '    run(config)',
              '  File "/site/plug/trainer/loop.py", line 872, in fit', '    val = self._validate()']
    remote = ['  File "/site/plug/rollout/engine.py", line 529, in _rollout_one', '    out = await self._engine.generate(',
              "ValueError: Requested token count exceeds the model's maximum context length"]
    mapper = PathMapper({"plug/trainer/main.py", "plug/trainer/loop.py", "plug/rollout/engine.py"})
    facts = trace_facts([driver, remote], mapper)
    assert [f.function for f in facts.frames] == ["_rollout_one", "fit", "main"]
    assert facts.exception_type == "ValueError"
    # a second traceback of its own (with its header) is another traceback: the first, complete one stays causal
    other = ['Traceback (most recent call last):', *remote]
    first = [*driver, "RuntimeError: driver failed"]
    assert [f.function for f in trace_facts([first, other], mapper).frames] == ["fit", "main"]
