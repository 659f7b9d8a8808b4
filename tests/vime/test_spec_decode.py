"""Speculative decoding: config validation, verification rules, engine seam, --draft-save-hf export."""

from __future__ import annotations

import json

import pytest
import torch

from vime.spec_decode import (
    DraftModelProposer,
    NgramProposer,
    Sampler,
    SpeculativeConfigError,
    SpeculativeSetup,
    export_draft_hf,
    parse_speculative_config,
    validate_draft_save_hf,
    verify_greedy,
    verify_sampled,
)


# ----------------------------------------------------------------------------- config


def test_parse_valid_configs():
    cfg = parse_speculative_config('{"method": "dspark", "model": "/m", "num_speculative_tokens": 4}')
    assert (cfg.method, cfg.model, cfg.num_speculative_tokens, cfg.draft_tensor_parallel_size) == ("dspark", "/m", 4, 1)
    assert parse_speculative_config({"method": "mtp", "num_speculative_tokens": 1}).model is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON: .* line 1 column 2"),
        ("3", "must be a JSON object"),
        ('{"method": "ngram", "num_speculative_tokens": -1}', "'num_speculative_tokens' must be >= 1, got -1"),
        ('{"method": "ngram", "num_speculative_tokens": 2.5}', "must be an integer >= 1, got 2.5"),
        ('{"method": "Eagle", "num_speculative_tokens": 2}', 'method "Eagle" is not one of'),
        ('{"method": "draft_model", "num_speculative_tokens": 2}', "needs 'model'"),
        ('{"method": "eagle", "model": "", "num_speculative_tokens": 2}', "non-empty path"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "modle": "x"}', "unknown key 'modle'; did you mean 'model'"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4}', "prompt_lookup_min \\(4\\) > prompt_lookup_max"),
        ('{"method": "dspark", "model": "/m", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2}', "not supported"),
    ],
)
def test_parse_errors_are_precise(text, message):
    with pytest.raises(SpeculativeConfigError, match=message):
        parse_speculative_config(text)


# ----------------------------------------------------------------------------- --draft-save-hf


def test_draft_save_hf_rules(tmp_path):
    dspark = parse_speculative_config({"method": "dspark", "model": str(tmp_path / "d"), "num_speculative_tokens": 2})
    ngram = parse_speculative_config({"method": "ngram", "num_speculative_tokens": 2})
    ok = str(tmp_path / "out-{rollout_id}")
    validate_draft_save_hf(ok, spec=dspark, save_hf=str(tmp_path / "actor-{rollout_id}"))
    validate_draft_save_hf(ok, spec=ngram, enable_external_draft_training=True)
    with pytest.raises(SpeculativeConfigError, match="method 'dspark'"):
        validate_draft_save_hf(ok, spec=ngram)
    with pytest.raises(SpeculativeConfigError, match="no speculative config"):
        validate_draft_save_hf(ok, spec=None)
    with pytest.raises(SpeculativeConfigError, match="has no \\{rollout_id\\}"):
        validate_draft_save_hf(str(tmp_path / "fixed"), spec=dspark)
    with pytest.raises(SpeculativeConfigError, match="cannot be formatted"):
        validate_draft_save_hf(str(tmp_path / "x-{step}"), spec=dspark)
    with pytest.raises(SpeculativeConfigError, match="draft model path"):
        validate_draft_save_hf(str(tmp_path / "d{rollout_id}")[:-len("{rollout_id}")] + "{rollout_id}", spec=dspark,
                               draft_model_path=str(tmp_path / "d0"))
    with pytest.raises(SpeculativeConfigError, match="--save-hf"):
        validate_draft_save_hf(ok, spec=dspark, save_hf=ok)


def test_export_is_atomic_and_replaces(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    state = {"w": torch.arange(6.0).reshape(2, 3)}
    out = export_draft_hf(tmp_path / "draft-1", {"architectures": ["X"]}, state)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert torch.equal(load_file(str(out / "model.safetensors"))["w"], state["w"])
    export_draft_hf(tmp_path / "draft-1", {"architectures": ["Y"]}, {"w": torch.zeros(2, 3)})
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Y"]

    import safetensors.torch as st

    def broken_save(tensors, path, metadata=None):
        open(path, "wb").write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(st, "save_file", broken_save)
    with pytest.raises(OSError, match="disk full"):
        export_draft_hf(tmp_path / "draft-2", {}, state)
    assert not (tmp_path / "draft-2").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # the earlier export is untouched by the failed one
    assert json.loads((out / "config.json").read_text())["architectures"] == ["Y"]


# ----------------------------------------------------------------------------- verification rules


def test_verify_greedy_keeps_matching_prefix_then_corrects():
    logits = torch.full((1, 4, 5), -1.0)
    for pos, tok in enumerate([2, 3, 1, 4]):
        logits[0, pos, tok] = 1.0  # target argmax per position
    draft = torch.tensor([[2, 3, 0]])
    tokens, n_acc = verify_greedy(draft, torch.tensor([3]), logits)
    assert n_acc.item() == 2 and tokens[0, :3].tolist() == [2, 3, 1]
    tokens, n_acc = verify_greedy(torch.tensor([[2, 3, 1]]), torch.tensor([3]), logits)
    assert n_acc.item() == 3 and tokens[0].tolist() == [2, 3, 1, 4]  # bonus token
    tokens, n_acc = verify_greedy(torch.tensor([[2, 3, 1]]), torch.tensor([1]), logits)
    assert n_acc.item() == 1 and tokens[0, :2].tolist() == [2, 3]  # fewer drafts than k


def test_verify_sampled_acceptance_rule_and_residual():
    p = torch.tensor([[[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]])
    q = torch.tensor([[[0.2, 0.6, 0.2]]])
    draft = torch.tensor([[1]])  # p/q = 0.5 -> accept iff u < 0.5
    tokens, n_acc = verify_sampled(draft, torch.tensor([1]), q, p, torch.tensor([[0.49, 0.95]], dtype=torch.float64))
    assert n_acc.item() == 1 and tokens[0].tolist() == [1, 2]  # bonus drawn from p[1] by inverse CDF (u=0.95)
    tokens, n_acc = verify_sampled(draft, torch.tensor([1]), q, p, torch.tensor([[0.51, 0.99]], dtype=torch.float64))
    # rejected: residual = max(0, p - q) = [0.3, 0, 0] -> token 0 whatever u
    assert n_acc.item() == 0 and tokens[0, 0].item() == 0


def test_rejection_sampling_reproduces_target_marginal():
    torch.manual_seed(0)
    n, v = 40000, 4
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    q = torch.tensor([0.4, 0.3, 0.2, 0.1])
    draft = torch.multinomial(q, n, replacement=True).unsqueeze(1)
    tokens, _ = verify_sampled(draft, torch.ones(n, dtype=torch.long), q.expand(n, 1, v), p.expand(n, 2, v),
                               torch.rand(n, 2, dtype=torch.float64))
    freq = torch.bincount(tokens[:, 0], minlength=v).double() / n
    assert torch.allclose(freq, p.double(), atol=0.01)
    biased, _ = verify_sampled(draft, torch.ones(n, dtype=torch.long), q.expand(n, 1, v), p.expand(n, 2, v),
                               torch.rand(n, 2, dtype=torch.float64), fault="no_residual")
    assert not torch.allclose(torch.bincount(biased[:, 0], minlength=v).double() / n, p.double(), atol=0.01)


def test_ngram_lookup():
    prop = NgramProposer(max_n=2, min_n=1)
    assert prop.lookup([5, 6, 7, 8, 5, 6], 3) == [7, 8, 5]
    assert prop.lookup([1, 2, 3], 2) == []
    tokens = torch.tensor([[5, 6, 7, 5, 6, 0, 0]])
    draft, n_draft, q = prop.propose(tokens, torch.tensor([5]), 2, Sampler(0.0), [])
    assert draft.tolist() == [[7, 5]] and n_draft.tolist() == [2] and q is None


# ----------------------------------------------------------------------------- engine seam


@pytest.fixture(scope="module")
def engine_pair():
    from vime.convert import iter_hf_weights
    from vime.model import TrainLM, tiny_config
    from vime.rollout.engine import RolloutEngine

    cfg = tiny_config(seed=21)
    hf = dict(iter_hf_weights(TrainLM(cfg)))
    gen = torch.Generator().manual_seed(0)
    near = {n: t + 0.05 * t.std() * torch.randn(t.shape, generator=gen) if t.dim() > 1 else t for n, t in hf.items()}
    return RolloutEngine(cfg, hf_weights=hf), RolloutEngine(cfg, hf_weights=near), cfg, near


def test_greedy_identical_with_and_without_speculation(engine_pair):
    target, draft, cfg, _ = engine_pair
    prompts = torch.randint(0, cfg.vocab_size, (5, 7), generator=torch.Generator().manual_seed(1))
    plain = target.generate(prompts, max_new_tokens=20, temperature=0)
    for proposer in (NgramProposer(), DraftModelProposer(lambda t: draft.model(t))):
        setup = SpeculativeSetup(parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 3}'), proposer)
        out = target.generate(prompts, max_new_tokens=20, temperature=0, speculative=setup)
        assert torch.equal(out.response_tokens, plain.response_tokens)
        assert torch.allclose(out.logprobs, plain.logprobs, atol=1e-5)
        assert torch.equal(out.loss_mask, plain.loss_mask)
    assert out.stats["spec_decode"]["accepted"] > 0


def test_json_config_loads_draft_checkpoint(engine_pair, tmp_path):
    from vime.convert import save_hf

    target, _, cfg, near = engine_pair
    save_hf(tmp_path / "draft", near, cfg)
    text = json.dumps({"method": "eagle", "model": str(tmp_path / "draft"), "num_speculative_tokens": 2})
    prompts = torch.randint(0, cfg.vocab_size, (3, 5), generator=torch.Generator().manual_seed(2))
    out = target.generate(prompts, max_new_tokens=10, temperature=0, speculative=text)
    assert torch.equal(out.response_tokens, target.generate(prompts, max_new_tokens=10, temperature=0).response_tokens)
    stats = out.stats["spec_decode"]
    assert stats["method"] == "eagle" and 0 < stats["acceptance_rate"] <= 1
    missing = json.dumps({"method": "eagle", "model": str(tmp_path / "nope"), "num_speculative_tokens": 2})
    with pytest.raises(SpeculativeConfigError, match="no model.safetensors"):
        target.generate(prompts, max_new_tokens=4, speculative=missing)


def test_sampled_speculation_is_per_sample_deterministic_and_stops_at_eos(engine_pair):
    target, draft, cfg, _ = engine_pair
    setup = SpeculativeSetup(parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 3}'),
                             DraftModelProposer(lambda t: draft.model(t)))
    prompts = torch.randint(0, cfg.vocab_size, (4, 6), generator=torch.Generator().manual_seed(3))
    a = target.generate(prompts, max_new_tokens=12, temperature=1.0, rollout_id=5, speculative=setup)
    b = target.generate(prompts[1:2], max_new_tokens=12, temperature=1.0, rollout_id=5, sample_indices=[1], speculative=setup)
    assert torch.equal(a.response_tokens[1:2], b.response_tokens)  # a sample does not depend on its batch
    eos = int(a.response_tokens[0, 3])
    c = target.generate(prompts[:1], max_new_tokens=12, temperature=1.0, rollout_id=5, eos_token_id=eos, speculative=setup)
    first = c.response_tokens[0].tolist().index(eos)
    assert c.loss_mask[0, : first + 1].all() and not c.loss_mask[0, first + 1 :].any()
    stats = a.stats["spec_decode"]
    assert stats["emitted"] == int(a.loss_mask.sum()) and stats["accepted"] <= stats["proposed"]


def test_export_draft_for_rollout_republishes_the_draft(tmp_path):
    from safetensors.torch import load_file

    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config
    from vime.spec_decode import export_draft_for_rollout

    src = save_train_model_hf(tmp_path / "draft", TrainLM(tiny_config(num_layers=1, seed=2)))
    spec = parse_speculative_config({"method": "dspark", "model": str(src), "num_speculative_tokens": 2})
    out = export_draft_for_rollout(str(tmp_path / "dspark-{rollout_id}"), 4, spec)
    assert out.name == "dspark-4"
    assert json.loads((out / "config.json").read_text()) == json.loads((src / "config.json").read_text())
    a, b = load_file(str(out / "model.safetensors")), load_file(str(src / "model.safetensors"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(SpeculativeConfigError, match="lacks config.json"):
        export_draft_for_rollout(str(tmp_path / "x-{rollout_id}"), 0,
                                 parse_speculative_config({"method": "dspark", "model": str(tmp_path), "num_speculative_tokens": 1}))


def test_greedy_with_eos_matches_plain_engine(engine_pair):
    target, draft, cfg, _ = engine_pair
    prompts = torch.randint(0, cfg.vocab_size, (4, 6), generator=torch.Generator().manual_seed(4))
    first = target.generate(prompts, max_new_tokens=16, temperature=0)
    eos = int(first.response_tokens[0, 5])  # a token row 0 emits mid-way
    plain = target.generate(prompts, max_new_tokens=16, temperature=0, eos_token_id=eos, pad_token_id=1)
    setup = SpeculativeSetup(parse_speculative_config('{"method": "ngram", "num_speculative_tokens": 4}'),
                             DraftModelProposer(lambda t: draft.model(t)))
    spec = target.generate(prompts, max_new_tokens=16, temperature=0, eos_token_id=eos, pad_token_id=1, speculative=setup)
    assert plain.loss_mask[0].sum() < 16  # the eos really cut row 0 short
    assert torch.equal(spec.response_tokens, plain.response_tokens)
    assert torch.equal(spec.loss_mask, plain.loss_mask)
    assert torch.allclose(spec.logprobs, plain.logprobs, atol=1e-5)


def test_kv_cached_decode_equals_the_recompute_reference():
    import torch

    from vime.convert import iter_hf_weights
    from vime.model import TrainLM, tiny_config
    from vime.rollout.engine import RolloutEngine
    from vime.rollout.sampling import make_generators
    from vime.spec_decode import DraftModelProposer, Sampler, decode

    cfg = tiny_config(vocab_size=32, num_kv_heads=2)
    target = RolloutEngine(cfg, hf_weights={n: t.detach().clone() for n, t in iter_hf_weights(TrainLM(cfg))})
    draft = RolloutEngine(cfg, hf_weights={n: t.detach() * 1.1 for n, t in iter_hf_weights(TrainLM(cfg))})
    prompts = torch.randint(0, 32, (6, 5), generator=torch.Generator().manual_seed(1))
    for sampler in (Sampler(0.0), Sampler(1.0)):
        out = []
        for tgt, prop in ((target.model, DraftModelProposer(draft.model)),
                          (lambda t: target.model(t), DraftModelProposer(lambda t: draft.model(t)))):
            out.append(decode(tgt, prop, prompts, k=3, max_new_tokens=10, sampler=sampler,
                              generators=make_generators(42, 0, range(6)), eos_token_id=7))
        assert torch.equal(out[0].tokens, out[1].tokens) and torch.equal(out[0].mask, out[1].mask)
        assert float((out[0].logprobs - out[1].logprobs).abs().max()) < 1e-5
        assert out[0].stats.accepted == out[1].stats.accepted


def test_speculative_decoding_does_not_import_the_engine():
    import subprocess
    import sys

    code = "import sys, vime.spec_decode; assert 'vime.rollout.engine' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
