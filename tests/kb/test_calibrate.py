"""Calibrated confidence: fitted from evidence, monotone in the score, abstains on weak evidence."""

from __future__ import annotations

import json
import math
import random

from porter.kb.calibrate import FEATURES, Calibration, fit, load

from .conftest import LORA_TRACE


def _x(score: float, **over) -> list[float]:
    base = dict(score_logit=math.log(score / (1 - score)), items_hit=math.log1p(1), matched_chars=0.4, competitors=0.0,
                margin=0.3, structured=0.0, max_weight=0.9, entry_record=0.0, bias=1.0)
    base.update(over)
    return [base[f] for f in FEATURES]


def test_fit_recovers_a_monotone_relation_and_keeps_the_score_weight_non_negative():
    rng = random.Random(3)
    samples = []
    for _ in range(300):
        s = rng.uniform(0.5, 0.99)
        samples.append((_x(s), int(rng.random() < s)))
    # adversarial: make high scores look wrong, the constraint must keep the weight >= 0
    inverted = [(x, 1 - y) for x, y in samples]
    for data in (samples, inverted):
        w = fit(data, steps=800)
        assert w[0] >= 0.0
        cal = Calibration(w)
        probs = [cal.probability(_x(s)) for s in (0.55, 0.7, 0.85, 0.95, 0.99)]
        assert probs == sorted(probs), probs  # other evidence held fixed


def test_calibration_file_round_trip_and_feature_mismatch(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(Calibration(tuple(range(len(FEATURES)))).to_dict()))
    assert load(path).weights[1] == 1.0
    path.write_text(json.dumps({"features": ["other"], "weights": [1.0]}))
    assert load(path) is None  # fitted for another feature set: ignored


def test_weak_evidence_abstains_and_scores_are_explained(small_kb, tmp_path):
    from porter.kb.matcher import diagnose_text

    kb = small_kb.compiled()
    kb.calibration = Calibration(tuple(0.0 for _ in FEATURES[:-1]) + (-5.0,), samples=0)  # everything looks unreliable
    diag = diagnose_text(kb, LORA_TRACE)
    assert diag.status == "match" and diag.top.confidence < 0.3  # too few fitting samples to abstain on
    kb.calibration = Calibration(tuple(0.0 for _ in FEATURES[:-1]) + (-5.0,), samples=500)
    diag = diagnose_text(kb, LORA_TRACE)
    assert diag.status == "unknown" and diag.near_misses and "calibrated" in diag.near_misses[0].explain
    kb.calibration = Calibration((2.0,) + tuple(0.0 for _ in FEATURES[1:-1]) + (1.0,))
    diag = diagnose_text(kb, LORA_TRACE)
    assert diag.top.entry.id == "VLLM-001" and diag.top.explain["score"] >= 0.5 and diag.top.confidence == diag.top.explain["calibrated"]


def test_calibrate_command_uses_dev_only(cli, small_kb, tmp_path):
    from .test_corpus_eval import _case

    root = tmp_path / "corpus"
    _case(root, "dev", "dev-lora", LORA_TRACE, expected=["VLLM-001"])
    _case(root, "test", "test-lora", LORA_TRACE, expected=["VLLM-001"])
    code, out = cli(["kb", "calibrate", str(root), "--kb", str(small_kb.patterns), "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["cases"] == 1 and [r["id"] for r in doc["records"]] == ["dev-lora"]


def test_calibrate_refuses_a_held_out_corpus_and_drops_test_threads_of_extra_corpora(cli, small_kb, tmp_path):
    """`--also` never brings held-out material into the fit: a corpus directory named heldout/test
    is refused (exit 2), and an index corpus' cases whose source thread hashes to test are left out."""
    from porter.kb.corpus import split_of

    from .test_corpus_eval import _case

    root = tmp_path / "corpus"
    _case(root, "dev", "dev-lora", LORA_TRACE, expected=["VLLM-001"])
    held = tmp_path / "heldout"
    held.mkdir()
    (held / "a.txt").write_text(LORA_TRACE)
    (held / "index.yaml").write_text("cases:\n- {file: a.txt, expected: [VLLM-001]}\n")
    code, out = cli(["kb", "calibrate", str(root), "--also", str(held), "--kb", str(small_kb.patterns), "--json"])
    assert code == 2 and "held-out" in out
    threads = {split_of(f"github.com/o/r/issues/{n}"): f"https://github.com/o/r/issues/{n}" for n in range(1, 40)}
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "d.txt").write_text(LORA_TRACE)
    (seed / "t.txt").write_text(LORA_TRACE)
    (seed / "index.yaml").write_text("cases:\n"
                                     f"- {{file: d.txt, expected: [VLLM-001], source: '{threads['dev']}'}}\n"
                                     f"- {{file: t.txt, expected: [VLLM-001], source: '{threads['test']}'}}\n")
    code, out = cli(["kb", "calibrate", str(root), "--also", str(seed), "--kb", str(small_kb.patterns), "--json"])
    doc = json.loads(out)
    assert code == 0 and sorted(r["id"] for r in doc["records"]) == ["d.txt", "dev-lora"]
