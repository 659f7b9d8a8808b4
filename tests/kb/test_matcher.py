"""Scoring: exact beats fuzzy, all/any logic, layer hints, version filters, the unknown threshold."""

from __future__ import annotations

from tests.kb.conftest import DCMI_TRACE, LORA_TRACE, entry

from porter.kb.index import CompiledKB, regex_literal_runs, signature_key
from porter.kb.matcher import MATCH_THRESHOLD, diagnose_text
from porter.kb.schema import parse_entry


def test_exact_signature_match_with_lines_and_confidence(small_kb):
    diag = diagnose_text(small_kb.compiled(), LORA_TRACE)
    assert diag.status == "match" and diag.top.entry.id == "VLLM-001"
    assert diag.top.method == "signature" and diag.top.confidence >= 0.99 - 1e-9
    assert [m.line for m in diag.top.lines] == [5]


def test_prefixed_and_coloured_lines_still_match(small_kb):
    text = "\x1b[31m(RayWorker pid=77) [rank2]: rtGetDeviceCount:ErrCode=507899, desc=[x]\x1b[0m\r\n"
    diag = diagnose_text(small_kb.compiled(), text)
    assert diag.top.entry.id == "DRV-001" and diag.top.confidence >= 0.6


def test_noisy_or_combines_weights(small_kb):
    kb = small_kb.compiled()
    one = diagnose_text(kb, "rtGetDeviceCount:ErrCode=507899\n")
    both = diagnose_text(kb, DCMI_TRACE)
    assert 0.6 <= one.top.confidence < both.top.confidence
    assert abs(both.top.confidence - (1 - 0.1 * 0.4)) < 0.03  # 0.96 plus a small layer boost


def test_low_weight_alone_is_not_a_diagnosis(fixture_kb):
    fixture_kb.add(entry("CANN-001", "cann", [
        {"literal": "EZ9999: Inner Error", "weight": 0.3},
        {"literal": "aclnnFoo failed because of bar", "weight": 0.8},
    ]))
    kb = fixture_kb.compiled()
    weak = diagnose_text(kb, "EZ9999: Inner Error!\n")
    assert weak.status == "unknown"
    assert weak.near_misses and weak.near_misses[0].entry.id == "CANN-001" and weak.near_misses[0].confidence < MATCH_THRESHOLD
    assert diagnose_text(kb, "EZ9999: Inner Error!\naclnnFoo failed because of bar\n").status == "match"


def test_match_all_needs_every_required_item(fixture_kb):
    fixture_kb.add(entry("RAY-001", "ray", [
        {"literal": "Total available GPUs 0 is less than total desired GPUs", "weight": 0.6},
        {"literal": "ASCEND_RT_VISIBLE_DEVICES=''", "weight": 0.6},
        {"literal": "num_gpus=0", "weight": 0.3, "required": False},
    ], match="all"))
    kb = fixture_kb.compiled()
    partial = diagnose_text(kb, "ValueError: Total available GPUs 0 is less than total desired GPUs 2\n")
    assert partial.status == "unknown" and partial.near_misses[0].explain.get("missing_required") == [1]
    full = diagnose_text(kb, "ValueError: Total available GPUs 0 is less than total desired GPUs 2\nenv ASCEND_RT_VISIBLE_DEVICES='' set\n")
    assert full.status == "match" and full.top.entry.id == "RAY-001"


def test_exact_beats_fuzzy_and_fuzzy_is_capped(fixture_kb):
    fixture_kb.add(entry("HF-001", "transformers", [{"literal": "no_init_weights' from 'transformers.modeling_utils'", "weight": 0.9}],
                         symptoms=["ImportError: cannot import name 'foo_bar_baz' from 'transformers.quux' (unknown location)"]))
    fixture_kb.add(entry("HF-002", "transformers", [{"literal": "a signature that never appears anywhere", "weight": 0.9}],
                         symptoms=["ImportError: cannot import name 'no_init_weights' from 'transformers.modeling_utils'"]))
    kb = fixture_kb.compiled()
    diag = diagnose_text(kb, "ImportError: cannot import name 'no_init_weights' from 'transformers.modeling_utils'\n", top=3)
    assert diag.top.entry.id == "HF-001" and diag.top.method == "signature"
    # no signature hit: the near-identical symptom still finds HF-001 by fuzzy matching, below signature confidence
    fuzzy = diagnose_text(kb, "ImportError: cannot import name 'foo_bar_baz' from 'transformers.quux' (unknown location)\n")
    assert fuzzy.status == "match" and fuzzy.top.entry.id == "HF-001" and fuzzy.top.method == "fuzzy"
    assert fuzzy.top.confidence <= 0.55
    # a loosely similar message stays unknown, with the entry as a near miss
    loose = diagnose_text(kb, "ImportError: cannot import name 'something' from 'transformers.other_module'\n")
    assert loose.status == "unknown"


def test_layer_hint_breaks_a_tie(fixture_kb):
    items = [{"literal": "operator is not supported on this device", "weight": 0.8}]
    fixture_kb.add(entry("TNPU-001", "torch-npu", items))
    fixture_kb.add(entry("VASC-001", "vllm-ascend", items))
    kb = fixture_kb.compiled()
    trace = 'Traceback (most recent call last):\n  File "/x/site-packages/vllm_ascend/ops/a.py", line 3, in f\nRuntimeError: operator is not supported on this device\n'
    diag = diagnose_text(kb, trace)
    assert diag.top.entry.id == "VASC-001" and diag.matches[1].entry.id == "TNPU-001"
    assert diag.close  # within the margin: discriminators are shown


def test_version_filter_demotes_out_of_range_entries(small_kb):
    kb = small_kb.compiled()
    inside = diagnose_text(kb, LORA_TRACE, env={"vllm": "0.13.1"})
    assert inside.top.entry.id == "VLLM-001" and "within" in inside.top.version_notes[0]
    outside = diagnose_text(kb, LORA_TRACE, env={"vllm": "0.11.0"})
    assert outside.status == "unknown"
    assert outside.near_misses[0].entry.id == "VLLM-001" and "outside" in outside.near_misses[0].version_notes[0]


def test_unknown_on_unrelated_and_lookalike_text(small_kb):
    kb = small_kb.compiled()
    for text in [
        "cooking pasta takes ten minutes\n",
        "Ignore import error when loading vllm.lora: No module named 'vllm'\n",
        "WARNING: dcmi is fine, device count 8\n",
        "",
    ]:
        assert diagnose_text(kb, text).status == "unknown", text


def test_index_keys_are_whole_tokens():
    assert signature_key("literal", "No module named 'vllm.lora.models'") in {"vllm", "lora", "models"}
    # the first/last token may be part of a longer word in the line, so it is never the key
    assert signature_key("literal", "odule named") is None
    assert regex_literal_runs(r"retCode=0x[0-9a-f]+") == ["retCode=0x"]
    assert regex_literal_runs(r"(?i)error") is None
    # a signature without a usable key is checked on every line and still matches
    data = entry("VLLM-002", "vllm", [{"literal": "odule named", "weight": 0.9}])
    e, _ = parse_entry(data, "x.yaml")
    kb = CompiledKB.build([e])
    assert kb.always and diagnose_text(kb, "xmodule namedy\n").status == "match"


def test_invalid_regex_in_kb_is_skipped_not_fatal(fixture_kb):
    fixture_kb.add(entry("VLLM-003", "vllm", [{"regex": "bad (regex", "weight": 0.9}, {"literal": "good literal text", "weight": 0.9}]))
    diag = diagnose_text(fixture_kb.compiled(), "bad (regex and good literal text\n")
    assert diag.top.entry.id == "VLLM-003"


def test_lines_after_case_folding_unicode_still_match(small_kb):
    # "İ".lower() is two code points: the chunk prefilter must not lose track of line offsets
    text = "İstanbul İİİ step\n" * 5 + "Traceback (most recent call last):\nModuleNotFoundError: No module named 'vllm.lora.models'\n"
    diag = diagnose_text(small_kb.compiled(), text)
    assert diag.top.entry.id == "VLLM-001" and diag.top.lines[0].line == 7


def test_literals_tolerate_whitespace_differences(small_kb):
    kb = small_kb.compiled()
    squashed = "dcmi  model initialized\tfailed,   because the device is used. ret is -8020\n"
    diag = diagnose_text(kb, squashed)
    assert diag.top.entry.id == "DRV-001" and diag.top.lines[0].line == 1
    assert diagnose_text(kb, "dcmi model initialized fail, because the device is used\n").status == "unknown"


def test_error_entries_rank_above_warning_entries(fixture_kb):
    fixture_kb.add(entry("TNPU-001", "torch-npu", [{"literal": "is not currently supported on the NPU backend", "weight": 0.8}], severity="warning"))
    fixture_kb.add(entry("TNPU-002", "torch-npu", [{"literal": "call aclnnFoo failed, error code 561000", "weight": 0.7}]))
    text = "Warning: CAUTION: The operator 'aten::isin' is not currently supported on the NPU backend\nRuntimeError: call aclnnFoo failed, error code 561000\n"
    diag = diagnose_text(fixture_kb.compiled(), text)
    assert [m.entry.id for m in diag.matches] == ["TNPU-002", "TNPU-001"]
    assert diag.matches[1].confidence > diag.matches[0].confidence  # ranking, not confidence, changed
    alone = diagnose_text(fixture_kb.compiled(), text.splitlines()[0] + "\n")
    # a warning line alone is a working run's advice, not a diagnosis (see test_kb_families_s5)
    assert alone.status == "unknown" and alone.near_misses[0].entry.id == "TNPU-001"
