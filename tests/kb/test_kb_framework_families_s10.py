"""Framework-layer family widening of session 10 (issue 13): the upstream vllm drift family (VLLM-026) reads the
class-attribute and enum-member forms of an AttributeError and vLLM's own spelling in prose, and no longer takes a
fix that closes an issue in vllm's own tracker as evidence that a consumer met a changed vllm."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kb.conftest import top_match

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"

pytestmark = pytest.mark.skipif(not any(PATTERNS.rglob("*.yaml")), reason="no knowledge-base entries in this checkout")

DRIFT = {"VLLM-011", "VLLM-012", "VLLM-013", "VLLM-026"}


@pytest.fixture
def kb(bundled_kb):
    return bundled_kb


@pytest.mark.parametrize("trace, api", [
    # Python <= 3.11 Enum prints only the missing member; the prose names vLLM as the project spells itself
    ("The scheduler raises AttributeError: PREEMPTED_WAITING when it runs against the newer vLLM main.\n",
     "PREEMPTED_WAITING"),
    # a class attribute the plugin expected, inside a vllm_ascend frame
    ('  File "/x/site-packages/vllm_ascend/worker/model_runner_v1.py", line 9, in capture\n'
     "AttributeError: type object 'GraphCaptureMode' has no attribute 'FULL_AND_PIECEWISE'\n",
     "GraphCaptureMode"),
])
def test_drift_family_reads_class_attribute_and_enum_forms(kb, trace, api):
    top = top_match(kb, trace)
    assert top is not None and top.entry.id in DRIFT, top and top.entry.id
    assert top.entry.id != "VLLM-026" or top.captures.get("api") == api


@pytest.mark.parametrize("trace", [
    # a fix landing in vllm's own tracker: vllm's own bug, not a consumer meeting a changed vllm
    "[Bugfix] Fix AttributeError: 'Tracker' object has no attribute 'client'\n"
    "Fixes https://github.com/vllm-project/vllm/issues/12345\n",
    # an all-caps word without an underscore is no constant name
    "AttributeError: NPU backend missing, see upstream vLLM docs\n",
    # a builtin's class attribute is the caller's own bug
    '  File "/x/site-packages/vllm_ascend/utils.py", line 9, in f\n'
    "AttributeError: type object 'str' has no attribute 'fromhex_x'\n",
    # 'latest vLLM-Ascend' is the plugin, not vllm
    "AttributeError: MAX_CAPTURE_SIZE after moving to the latest vLLM-Ascend\n",
])
def test_drift_family_stays_quiet_on_look_alikes(kb, trace):
    top = top_match(kb, trace)
    assert top is None or top.entry.id not in DRIFT, top.entry.id


def test_an_upstream_pr_link_still_counts(kb):
    # the same error next to a vllm *pull request* that caused it is drift
    top = top_match(kb, "Fix `AttributeError: 'Tracker' object has no attribute 'client'` due to\n"
                        "https://github.com/vllm-project/vllm/pull/12345\n")
    assert top is not None and top.entry.id in DRIFT


def test_a_vllm_import_statement_is_the_vllm_side(kb):
    # a pasted traceback cut to the failing source line and the error: the caller imports from vllm
    top = top_match(kb, "from vllm.engine.arg_helpers import parse_extra_flags\n"
                        "ImportError: cannot import name 'parse_extra_flags'\n")
    assert top is not None and top.entry.id in DRIFT, top and top.entry.id


def test_a_plugin_import_statement_is_not_the_vllm_side(kb):
    # `from vllm_ascend...` is the plugin importing itself: a broken plugin install, not vllm drift
    top = top_match(kb, "from vllm_ascend.ops.helpers import fused_norm\n"
                        "ImportError: cannot import name 'fused_norm'\n")
    assert top is None or top.entry.id not in DRIFT, top.entry.id


def test_trainer_pin_hint_line_alone_names_the_refused_package(kb):
    # a paste cut before the check's first line: its 'To fix' hint still says which pin refused which package
    top = top_match(kb, "To fix: pip install peft>=0.11.1,<0.13.0\n")
    assert top is not None and top.entry.id == "LMF-001" and top.captures.get("package") == "peft"


def test_prose_advice_to_pip_install_is_not_the_trainer_check(kb):
    top = top_match(kb, "To fix this, you can pip install peft and rerun the script.\n")
    assert top is None or top.entry.id != "LMF-001", top.entry.id
