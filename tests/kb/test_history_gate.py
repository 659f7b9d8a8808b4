"""The history search's gate for environment faults: which evidence ties a commit to this very
trace (a quote with the trace's own names and values, a change to a failing frame), and when the
stricter bar applies (a firm KB environment entry, a driver/HCCL code), independent of the KB's
calibration."""

from __future__ import annotations

import pytest

from porter.kb.history.candidates import (
    anchored,
    covers,
    distinctive_names,
    rank,
    specific_tokens,
    changes_only_tests,
    where_free,
)
from porter.kb.history.lookup import environment_verdict
from porter.kb.history.models import CommitRecord, FileChange, Frame, TraceFacts
from porter.kb.matcher import diagnose_text

from .conftest import entry
from .test_history import TRACE, history  # noqa: F401  (the git history fixture)

FIX_TITLE = "[BugFix] fix loading the transport library in nightly (#12)"
TRANSPORT = "libascend_transport.so: cannot open shared object file: No such file or directory"


def _commit(sha: str, subject: str, body: str = "", errors: tuple[str, ...] = (), paths: tuple[str, ...] = ("plug/a.py",),
            functions: tuple[str, ...] = ()) -> CommitRecord:
    changes = tuple(FileChange(p, p, functions, " ") for p in paths)
    return CommitRecord(sha * 10, 100, subject, 12, subject.startswith("[BugFix]"), errors, changes, body)


def _rank(commits, exc_type: str, message: str, frames=(), strict: bool = False):
    facts = TraceFacts(tuple(frames), exc_type, message)
    return rank(commits, facts, {}, None, {}, strict=strict)[0]


def test_specific_tokens_are_the_names_libraries_codes_and_values_of_one_error():
    assert specific_tokens("libhccl.so: cannot open shared object file: No such file or directory") == ("libhccl.so",)
    assert specific_tokens("call aclnnCast failed, detail:EZ1001: The param dtype") == ("aclnncast", "ez1001")
    assert set(specific_tokens("'Qwen2Config' object has no attribute 'num_hidden_layers'")) == {"qwen2config", "num_hidden_layers"}
    # Python's type names and plain numbers tell no two errors apart
    assert specific_tokens("'NoneType' object is not iterable") == ()
    assert specific_tokens("Free memory on device (55.83/61.27 GiB) is less than 0.92") == ()
    assert covers("ImportError: libhccl.so: cannot open shared object file", ("libhccl.so",))
    assert not covers(f"ImportError: {TRANSPORT}", ("libhccl.so",))


def test_a_near_quote_of_another_library_is_the_same_form_not_this_error():
    fix = _commit("a", FIX_TITLE, errors=(f"ImportError: {TRANSPORT}",))
    # the trace's own library: the commit quotes this error
    same = _rank([fix], "ImportError", TRANSPORT)
    assert [c.sha for c in same] == [fix.sha] and any(e.startswith("message quotes the error") for e in same[0].evidence)
    # another library, same words (a 94 % fuzzy match): no candidate
    assert _rank([fix], "ImportError", "libhccl.so: cannot open shared object file: No such file or directory") == []


def test_warnings_and_the_places_an_error_prints_are_no_code_names():
    assert distinctive_names("UserWarning: Can't get ascend_hal device count") == ["ascend_hal"]
    assert "ValueError" in distinctive_names("raises ValueError in _builder")  # exceptions stay: a commit may name them
    message = ("copy_d2d:torch_npu/csrc/aten/common/CopyKernel.cpp:274 NPU function error: "
               "c10_npu::acl::AclrtSynchronizeStreamWithTimeout(copy_stream), error code is 507001")
    assert "torch_npu" not in where_free(message) and "c10_npu" not in where_free(message)
    assert distinctive_names(where_free(message)) == ["AclrtSynchronizeStreamWithTimeout", "copy_stream"]
    # a bug fix whose message names the library's namespace is no candidate for the library's error
    noise = _commit("b", "[BugFix] Fix ci error `Invalid device ID` (#10)", body="c10_npu and torch_npu logs")
    assert _rank([noise], "RuntimeError", message) == []


def test_strict_bar_keeps_quotes_and_frame_changes_and_drops_names_and_test_only_commits():
    frame = Frame("/site/plug/runner.py", "plug/runner.py", 3, "prepare_inputs", "x = build(meta)", 0)
    named = _commit("c", "[BugFix] handle DT_BFLOAT16 in build_meta (#3)", body="build_meta and DT_BFLOAT16")
    quoting = _commit("d", "[BugFix] fix the device setup (#4)", errors=("RuntimeError: device setup failed for build_meta",))
    ci_only = _commit("e", "[BugFix][CI] fix the device setup test (#5)", errors=("RuntimeError: device setup failed for build_meta",),
                      paths=("tests/e2e/test_setup.py",))
    func = _commit("f", "[BugFix] rework prepare_inputs (#6)", paths=("plug/runner.py",), functions=("prepare_inputs",))
    message = "device setup failed for build_meta"
    loose = {c.sha for c in _rank([named, quoting, ci_only, func], "RuntimeError", message, [frame])}
    assert {named.sha, quoting.sha, ci_only.sha} <= loose
    strict = {c.sha for c in _rank([named, quoting, ci_only, func], "RuntimeError", message, [frame], strict=True)}
    assert strict == {quoting.sha, func.sha}
    assert changes_only_tests(ci_only) and not changes_only_tests(quoting) and not changes_only_tests(_commit("g", "docs only", paths=()))
    assert anchored(["changes prepare_inputs() in plug/runner.py (2 commit(s) since your version do)"])
    assert not anchored(["changes plug/runner.py", "message names `build_meta`", "bug-fix title"])


ENV_LINE = "RuntimeError: Cannot re-initialize NPU in forked subprocess. To use NPU with multiprocessing, you must use the 'spawn' start method\n"


@pytest.fixture
def env_kb(fixture_kb):
    fixture_kb.add(entry("ENV-001", "torch-npu", [{"literal": "Cannot re-initialize NPU in forked subprocess", "weight": 0.9}],
                         kind="config"))
    fixture_kb.add(entry("BUG-001", "vllm-ascend", [{"literal": "object has no attribute 'swap_states'", "weight": 0.9}]))
    return fixture_kb.compiled()


def _calibration(bias: float):
    from porter.kb.calibrate import FEATURES, Calibration

    return Calibration(tuple([0.0] * (len(FEATURES) - 1) + [bias]), samples=1000)


def test_environment_verdict_reads_the_signatures_not_the_calibration(env_kb):
    verdicts = []
    for calibration in (None, _calibration(-4.0), _calibration(4.0)):  # none, abstains on everything, sure of everything
        env_kb.calibration = calibration
        verdicts.append(environment_verdict(diagnose_text(env_kb, ENV_LINE)))
    assert verdicts[0] == verdicts[1] == verdicts[2] and "ENV-001" in verdicts[0]
    env_kb.calibration = None
    # a plugin-bug entry is no environment verdict; nor a trace no entry explains
    assert environment_verdict(diagnose_text(env_kb, "AttributeError: 'InputBatch' object has no attribute 'swap_states'\n")) == ""
    assert environment_verdict(diagnose_text(env_kb, "KeyError: 'block_size'\n")) == ""


def test_driver_and_hccl_codes_are_environment_verdicts(env_kb):
    assert "driver error code" in environment_verdict(diagnose_text(env_kb, "dcmi module initialize failed. ret is -8005\n"))
    hccl = "RuntimeError: HCCL function error: hcclCommInitRootInfo(...), error code is 7\n"
    assert "hccl error code" in environment_verdict(diagnose_text(env_kb, hccl))
    # a runtime code can come from the plugin's own kernel: no verdict by itself
    assert environment_verdict(diagnose_text(env_kb, "RuntimeError: vector core exception, error code is 507035\n")) == ""


def test_on_equal_scores_a_bug_fix_ranks_before_other_work():
    fix = _commit("h", "[BugFix] split the fused weights (#2)", body="the hang in batch_isend_irecv")
    feature = _commit("i", "Dynamic load balance (#1)", body="uses batch_isend_irecv; a KeyError is handled")
    ranked = _rank([fix, feature], "KeyError", "no state for batch_isend_irecv")  # newest first: the feature is older
    assert [round(c.score, 2) for c in ranked] == [4.0, 4.0]
    assert [c.sha for c in ranked] == [fix.sha, feature.sha]


def test_cli_reports_the_gate_and_keeps_a_fix_of_the_failing_function(history, cli, tmp_path):
    import json

    trace = tmp_path / "trace.txt"
    trace.write_text(TRACE + "dcmi module initialize failed. ret is -8005\n")
    code, out = cli(["diagnose", str(trace), "--history", str(history["repo"]), "--json"])
    (hist,) = json.loads(out)["history"]
    assert hist["gate"]  # the bundled KB's container entry, or the driver code itself
    assert [c["sha"] for c in hist["candidates"]][:1] == [history["shas"]["fix"]]  # it changed load(), the failing frame
    code, out = cli(["diagnose", str(trace), "--history", str(history["repo"])])
    assert hist["gate"] in " ".join(out.split()) and "possibly fixed upstream by" in out


def test_a_fix_whose_title_restates_a_short_report_is_a_candidate():
    from porter.kb.history.candidates import title_words

    assert title_words("[BugFix][SpecDecode] Sanitize MTP placeholders before model forward (#10307)") == {
        "sanitize", "mtp", "placeholder", "model", "forward"}
    fix = _commit("j", "[BugFix] Guard mixed structured output backends (#11)")
    other = _commit("k", "[BugFix] Guard the scheduler queue (#12)")
    noise = [_commit(str(n % 10), f"[Misc] tidy module {n} (#{n})") for n in range(20)]
    facts = TraceFacts((), "", "")
    ranked = rank([fix, other, *noise], facts, {}, None, {}, report="V1 structured outputs can crash on mixed auto backends")[0]
    assert [c.sha for c in ranked] == [fix.sha] and ranked[0].evidence[0].startswith("its title restates the report")
    # a title that is the exception line is matched by its message instead; the title rule stays out
    assert rank([fix], TraceFacts((), "KeyError", "'x'"), {}, None, {},
                report="KeyError: 'x' with mixed structured output backends")[0] == []
