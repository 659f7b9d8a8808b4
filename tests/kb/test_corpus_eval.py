"""The per-case corpus loader and `porter kb eval`: splits, cited threads, calibration figures."""

from __future__ import annotations

import json

import pytest
import yaml

from porter.errors import InputError
from porter.kb.corpus import canonical_thread, load_corpus, split_of, split_problems
from porter.kb.evaluate import evaluate_splits

from .conftest import DCMI_TRACE, LORA_TRACE, entry


def _thread_in(split: str, stem: str) -> str:
    """A github thread id that hashes into `split` (the corpus rule decides the split)."""
    for n in range(1, 500):
        thread = f"github.com/example/{stem}/issues/{n}"
        if split_of(thread) == split:
            return thread
    raise AssertionError("no thread found")


def _case(root, split: str, case_id: str, trace: str, thread: str | None = None, **label) -> str:
    d = root / split
    d.mkdir(parents=True, exist_ok=True)
    thread = thread or _thread_in(split, case_id)
    doc = {"id": case_id, "source": "https://" + thread, "thread": thread, "split": split, "kind": "positive", **label}
    (d / f"{case_id}.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    (d / f"{case_id}.txt").write_text(trace, encoding="utf-8")
    return thread


def test_canonical_thread_folds_urls_to_one_id():
    assert canonical_thread("https://github.com/vllm-project/vllm-ascend/pull/12#issuecomment-1") == "github.com/vllm-project/vllm-ascend/issues/12"
    assert canonical_thread("https://www.github.com/a/b/issues/3/") == "github.com/a/b/issues/3"
    assert canonical_thread("https://www.hiascend.com/forum/thread-1.html?page=2") == "hiascend.com/forum/thread-1.html"


@pytest.fixture
def corpus(tmp_path, small_kb):
    root = tmp_path / "corpus"
    _case(root, "dev", "dev-lora", LORA_TRACE, expected=["VLLM-001"], cause="vllm-lora-moved")
    _case(root, "dev", "dev-healthy", "INFO step 1 loss 0.5\nWARNING retrying once, recovered\n", kind="healthy", cause="")
    _case(root, "test", "test-dcmi", DCMI_TRACE, cause="dcmi-device-busy")  # right through DRV-001's `causes`
    _case(root, "test", "test-miss", "RuntimeError: nobody has seen this failure before\n", cause="something-else", expected=["X-001"])
    _case(root, "test", "test-healthy-lookalike", "dcmi model initialized failed, because the device is used. ret is -8020\n", kind="healthy")
    cited = _case(root, "test", "test-cited", LORA_TRACE, expected=["VLLM-001"])
    small_kb.add(entry("DRV-001", "driver",
                       [{"literal": "dcmi model initialized failed, because the device is used", "weight": 0.9}],
                       causes=["dcmi-device-busy"], examples=["traces/DRV-001.txt"]), DCMI_TRACE)
    small_kb.add(entry("VLLM-001", "vllm", [{"literal": "No module named 'vllm.lora.models'", "weight": 1.0}],
                       references=[f"https://{cited.replace('/issues/', '/pull/')}#discussion"]), LORA_TRACE)
    return root


def test_eval_reports_splits_separately_and_refuses_cited_test_cases(corpus, small_kb):
    payload = evaluate_splits(small_kb.compiled(), corpus)
    assert list(payload["splits"]) == ["dev", "test"]
    dev, test = payload["splits"]["dev"], payload["splits"]["test"]
    assert (dev["top1_correct"], dev["positives"], dev["false_diagnoses"]) == (1, 1, 0)
    # the cited case is listed with the citing entry and not counted
    assert test["excluded"] == [{"id": "test-cited", "thread": test["excluded"][0]["thread"], "cited_by": ["VLLM-001"]}]
    assert {c["id"] for c in test["cases"]} == {"test-dcmi", "test-miss", "test-healthy-lookalike"}
    assert (test["top1_correct"], test["positives"]) == (1, 2)
    dcmi = next(c for c in test["cases"] if c["id"] == "test-dcmi")
    assert dcmi["judged_by"] == "cause"
    # the healthy look-alike that got a diagnosis is a false diagnosis
    assert test["false_diagnoses"] == 1 and test["false_positives"][0]["id"] == "test-healthy-lookalike"


def test_high_confidence_precision_and_reliability_buckets(corpus, small_kb):
    test = evaluate_splits(small_kb.compiled(), corpus)["splits"]["test"]
    answers = sum(b["answers"] for b in test["reliability"])
    right = sum(b["right"] for b in test["reliability"])
    assert (answers, right) == (2, 1)  # the dcmi case (right) and the healthy look-alike (wrong)
    hi = test["high_confidence"]
    assert hi["answers"] >= hi["right"] and hi["threshold"] == 0.9
    for b in test["reliability"]:
        if b["answers"]:
            assert 0.0 <= b["accuracy"] <= 1.0


def test_split_must_follow_the_thread_hash(tmp_path):
    root = tmp_path / "c"
    thread = _thread_in("dev", "x")
    _case(root, "test", "wrong-split", "x\n", thread=thread)
    problems = split_problems(load_corpus(root))
    assert problems and "wrong-split" in problems[0]


def test_missing_trace_is_an_input_error(tmp_path):
    d = tmp_path / "c" / "dev"
    d.mkdir(parents=True)
    (d / "a.yaml").write_text("id: a\nkind: positive\n")
    with pytest.raises(InputError, match="a.txt is missing"):
        load_corpus(tmp_path / "c")


def test_cli_eval_json_and_exit_code(corpus, small_kb, cli):
    code, out = cli(["kb", "eval", str(corpus), "--kb", str(small_kb.patterns), "--json"])
    doc = json.loads(out)
    assert code == 1  # the miss and the false diagnosis
    assert doc["splits"]["test"]["excluded"][0]["id"] == "test-cited"
    code, out = cli(["kb", "eval", str(corpus), "--kb", str(small_kb.patterns), "--split", "dev"])
    assert code == 0 and "dev" in out and "reliability" in out


def test_leave_source_out_diagnoses_each_case_without_the_entries_written_from_it(tmp_path, small_kb):
    root = tmp_path / "corpus"
    _case(root, "dev", "dev-lora", LORA_TRACE, expected=["VLLM-001"], cause="vllm-lora-moved")
    cited = _case(root, "dev", "dev-cited", LORA_TRACE + "\n", cause="vllm-lora-moved")
    # written from dev-lora (its example is a copy of that trace) and citing dev-cited's thread
    small_kb.add(entry("VLLM-001", "vllm", [{"literal": "No module named 'vllm.lora.models'", "weight": 1.0}],
                       examples=["traces/VLLM-001-dev-lora.txt"], references=[f"https://{cited}"]), LORA_TRACE)
    # a family written from elsewhere that covers the same cause
    small_kb.add(entry("VLLM-002", "vllm", [{"exception": "ModuleNotFoundError", "template": "No module named '{module}'",
                                             "captures": {"module": r"vllm\.[\w.]{1,80}"}, "weight": 0.7}],
                       causes=["vllm-lora-moved"]), LORA_TRACE)
    kb = small_kb.compiled()
    inside = evaluate_splits(kb, root)["splits"]["dev"]
    assert {c["id"]: c["got"][0] for c in inside["cases"]} == {"dev-lora": "VLLM-001", "dev-cited": "VLLM-001"}
    out = evaluate_splits(kb, root, leave_source_out=True)
    dev = out["splits"]["dev"]
    assert out["leave_source_out"] is True
    assert {c["id"]: c["got"][:1] for c in dev["cases"]} == {"dev-lora": ["VLLM-002"], "dev-cited": ["VLLM-002"]}
    assert dev["top1_correct"] == 2 and all(c["judged_by"] == "cause" for c in dev["cases"])


def test_cli_eval_leave_source_out_flag(corpus, small_kb, cli):
    code, out = cli(["kb", "eval", str(corpus), "--kb", str(small_kb.patterns), "--split", "dev", "--leave-source-out", "--json"])
    assert json.loads(out)["leave_source_out"] is True


def test_leave_source_out_diagnoses_each_case_without_its_own_entries(tmp_path, small_kb):
    root = tmp_path / "corpus"
    own = _case(root, "dev", "dev-own", LORA_TRACE, expected=["VLLM-001"])
    _case(root, "dev", "dev-other", LORA_TRACE, expected=["VLLM-001"])
    small_kb.add(entry("VLLM-001", "vllm", [{"literal": "No module named 'vllm.lora.models'", "weight": 1.0}],
                       references=[f"https://{own}"]), LORA_TRACE)
    in_sample = evaluate_splits(small_kb.compiled(), root, splits=("dev",))["splits"]["dev"]
    assert in_sample["top1_correct"] == 2
    payload = evaluate_splits(small_kb.compiled(), root, splits=("dev",), leave_source_out=True)
    assert payload["leave_source_out"] is True
    cases = {c["id"]: c for c in payload["splits"]["dev"]["cases"]}
    # the case whose thread the entry cites is diagnosed without it; the other still finds it
    assert cases["dev-own"]["got"] == [] and not cases["dev-own"]["top1"]
    assert cases["dev-other"]["got"] == ["VLLM-001"] and cases["dev-other"]["top1"]


def test_reach_separates_misses_an_entry_could_fix_from_missing_knowledge(tmp_path, small_kb):
    root = tmp_path / "corpus"
    own = _case(root, "dev", "dev-own", LORA_TRACE, expected=["VLLM-001"], cause="vllm-lora-moved")
    _case(root, "dev", "dev-sibling", "ModuleNotFoundError: No module named 'vllm.lora.layers'\n", cause="vllm-lora-moved")
    _case(root, "dev", "dev-unknown-cause", "RuntimeError: nobody has seen this failure before\n", cause="something-else")
    _case(root, "dev", "dev-healthy", "INFO step 1 loss 0.5\n", kind="healthy", cause="")
    small_kb.add(entry("VLLM-001", "vllm", [{"literal": "No module named 'vllm.lora.models'", "weight": 1.0}],
                       causes=["vllm-lora-moved"], references=[f"https://{own}"]), LORA_TRACE)
    kb = small_kb.compiled()
    inside = evaluate_splits(kb, root, splits=("dev",))["splits"]["dev"]
    reach = {c["id"]: c["reach"] for c in inside["cases"]}
    assert reach == {"dev-own": "named", "dev-sibling": "named", "dev-unknown-cause": "none", "dev-healthy": ""}
    assert inside["reach"] == {"named": 2, "own": 0, "none": 1, "top1_named_correct": 1, "top1_named": 0.5,
                               "named_misses": {"no_signature": 1, "weak": 0, "abstained": 0, "outranked": 0}}
    lso = evaluate_splits(kb, root, splits=("dev",), leave_source_out=True)["splits"]["dev"]
    reach = {c["id"]: c["reach"] for c in lso["cases"]}
    # the only entry that knows the cause was written from dev-own: without it nothing names that case
    assert reach["dev-own"] == "own" and reach["dev-sibling"] == "named" and reach["dev-unknown-cause"] == "none"
    assert lso["reach"] == {"named": 1, "own": 1, "none": 1, "top1_named_correct": 0, "top1_named": 0.0,
                            "named_misses": {"no_signature": 1, "weak": 0, "abstained": 0, "outranked": 0}}


def test_cli_eval_text_reports_reach(corpus, small_kb, cli):
    code, out = cli(["kb", "eval", str(corpus), "--kb", str(small_kb.patterns), "--split", "test"])
    assert "reach: 1 positives named" in out and "1 by no entry" in out
