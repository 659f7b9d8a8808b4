"""Issue 13 (healthy look-alikes): a warning keeps its warning label where the matched text does
not show it. (1) An issue or a terminal wrapped it onto the next lines: the matched half ("... is
not currently supported on the NPU backend ...") sits on the continuation line, which carries no
label of its own. (2) The label is the log prefix the matcher strips before matching (vllm's
`WARNING 05-01 ...`, `[WARNING]`, glog `W0501 ...`). Without either rule a working run's
fallback notice read as a failure."""

from __future__ import annotations

import pytest

from porter.kb.matcher import ADVICE_NOTE, diagnose_text
from tests.kb.conftest import entry

WRAPPED = ("[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator 'torchvision::nms'\n"
           " is not currently supported on the NPU backend and will fall back to run on the CPU. This may have\n"
           " performance implications. (function npu_cpu_fallback)\n")
FAILURE = "Traceback (most recent call last):\n  File \"t.py\", line 4, in <module>\nRuntimeError: boom\n"


@pytest.fixture
def kb(fixture_kb):
    fixture_kb.add(entry("TNPU-001", "torch-npu", [{"literal": "is not currently supported on the NPU backend", "weight": 0.8}],
                         severity="warning"))
    return fixture_kb.compiled()


def test_the_one_line_warning_with_a_failure_matches(kb):
    one_line = WRAPPED.replace("'\n ", "' ").replace("have\n ", "have ")
    assert diagnose_text(kb, one_line + FAILURE).top.entry.id == "TNPU-001"


@pytest.mark.parametrize("wrap", [
    WRAPPED,
    WRAPPED.replace("\n ", "\n"),  # wrapped without indentation: the continuation starts mid-sentence in lower case
    "(RayWorker pid=7) " + WRAPPED.replace("\n ", "\n(RayWorker pid=7)  "),  # every line under a process prefix
    "[W compiler_depend.ts:51] Warning: CAUTION: The operator\n 'aten::isin'\n is not currently supported on the NPU backend\n",  # two lines down
])
def test_a_wrapped_warning_on_a_working_run_stays_advice(kb, wrap):
    diag = diagnose_text(kb, "predict start\n" + wrap + "predict done, 6 cars\n")
    assert diag.status == "unknown", wrap
    assert diag.near_misses[0].entry.id == "TNPU-001" and diag.near_misses[0].explain["advice"] == ADVICE_NOTE


def test_the_wrapped_warning_is_a_diagnosis_when_the_log_also_fails(kb):
    diag = diagnose_text(kb, WRAPPED + FAILURE)
    assert diag.status == "match" and diag.top.entry.id == "TNPU-001"


@pytest.mark.parametrize("text", [
    # the same words wrapped out of an error line: the continuation inherits no warning label
    "[E OpCommand.cpp:88] The operator 'aten::isin'\n is not currently supported on the NPU backend\n",
    "RuntimeError: The operator 'aten::isin'\n is not currently supported on the NPU backend\n",
    # a blank line ends the wrapped message: the next line is a message of its own
    "[W x.cpp:1] Warning: something else\n\n is not currently supported on the NPU backend\n",
    # a line with its own `label:` is not a continuation
    "[W x.cpp:1] Warning: something else\nerror: op is not currently supported on the NPU backend\n",
])
def test_a_continuation_of_a_non_warning_line_stays_a_diagnosis(kb, text):
    diag = diagnose_text(kb, text)
    assert diag.status == "match" and diag.top.entry.id == "TNPU-001", text


def test_the_wrapped_warning_is_recognised_across_a_batch_boundary(kb):
    from porter.kb.index import CompiledKB  # noqa: F401  (the scan API below takes the compiled KB)
    from porter.kb.matcher import decide, scan

    lines = ("predict start\n" + WRAPPED + "predict done\n").splitlines()
    for cut in range(1, len(lines)):
        hits, signals = scan(kb, iter([lines[:cut], lines[cut:]]))
        assert decide(kb, hits, signals).status == "unknown", cut


FALLBACK = "The operator 'aten::isin' is not currently supported on the NPU backend and will fall back to run on the CPU."


@pytest.mark.parametrize("prefix", [
    "WARNING 05-01 12:00:01 [utils.py:12] ",  # vllm's logger
    "(EngineCore_DP0 pid=9) WARNING 05-01 12:00:01 [utils.py:12] ",
    "[2024-05-01 12:00:01] [WARNING] ",
    "(pid=3) W0501 12:00:01.000 123 x.cc:1] ",  # glog after a Ray prefix
])
def test_a_warning_level_in_the_stripped_log_prefix_keeps_the_line_a_warning(kb, prefix):
    text = "INFO 05-01 12:00:00 [core.py:1] start\n" + prefix + FALLBACK + "\nINFO 05-01 12:00:02 [core.py:1] done\n"
    diag = diagnose_text(kb, text)
    assert diag.status == "unknown" and diag.near_misses[0].explain["advice"] == ADVICE_NOTE, prefix
    # the same line under an error level, or next to a failure, is a diagnosis
    assert diagnose_text(kb, prefix.replace("WARNING", "ERROR").replace("W0501", "E0501") + FALLBACK + "\n").status == "match"
    assert diagnose_text(kb, text + FAILURE).top.entry.id == "TNPU-001"


def test_a_wrapped_line_under_a_warning_prefix_stays_advice(kb):
    text = "WARNING 05-01 12:00:01 [utils.py:12] The operator 'aten::isin'\n  is not currently supported on the NPU backend\n"
    assert diagnose_text(kb, text).status == "unknown"


VLLM_C = "WARNING 05-01 12:00:00 [_custom_ops.py:21] Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'vllm._C'\")\n"


@pytest.mark.parametrize("noise", [
    VLLM_C,  # every working vllm-ascend start prints it: an exception quoted in a warning-level line
    "[W compiler_depend.ts:51] Warning: EZ9999 reported by the profiler, ignored (function operator())\n",  # a code in a warning line
])
def test_an_exception_or_code_quoted_in_a_warning_line_is_not_the_run_failing(kb, noise):
    text = "INFO 05-01 12:00:00 [core.py:1] start\n" + noise + CAUTION_LINE + "INFO 05-01 12:00:02 [core.py:1] done\n"
    diag = diagnose_text(kb, text)
    assert diag.status == "unknown" and diag.near_misses[0].explain["advice"] == ADVICE_NOTE, noise
    # the same exception or code on an error line is a failure, and the warning entry is a diagnosis
    failing = noise.replace("WARNING", "ERROR").replace("[W compiler_depend.ts:51] Warning: ", "[ERROR] ")
    assert diagnose_text(kb, text.replace(noise, failing)).status == "match", failing


CAUTION_LINE = "[W compiler_depend.ts:51] Warning: CAUTION: The operator 'aten::isin' is not currently supported on the NPU backend\n"
