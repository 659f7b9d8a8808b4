"""A report's title against a fix's title, where the report writes code and the title English: a
dotted name is its own last name (`tl.constexpr` ~ `constexpr`), and a snake_case name matches two
adjacent words of the title (`core.extern_elementwise` ~ `extern elementwise`). File names and
versions stay whole words."""

from __future__ import annotations

from porter.kb.history.candidates import rank, title_compounds, title_match, title_sequence, title_words
from porter.kb.history.models import CommitRecord, FileChange, TraceFacts


def test_dotted_names_and_compounds():
    assert title_sequence("tl.cast(bitcast=True) errors on dtype passed as tl.constexpr") == (
        "cast", "bitcast", "dtype", "pass", "constexpr")  # `True`: a Python literal, no word of the failure
    assert "workerv1.py" in title_words("crash in worker_v1.py at v0.9.1")
    assert "v0.9.1" in title_words("crash in worker_v1.py at v0.9.1")
    assert "externelementwise" in title_compounds("[FRONTEND] Fix mismatched type for extern elementwise (#7930)")
    report = title_words("Incorrect dtype for non-scalar core.extern_elementwise")
    assert "externelementwise" in report
    shared, matched = title_match(report, "[FRONTEND] Fix mismatched type for extern elementwise (#7930)")
    assert shared == {"externelementwise"} and matched == 2
    assert title_match(report, "[FRONTEND] extern ops for elementwise")[1] == 0  # not adjacent


def test_a_fix_title_that_spells_the_reports_code_name_in_words_restates_it():
    fix = CommitRecord("a" * 40, 100, "[FRONTEND] Fix mismatched type for extern elementwise (#7930)", None, True, (),
                       (FileChange("python/triton/language/core.py", "python/triton/language/core.py", ("extern_elementwise",), " "),),
                       "forces return type of non-scalar `core.extern_elementwise` to be the same as broadcast arguments")
    others = [CommitRecord(f"{i}" * 40, 10 + i, f"[Feature] support a new {w} option", None, False, (), (), "")
              for i, w in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer", "dtype"), 1)]
    report = "Incorrect dtype for non-scalar core.extern_elementwise"
    found = rank([fix, *others], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report)[0]
    assert [c.sha for c in found] == [fix.sha]
    assert any("its title restates the report (externelementwise" in e for e in found[0].evidence)
    # the same words in another order are no spelling of the name: the title says nothing of the report
    swapped = CommitRecord(fix.sha, fix.time, "[FRONTEND] Fix mismatched type for elementwise extern (#7930)", None, True, (),
                           fix.changes, fix.body)
    other = rank([swapped, *others], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report)[0]
    assert not any("restates the report" in e for c in other for e in c.evidence)


def test_a_reports_option_name_holds_the_titles_two_words():
    report = title_words("use_fused_kernels=True causes training quality regression when ulysses_sequence_parallel_size > 1")
    shared, matched = title_match(report, "[model, fsdp] fix: honor SP-rolled labels in fused kernels (#6268)")
    assert shared == {"usefusedkernel"} and matched == 2
    # a short joined pair inside a longer name is chance, not the same name
    assert title_match(title_words("crash with tp_size_limit set"), "[Bugfix] fix tp size (#1)")[1] == 0


def test_a_fix_title_that_names_the_reports_option_in_words_is_proposed():
    report = "use_fused_kernels=True causes training quality regression when ulysses_sequence_parallel_size > 1"
    fix = CommitRecord("a" * 40, 100, "[model, fsdp] fix: honor SP-rolled labels in fused kernels (#6268)", None, True, (),
                       (FileChange("verl/workers/actor.py", "verl/workers/actor.py", ("forward",), " ",
                                   names=" use_fused_kernels labels "),),
                       "use_fused_kernels=True with ulysses_sequence_parallel_size > 1: a training quality regression")
    others = [CommitRecord(f"{i}" * 40, 10 + i, f"[Feature] support a new {w} option", None, False, (), (), "")
              for i, w in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer", "kernels"), 1)]
    found = rank([fix, *others], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report)[0]
    assert [c.sha for c in found] == [fix.sha]
    assert any("its title restates the report (usefusedkernel" in e for e in found[0].evidence)


def test_a_fix_title_holding_five_words_of_a_long_report_is_proposed():
    """A long issue title dilutes the idf-weighted coverage: a fix title that holds five of its words (here 46 % of
    them) restates it all the same (TITLE_MANY_WORDS); one holding four does not reach the threshold."""
    from porter.kb.history.candidates import TITLE_MANY_WORDS

    report = "Sharded export diverges from live weights: metadata write ordering in converter path"
    fix = CommitRecord("a" * 40, 500, "[ckpt] fix: write metadata before converter save to fix sharded export (#9)", None, True,
                       (), (), "")
    four = CommitRecord("b" * 40, 400, "[ckpt] fix: write metadata in converter for export (#8)", None, True, (), (), "")
    others = [CommitRecord(f"{i:040x}", i, f"[Feature] support option number{i}", None, False, (), (), "") for i in range(1, 100)]
    assert title_match(title_words(report), fix.subject)[1] == TITLE_MANY_WORDS
    found = rank([fix, *others], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report)[0]
    assert [c.sha for c in found] == [fix.sha]
    assert any("its title holds 5 of the report's words" in e for e in found[0].evidence)
    assert rank([four, *others], TraceFacts((), "", ""), {}, None, {}, report=report, error_text=report)[0] == []


def test_a_joined_pair_must_be_most_of_the_name_it_sits_in():
    # `torch npu` is 8 of `is_torch_npu_available`'s 19 folded letters: another function, not the title's words
    report = title_words("cannot import name 'is_torch_npu_available' from 'transformers'")
    assert title_match(report, "[Bugfix] fix torch npu for the worker (#1)")[1] == 0
    # the same pair as the bulk of an option's name still counts (`fused kernels` in `use_fused_kernels`)
    assert title_match(title_words("use_fused_kernels breaks"), "fix: fused kernels labels (#2)")[1] == 2


def _titled_history(fix_title: str) -> list[CommitRecord]:
    fix = CommitRecord("f" * 40, 100, fix_title, None, True, (),
                       (FileChange("python/triton/language/semantic.py", "python/triton/language/semantic.py", ("bitcast",), " "),), "")
    # `cast` and `pass` are common title words of the history, `bitcast`, `dtype`, `constexpr` rare ones
    others = [CommitRecord(f"{i}" * 40, 10 + i, f"[Feature] {w} (#{i})", None, False, (), (), "")
              for i, w in enumerate(("cast fp8 inputs", "pass the options", "cast int args", "a new pass", "pass manager",
                                     "cast rounding", "rollout", "reward"), 1)]
    return [fix, *others]


def test_a_prose_title_over_an_error_that_names_no_code_is_restated_by_the_fix():
    commits = _titled_history("[FRONTEND] Fix bitcast with constexpr dtype (#5382)")
    facts = TraceFacts((), "AttributeError", "'constexpr' object has no attribute 'scalar'")
    report = "tl.cast(bitcast=True) errors on dtype passed as tl.constexpr"
    found = rank(commits, facts, {}, None, {}, report=report, error_text="AttributeError: 'constexpr' object has no attribute 'scalar'")[0]
    assert [c.sha for c in found] == ["f" * 40]
    assert any("its title restates the report" in e for e in found[0].evidence)
    # the title is the error line itself (a one-line paste): its words are the error's, for the quote rules only
    line = "AttributeError: 'constexpr' object has no attribute 'scalar' on bitcast dtype"
    assert not rank(commits, facts, {}, None, {}, report=line, error_text=line)[0]
    # a short paste's first line that is trace or log output is no title
    for first in ("Traceback: bitcast dtype constexpr", "ERROR 02:12:55 bitcast constexpr dtype"):
        assert not rank(commits, facts, {}, None, {}, report=first)[0]
    # the error names code: those names are the evidence, not the title's words
    coded = TraceFacts((), "AttributeError", "'constexpr' object has no attribute 'scalar_type'")
    assert not any("restates the report" in e for c in rank(commits, coded, {}, None, {}, report=report)[0] for e in c.evidence)
