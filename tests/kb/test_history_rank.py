"""Ranking rules of the history search that reports without a full traceback need: a code line the
report quotes, an exception it names or prints by repr, code names of its error lines, words of a
fix's description; and what rules out formatter commits and work a guessed version already holds."""

from __future__ import annotations

import textwrap

from porter.kb.history import mine
from porter.kb.history.candidates import distinctive_names, is_mechanical, quoted_code_lines, rank
from porter.kb.history.lookup import HistorySource, analyse, fallback_exception, named_exception
from porter.kb.history.models import CommitRecord, FileChange, Frame, TraceFacts

from .test_history import History

BUGGY = textwrap.dedent(
    """\
    def apply_mask(order, mask):
        out = [0] * len(order)
        for i, j in order:
            out[i] = mask[j]
        return out
    """
)
FORMATTED = BUGGY.replace("out[i] = mask[j]", "out[i]  =  mask[j]")  # what a formatter does: same code
FIXED = BUGGY.replace("out[i] = mask[j]", "out[i] = mask[j] if j < len(mask) else 0")
REPORT = "IndexError from `out[i] = mask[j]` when a request has no mask\n"


def _commit(sha: str, subject: str, body: str = "", errors: tuple[str, ...] = (), path: str = "plug/a.py",
            functions: tuple[str, ...] = (), removed: str = " ", is_fix: bool | None = None) -> CommitRecord:
    fix = mine.is_fix(subject) if is_fix is None else is_fix
    return CommitRecord(sha * 40, 100, subject, 12, fix, errors, (FileChange(path, path, functions, removed),), body)


def test_a_fix_that_rewrites_the_line_a_report_quotes_ranks_first_and_a_formatter_pass_is_none(tmp_path):
    h = History(tmp_path / "repo")
    h.commit("[Core] structured output masks", {"plug/__init__.py": "", "plug/masks.py": BUGGY})
    h.tag("v0.1.0")
    fmt = h.commit("[Lint] ruff format plug/ (#3)", {"plug/masks.py": FORMATTED})
    fix = h.commit("[BugFix] IndexError in apply_mask for requests without a mask (#4)", {"plug/masks.py": FIXED})
    index, _, _ = mine.build_index(h.root, tmp_path / "cache")
    facts_free = analyse(HistorySource("plug", h.root), [], REPORT, {}, tmp_path / "cache", index=index,
                         fallback_exception=fallback_exception(None, "", REPORT), quoted=quoted_code_lines(REPORT))
    shas = [c.sha for c in facts_free.candidates]
    assert shas[:1] == [fix]
    assert fmt not in shas  # it rewrote the line too, but only its spacing
    assert any(e.startswith("rewrites the failing line the report quotes `out[i] = mask[j]`")
               for e in facts_free.candidates[0].evidence)


def test_quoted_code_lines_are_statements_not_names():
    text = "crash in `WeightTransferEngineFactory.create_engine`, from `sorted_mask[b] = grammar_mask[o]` and `self.run(x)`"
    assert quoted_code_lines(text) == ("sorted_mask[b] = grammar_mask[o]", "self.run(x)")
    assert is_mechanical("[Lint]Style: Convert `vllm-ascend/` to ruff format(Batch #10) (#6173)")
    assert is_mechanical("[Misc][Lint] yapf (#3)") and is_mechanical("[Style] unify quotes (#4)")
    # a fix of a format or of a typo can change what the code does
    assert not is_mechanical("[BugFix] fix the output format of the usage chunk (#2)")
    assert not is_mechanical("[Bugfix] Fix typo in attribute name causing AttributeError (#5)")


def test_an_exception_named_in_prose_or_printed_by_repr_is_the_trace_exception():
    assert named_exception("IndexError from `x[i] = y[j]`") == ("IndexError", "")
    assert named_exception("ValueError('Did you forget to add @triton.jit ?')") == (
        "ValueError", "Did you forget to add @triton.jit ?")
    assert named_exception("KeyError: 'x'") is None  # a `Type: message` line is embedded_exception's
    assert named_exception("the server hangs") is None


def test_mined_messages_join_an_error_type_wrapped_before_its_message():
    message = ("- **Engine init**: `WeightTransferEngineFactory.create_engine` passes, raising `TypeError:\n"
               "__init__() takes 3 positional arguments but 4 were given` during engine\nconstruction.")
    found = mine.error_strings(message)
    assert "TypeError: __init__() takes 3 positional arguments but 4 were given" in found
    assert "WeightTransferEngineFactory.create_engine" in found


def test_the_error_lines_name_the_code_when_the_message_names_none():
    assert distinctive_names("__init__() takes 3 positional arguments but 4 were given") == []
    fix = _commit("a", "[BugFix] Fix engine init (#7)", body="WeightTransferEngineFactory.create_engine passes a model",
                  errors=("TypeError: __init__() takes 3 positional arguments but 4 were given",))
    other = _commit("b", "[Main2Main] upgrade (#8)", errors=("TypeError: Spec.__init__() takes 3 positional arguments but 4 were given",))
    facts = TraceFacts((), "TypeError", "__init__() takes 3 positional arguments but 4 were given")
    errors = "`WeightTransferEngineFactory.create_engine` passes, raising TypeError\ndevice_id=0, stream_id=3"
    ranked = rank([other, fix], facts, {}, None, {}, error_text=errors)[0]
    assert [c.sha for c in ranked][:1] == [fix.sha]
    assert any("WeightTransferEngineFactory" in e for e in ranked[0].evidence)
    # a log record's fields (`device_id=0`) and the exception's own class are no code names of it
    assert not any("device_id" in e or "`TypeError`" in e for c in ranked for e in c.evidence)


def test_work_a_guessed_version_holds_is_no_candidate_unless_it_is_a_fix():
    frame = Frame("/site/plug/rope.py", "plug/rope.py", 3, "rope_forward", "assert positions.shape[0] == n", 0)
    line = f" {mine.line_key(frame.source)} "  # both rewrote the failing line
    built = _commit("c", "[Perf] optimize rope_forward with a triton kernel (#1)", path="plug/rope.py",
                    functions=("rope_forward",), removed=line)
    fixed = _commit("d", "[BugFix] guard rope_forward positions (#2)", path="plug/rope.py", functions=("rope_forward",),
                    removed=line)
    facts = TraceFacts((frame,), "AssertionError", "")
    contained = {built.sha, fixed.sha}
    ranked = [c.sha for c in rank([fixed, built], facts, {}, contained, {}, guessed=True)[0]]
    # work before the tag whose code the trace shows most likely built that code: it ranks after
    # the fix inside, which may still be the one (a build between tags)
    assert ranked[:1] == [fixed.sha]
    scores = {c.sha: c.score for c in rank([fixed, built], facts, {}, contained, {}, guessed=True, top=5)[0]}
    assert built.sha not in scores or scores[built.sha] < scores[fixed.sha] - 1.0
    # the same commits with a version the user gave: both already in it, neither a candidate
    assert rank([fixed, built], facts, {}, contained, {})[0] == []


def test_report_words_in_a_fix_description_add_to_its_title_coverage():
    noise = [_commit(str(n % 10), f"[Misc] tidy module {n} (#{n})") for n in range(20)]
    fix = _commit("f", "[BugFix] Fix static_forward_context cleanup and MTP draft loading (#11)",
                  body="When elastic loading over D2D fails, the netloader fallback ... efficiency of weight loading")
    title_only = _commit("g", "[BugFix] Fix static_forward_context cleanup and MTP draft loading (#12)")
    report = "Missing static_forward_context cleanup on D2D netloader fallback & low MTP weight-loading efficiency"
    ranked = rank([fix, title_only, *noise], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report)[0]
    assert [c.sha for c in ranked][:2] == [fix.sha, title_only.sha]  # on a tie the older (title_only) would lead
    assert ranked[0].score > ranked[1].score


def test_a_snake_case_name_matches_its_camel_case_spelling_and_other_names_match_as_written():
    from porter.kb.history.candidates import name_form, names_in

    text = "[Bugfix] Reset all unused positions to prevent out-of-bounds in GatherV3"
    assert names_in("gather_v3", text, name_form(text))
    # no inner underscore: as written only (`_builder` is the word builder, `blockIdx` another variable)
    assert not names_in("_builder", "use the builder here", name_form("use the builder here"))
    assert not names_in("blockIdx", "fix block_idx overflow", name_form("fix block_idx overflow"))
    fix = _commit("h", "[Bugfix] Reset unused positions to prevent out-of-bounds in GatherV3 (#9)")
    noise = [_commit(str(n % 10), f"[Misc] tidy module {n} (#{n})") for n in range(20)]
    errors = "[W618 12:04:37] Warning: EZ9999: Inner Error! due to gather_v3 error"
    ranked = rank([fix, *noise], TraceFacts((), "", ""), {}, None, {}, error_text=errors)[0]
    assert [c.sha for c in ranked] == [fix.sha] and "message names `gather_v3`" in ranked[0].evidence


def test_command_line_flags_are_names_and_a_log_records_source_lines_are_not():
    from porter.kb.history.candidates import where_free

    assert distinctive_names("--enable-prompt-tokens-details with --port 7000") == ["--enable-prompt-tokens-details"]
    log = "E0106 06:43:02 5793 ascend_direct_transport.cpp:820] Failed to connect [W106 compiler_depend.ts:117] Warning"
    assert "ascend_direct_transport" not in where_free(log) and "compiler_depend" not in where_free(log)
    fix = _commit("i", "[BugFix] Include zero cached prompt token details (#9)",
                  body="Treat num_cached_tokens=0 as valid when `--enable-prompt-tokens-details` is enabled")
    transport = _commit("j", "[Bugfix] Fix kv_port conflict with AscendDirectTransport (#8)")
    noise = [_commit(str(n % 10), f"[Misc] tidy module {n} (#{n})") for n in range(20)]
    report = "Does the model support enabling --enable-prompt-tokens-details?"
    ranked = rank([fix, transport, *noise], TraceFacts((), "", ""), {}, None, {}, error_text=report + "\n" + log)[0]
    assert [c.sha for c in ranked] == [fix.sha]  # the log's `ascend_direct_transport.cpp` names no code


def test_an_exception_written_with_a_comma_before_its_quoted_message_is_read_and_quoted(tmp_path):
    from porter.kb.history.lookup import embedded_exception

    report = ("1. Resolve the issue of qwen2.5-VL quantization service startup failure:\n"
              "AttributeError, 'Parameter' object has no attribute 'weight_loader'.\n")
    assert embedded_exception(report) == ("AttributeError", "'Parameter' object has no attribute 'weight_loader'.")
    assert embedded_exception("a RuntimeError, which the caller catches") is None  # a clause, not a message
    assert "AttributeError, 'Parameter' object has no attribute 'weight_loader'." in mine.error_strings(report)
    h = History(tmp_path / "plug-repo")
    h.commit("[Core] quant config", {"plug/__init__.py": "", "plug/quant.py": "def load(p):\n    return p.weight_loader\n"})
    h.tag("v0.1.0")
    other = h.commit("[Feature] add a weight_loader option for MoE (#4)",
                     {"plug/moe.py": "def weight_loader(p):\n    return p\n"})
    fix = h.commit("[BugFix] fix qwen2.5vl quant bug (#5)\n\n" + report,
                   {"plug/quant.py": "def load(p):\n    return getattr(p, 'weight_loader', None)\n"})
    mine.build_index(h.root, tmp_path / "cache", mine.ALL_BRANCHES)  # a report without frames needs the index
    rep = analyse(HistorySource("plug", h.root), [], report, {}, tmp_path / "cache",
                  fallback_exception=embedded_exception(report), error_text=report)
    assert [c.sha for c in rep.candidates][:1] == [fix] and other not in [c.sha for c in rep.candidates][:1]
    assert any(e.startswith("message quotes the error") for e in rep.candidates[0].evidence)
