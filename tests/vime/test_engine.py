"""Rollout engine: reproducible per-sample sampling, KV-cache log-probs = full forward, processed
log-probs, control verbs, staged weight updates that fail closed, fingerprints."""

from __future__ import annotations

import pytest
import torch

from vime.convert import iter_hf_weights
from vime.model import TrainLM, response_logprobs, tiny_config
from vime.rollout import EngineStateError, RolloutEngine, WeightCheckError, WeightUpdateError, fingerprint
from vime.rollout.sampling import process_logits, sample, sample_seed


def _engine(config=None, seed=1234):
    config = config or tiny_config(seed=seed)
    model = TrainLM(config)
    return model, RolloutEngine(config, hf_weights=dict(iter_hf_weights(model)))


def _prompts(b=6, p=5, seed=0):
    return torch.randint(0, 256, (b, p), generator=torch.Generator().manual_seed(seed))


def test_sampling_is_reproducible_per_sample_and_batch_independent():
    _, engine = _engine()
    prompts = _prompts()
    kw = dict(max_new_tokens=10, temperature=1.0, rollout_seed=3, rollout_id=2)
    a = engine.generate(prompts, **kw)
    b = engine.generate(prompts, **kw)
    assert torch.equal(a.response_tokens, b.response_tokens) and torch.equal(a.logprobs, b.logprobs)
    sub = engine.generate(prompts[[4, 1]], sample_indices=[4, 1], **kw)
    assert torch.equal(sub.response_tokens, a.response_tokens[[4, 1]])
    other = engine.generate(prompts, **{**kw, "rollout_id": 3})
    assert not torch.equal(other.response_tokens, a.response_tokens)
    assert sample_seed(3, 2, 0) != sample_seed(3, 2, 1) != sample_seed(3, 3, 1)


def test_engine_logprobs_equal_full_forward_of_the_trainer():
    model, engine = _engine(tiny_config(num_kv_heads=2))
    out = engine.generate(_prompts(), max_new_tokens=12, temperature=0.7, rollout_seed=1)
    full = out.tokens
    logits = model(full[:, :-1])[:, out.prompt_tokens.shape[1] - 1 :]
    expected, _ = response_logprobs(logits, out.response_tokens, 0.7)
    torch.testing.assert_close(out.logprobs, expected.detach(), rtol=0, atol=2e-6)
    torch.testing.assert_close(engine.compute_logprobs(out.prompt_tokens, out.response_tokens, 0.7), expected.detach(), rtol=0, atol=2e-6)


def test_greedy_is_argmax_of_full_forward():
    model, engine = _engine()
    out = engine.generate(_prompts(3), max_new_tokens=6, temperature=0.0)
    full = out.tokens
    logits = model(full[:, :-1])[:, 4:]
    assert torch.equal(logits.argmax(-1), out.response_tokens)


def test_processed_logprobs_follow_top_k_and_top_p():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]])
    lp = process_logits(logits, temperature=1.0, top_k=2)
    assert torch.isinf(lp[0, 2:]).all() and torch.isclose(lp.exp().sum(), torch.tensor(1.0))
    p = logits.softmax(-1)[0]  # ~[0.61, 0.22, 0.14, ...]: top_p 0.7 keeps the first two
    lp = process_logits(logits, temperature=1.0, top_p=0.7)
    assert torch.isfinite(lp[0, :2]).all() and torch.isinf(lp[0, 2:]).all()
    assert p[0] < 0.7 < p[0] + p[1]
    torch.testing.assert_close(process_logits(logits, 2.0), (logits / 2).log_softmax(-1))
    gens = [torch.Generator().manual_seed(i) for i in range(200)]
    draws = sample(process_logits(logits.repeat(200, 1), 1.0, top_k=2), gens)
    assert set(draws.tolist()) == {0, 1}


def test_engine_top_k_sampling_stays_in_top_k():
    model, engine = _engine()
    out = engine.generate(_prompts(4), max_new_tokens=5, top_k=3, rollout_seed=9)
    logits = model(out.tokens[:, :-1])[:, 4:]
    top3 = logits.topk(3, dim=-1).indices
    assert (top3 == out.response_tokens[..., None]).any(-1).all()


def test_eos_masks_the_rest_of_the_response():
    _, engine = _engine()
    first = engine.generate(_prompts(4), max_new_tokens=8, rollout_seed=5)
    eos = int(first.response_tokens[0, 2])
    out = engine.generate(_prompts(4), max_new_tokens=8, rollout_seed=5, eos_token_id=eos, pad_token_id=0)
    stop = (first.response_tokens[0] == eos).nonzero()[0].item()
    assert out.loss_mask[0].tolist() == [1.0] * (stop + 1) + [0.0] * (7 - stop)
    assert out.response_tokens[0, stop + 1 :].eq(0).all() and out.logprobs[0, stop + 1 :].eq(0).all()
    assert out.response_lengths[0] == stop + 1


def test_pause_sleep_and_wake():
    _, engine = _engine()
    engine.pause_generation()
    with pytest.raises(EngineStateError, match="paused"):
        engine.generate(_prompts(1), max_new_tokens=2)
    engine.continue_generation()
    before = engine.generate(_prompts(2), max_new_tokens=3)
    params = list(engine.model.parameters())
    engine.sleep(1)
    assert [id(p) for p in engine.model.parameters()] == [id(p) for p in params]  # same Parameter objects
    with pytest.raises(EngineStateError, match="asleep"):
        engine.generate(_prompts(1), max_new_tokens=2)
    engine.wake_up()
    after = engine.generate(_prompts(2), max_new_tokens=3)
    assert torch.equal(before.response_tokens, after.response_tokens)
    engine.sleep(2)
    engine.wake_up()
    with pytest.raises(EngineStateError, match="no weights"):
        engine.generate(_prompts(1), max_new_tokens=2)
    with pytest.raises(EngineStateError, match="tags"):
        engine.wake_up(("everything",))


def _update(engine, model, drop=None, version=None):
    engine.start_weight_update()
    engine.update_weights([(n, t) for n, t in iter_hf_weights(model) if n != drop])
    return engine.finish_weight_update(version)


def test_weight_update_promotes_version_and_receiver_owns_storage():
    model, engine = _engine()
    with pytest.raises(EngineStateError, match="no weight update"):
        engine.get_weight_version()
    with pytest.raises(EngineStateError, match="init_weight_transfer_engine"):
        engine.start_weight_update()
    engine.init_weight_transfer_engine({})
    new = TrainLM(tiny_config(seed=99))
    assert _update(engine, new) == 1 and engine.get_weight_version() == 1
    with torch.no_grad():
        for p in new.parameters():
            p.add_(1.0)  # the sender reuses its storage: the engine must not see it
    torch.testing.assert_close(engine.named_weights()["lm_head.weight"], new.output_layer.weight - 1.0)
    assert _update(engine, new, version=7) == 7
    assert engine.events[:2] == ["load_hf_weights", "init_weight_transfer_engine"]


def test_failed_update_keeps_old_weights_and_version():
    model, engine = _engine()
    engine.init_weight_transfer_engine({})
    _update(engine, model)
    before = {n: t.clone() for n, t in engine.named_weights().items()}
    other = TrainLM(tiny_config(seed=5))
    with pytest.raises(WeightUpdateError, match="1 of .* parameters not updated"):
        _update(engine, other, drop="model.norm.weight")
    assert engine.get_weight_version() == 1
    assert all(torch.equal(before[n], t) for n, t in engine.named_weights().items())
    engine.start_weight_update()
    with pytest.raises(WeightUpdateError, match="unknown parameter"):
        engine.update_weights({"model.nope.weight": torch.zeros(1)})
    with pytest.raises(EngineStateError, match="outside"):
        engine.update_weights({})  # the bad chunk closed the update
    engine.start_weight_update()
    with pytest.raises(WeightUpdateError, match="shape"):
        engine.update_weights({"lm_head.weight": torch.zeros(3, 3)})
    engine.abort_weight_update()
    assert engine.get_weight_version() == 1
    assert torch.equal(before["lm_head.weight"], engine.named_weights()["lm_head.weight"])


def test_check_weights_snapshot_compare():
    model, engine = _engine()
    engine.init_weight_transfer_engine({})
    engine.check_weights("snapshot")
    _update(engine, model)  # same weights: exact
    assert engine.check_weights("compare")["changed"] == 0
    model.output_layer.weight.data[0, 0] += 1e-7
    _update(engine, model)
    with pytest.raises(WeightCheckError, match="'changed': 1"):
        engine.check_weights("compare")
    engine.check_weights("reset")
    with pytest.raises(EngineStateError, match="without a snapshot"):
        engine.check_weights("compare")


def test_fingerprint_sees_single_bit_changes():
    t = torch.randn(300, 70)
    u = t.clone()
    u.view(-1)[12345] = torch.nextafter(u.view(-1)[12345], torch.tensor(10.0))
    assert fingerprint(t) == fingerprint(t.clone())
    assert fingerprint(t) != fingerprint(u)
    assert fingerprint(t)[:3] == ((300, 70), "torch.float32", 300 * 70 * 4)


def test_prompt_validation():
    _, engine = _engine()
    with pytest.raises(ValueError, match="share a length"):
        engine.generate([[1, 2], [3]], max_new_tokens=2)
    out = engine.generate([[1, 2], [3, 4]], max_new_tokens=2)
    assert out.response_tokens.shape == (2, 2)


def test_recorded_routing_covers_the_trainer_input_and_replays():
    from vime.model import RoutingReplay

    model, engine = _engine(tiny_config(moe=True))
    out = engine.generate(_prompts(3, 4), max_new_tokens=5, record_routing=True)
    assert set(out.routing) == {0, 1} and out.routing[0].shape == (3, 4 + 5 - 1, 2)
    replay = RoutingReplay("replay", out.routing)
    model(out.tokens[:, :-1], routing=replay)
    replay.assert_all_consumed()
    assert out.stats["new_tokens"] == 15 and out.stats["seconds"] > 0
