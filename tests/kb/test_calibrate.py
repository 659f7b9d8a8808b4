"""Calibrated confidence: fitted from evidence, monotone in the score, abstains on weak evidence."""

from __future__ import annotations

import json
import math
import random

from porter.kb.calibrate import FEATURES, Calibration, fit, load

from .conftest import LORA_TRACE


def _x(score: float, **over) -> list[float]:
    base = dict(score_logit=math.log(score / (1 - score)), items_hit=math.log1p(1), competitors=0.0, structured=0.0,
                agree=0.0, disagree=0.0, conj=0.0, bias=1.0)
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


def test_l2_is_chosen_by_cross_validation_over_threads():
    from porter.kb.calibrate import DEFAULT_L2, choose_l2, fit_model

    rng = random.Random(5)
    strong, noise, groups = [], [], []
    for i in range(60):
        s = rng.uniform(0.02, 0.98)
        strong.append((_x(s), int(s > 0.5), f"E-{i % 7}"))  # the score decides the outcome
        noise.append((_x(s), int(rng.random() < 0.5), f"E-{i % 7}"))  # nothing does
        groups.append(f"github.com/example/t/issues/{i}")
    low, losses = choose_l2(strong, groups, grid=(0.001, 0.3), steps=200)
    assert low == 0.001 and len(losses) == 2 and losses[0][1] < losses[1][1]
    high, _ = choose_l2(noise, groups, grid=(0.001, 0.3), steps=200)
    assert high == 0.3
    # too few samples to rank penalties: the default, no search
    assert choose_l2(strong[:10], groups[:10], grid=(0.001, 0.3), steps=200) == (DEFAULT_L2, ())
    model = fit_model(strong[:10], "synthetic", groups[:10])
    assert model.l2 == DEFAULT_L2 and model.to_dict()["l2"] == DEFAULT_L2


def test_calibration_file_keeps_the_chosen_penalty(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(Calibration(tuple(0.0 for _ in FEATURES), l2=0.003, cv_log_loss=((0.003, 0.4),)).to_dict()))
    loaded = load(path)
    assert loaded is not None and loaded.l2 == 0.003


def test_out_of_fold_confidence_comes_from_models_that_never_saw_the_thread():
    from porter.kb.calibrate import fold_of, out_of_fold, reliability

    # the outcome is a coin per thread and the evidence is the same everywhere: a fold's model can only
    # learn its training folds' base rate, so each held-out fold gets one confidence
    rng = random.Random(7)
    samples, groups = [], []
    for i in range(60):
        y = int(rng.random() < 0.5)
        for _ in range(2):
            samples.append((_x(0.6), y, f"E-{i}"))
            groups.append(f"github.com/example/t/issues/{i}")
    held = out_of_fold(samples, groups, l2=0.001, steps=200)
    assert len(held) == len(samples)
    assert len({round(p, 6) for p, _ in held}) == len({fold_of(g) for g in groups})
    rows = reliability(held)
    assert sum(r["answers"] for r in rows) == len(samples) and rows[0]["bucket"] == "0.0-0.5"


def test_features_carry_across_threads_not_per_entry():
    """No feature names an entry: agreement between entries on the cause and co-occurring required
    items are what the model sees."""
    from types import SimpleNamespace as NS

    from porter.kb.calibrate import features

    def sig(form="regex", weight=0.5, required=False):
        return NS(form=form, weight=weight, required=required)

    def match(eid, causes, sigs, hit, conf=0.7, how="any"):
        entry = NS(id=eid, causes=tuple(causes), signatures=sigs, match=how)
        return NS(entry=entry, confidence=conf, explain={"hit": hit})

    top = match("A-1", ["drift"], [sig(weight=0.3, required=True), sig("template", 0.4, True)], [0, 1], how="all")
    same = match("B-2", ["drift"], [sig()], [0])
    other = match("C-3", ["oom"], [sig()], [0])
    f = dict(zip(FEATURES, features(top, [top, same, other])))
    assert "entry_record" not in FEATURES
    assert f["agree"] == math.log1p(1) and f["disagree"] == math.log1p(1) and f["competitors"] == math.log1p(2)
    assert f["conj"] == 1.0 and f["structured"] == 1.0
    assert not {"entry_record", "max_weight", "hit_weight"} & set(FEATURES)  # no authored weight beyond the score
    # the same evidence from another entry id gives the same features
    renamed = match("Z-9", ["drift"], top.entry.signatures, [0, 1], how="all")
    assert features(renamed, [renamed, same, other]) == list(f.values())
    # one required item alone is no conjunction; without signals the log-level features are 0
    lone = match("A-1", ["drift"], top.entry.signatures, [1], how="all")
    g = dict(zip(FEATURES, features(lone, [lone])))
    assert g["conj"] == 0.0 and g["agree"] == 0.0


def test_calibrate_command_reports_cross_validated_reliability(cli, small_kb, tmp_path, monkeypatch):
    from porter.kb import calibrate

    from .test_corpus_eval import _case

    monkeypatch.setattr(calibrate, "MIN_SAMPLES_TO_CHOOSE_L2", 1)
    root = tmp_path / "corpus"
    for n in range(3):
        _case(root, "dev", f"dev-lora-{n}", LORA_TRACE, expected=["VLLM-001"])
    code, out = cli(["kb", "calibrate", str(root), "--kb", str(small_kb.patterns), "--json"])
    doc = json.loads(out)
    assert code == 0 and sum(b["answers"] for b in doc["cross_validated_reliability"]) == 3
