"""Issue 13, session 5 (system layers): warning-class entries stay advice on a working run, and
the family entries written from vendor documentation fire on sibling wordings with captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.matcher import ADVICE_NOTE, diagnose_text
from tests.kb.conftest import entry

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"

CAUTION = ("[W compiler_depend.ts:51] Warning: CAUTION: The operator 'aten::isin' is not currently supported on the NPU "
           "backend and will fall back to run on the CPU. This may have performance implications.\n")


@pytest.fixture
def advice_kb(fixture_kb):
    fixture_kb.add(entry("TNPU-001", "torch-npu", [{"literal": "is not currently supported on the NPU backend", "weight": 0.8}],
                         severity="warning"))
    fixture_kb.add(entry("PKG-001", "packaging", [{"literal": "pip install --no-deps triton-ascend", "weight": 0.8}],
                         severity="warning"))
    return fixture_kb.compiled()


def test_a_fallback_warning_on_a_working_run_is_advice_not_a_diagnosis(advice_kb):
    text = "step 1/2 start\n" + CAUTION + "step 1/2 done, loss 2.31\n"
    diag = diagnose_text(advice_kb, text)
    assert diag.status == "unknown"
    near = diag.near_misses[0]
    assert near.entry.id == "TNPU-001" and near.explain["advice"] == ADVICE_NOTE


def test_the_warning_entry_is_a_diagnosis_when_the_log_also_fails(advice_kb):
    for failure in ("Traceback (most recent call last):\n  File \"t.py\", line 4, in <module>\nRuntimeError: boom\n",
                    "[ERROR] 2024-11-28-11:37:15 (PID:6547, Device:0) ERR01007 OPS feature not supported\n",
                    "worker exited: segmentation fault (core dumped)\n"):
        diag = diagnose_text(advice_kb, CAUTION + failure)
        assert diag.status == "match" and "TNPU-001" in [m.entry.id for m in diag.matches], failure


def test_a_warning_entry_that_matches_a_non_warning_line_stays_a_diagnosis(advice_kb):
    # a hang or a bad setting prints no failure by nature: the gate only covers warning-labelled lines
    diag = diagnose_text(advice_kb, "RUN pip install --no-deps triton-ascend==3.2.0\n")
    assert diag.top is not None and diag.top.entry.id == "PKG-001"


def test_error_entries_are_never_gated(fixture_kb):
    fixture_kb.add(entry("TNPU-002", "torch-npu", [{"literal": "Warning: device do not support double dtype", "weight": 0.8}]))
    diag = diagnose_text(fixture_kb.compiled(), "[W compiler_depend.ts:1] Warning: device do not support double dtype now\n")
    assert diag.top is not None and diag.top.entry.id == "TNPU-002"
