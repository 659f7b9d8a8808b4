"""R3 routing replay: mismatch metric, record/replay plumbing, and replay inside the trainer."""

from __future__ import annotations

import pytest
import torch

from vime import routing_replay as r3


def test_mismatch_counts_expert_sets_not_order():
    a = {0: torch.tensor([[[0, 1], [2, 3], [1, 2]]])}
    b = {0: torch.tensor([[[1, 0], [2, 0], [3, 0]]])}  # same set, one shared, none shared
    m = r3.mismatch(a, b)
    assert m.tokens == 3
    assert m.mismatch_frac == pytest.approx(2 / 3)
    assert m.expert_overlap == pytest.approx((1 + 0.5 + 0) / 3)
    masked = r3.mismatch(a, b, mask=torch.tensor([[1, 0, 0]]))
    assert masked.mismatch_frac == 0.0 and masked.tokens == 1
    assert r3.mismatch(a, a).to_dict()["r3/routing_mismatch_frac"] == 0.0


def test_mismatch_rejects_incomparable_records():
    with pytest.raises(r3.RoutingReplayError, match="layers differ"):
        r3.mismatch({0: torch.zeros(1, 2, 2)}, {1: torch.zeros(1, 2, 2)})
    with pytest.raises(r3.RoutingReplayError, match="layer 0"):
        r3.mismatch({0: torch.zeros(1, 2, 2)}, {0: torch.zeros(1, 3, 2)})


def test_split_and_stack_round_trip():
    rec = {0: torch.arange(24).reshape(2, 6, 2), 1: torch.arange(24).reshape(2, 6, 2) + 1}
    samples = r3.split(rec)
    assert len(samples) == 2 and samples[1][1].shape == (6, 2)
    back = r3.stack(samples[::-1])
    assert torch.equal(back[0], rec[0].flip(0))
    with pytest.raises(r3.RoutingReplayError, match="different token lengths"):
        r3.stack([{0: torch.zeros(3, 2)}, {0: torch.zeros(4, 2)}])
    with pytest.raises(r3.RoutingReplayError, match="layers"):
        r3.stack([{0: torch.zeros(3, 2)}, {1: torch.zeros(3, 2)}])


@pytest.fixture(scope="module")
def moe_rollout():
    from vime.convert import iter_hf_weights
    from vime.model import TrainLM, tiny_config
    from vime.rollout.engine import RolloutEngine

    cfg = tiny_config(moe=True, seed=17)
    model = TrainLM(cfg)
    engine = RolloutEngine(cfg, hf_weights=dict(iter_hf_weights(model)))
    prompts = torch.randint(0, cfg.vocab_size, (4, 6), generator=torch.Generator().manual_seed(0))
    out = engine.generate(prompts, max_new_tokens=8, temperature=1.0, record_routing=True)
    return cfg, model, out


def test_record_covers_the_training_forward(moe_rollout):
    cfg, model, out = moe_rollout
    tokens = out.tokens[:, :-1]
    r3.validate(out.routing, tokens, cfg.num_layers, cfg.num_experts_per_tok)
    with pytest.raises(r3.RoutingReplayError, match="needs"):
        r3.validate(out.routing, out.tokens, cfg.num_layers, cfg.num_experts_per_tok)
    with pytest.raises(r3.RoutingReplayError, match="lacks MoE layers"):
        r3.validate({0: out.routing[0]}, tokens, cfg.num_layers, cfg.num_experts_per_tok)
    # same weights: the trainer routes every token as the rollout did
    assert r3.mismatch(out.routing, r3.capture(model, tokens)).mismatch_frac == 0.0


def test_replay_forces_rollout_routing_after_weights_move(moe_rollout):
    cfg, model, out = moe_rollout
    import copy

    moved = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in moved.named_parameters():
            if name.endswith("router.weight"):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(1)) * p.std() * 2)
    tokens = out.tokens[:, :-1]
    assert r3.mismatch(out.routing, r3.capture(moved, tokens)).mismatch_frac > 0
    replay = r3.replay_for(out.routing, tokens, cfg)
    logits = moved(tokens, routing=replay)
    replay.assert_all_consumed()
    logits.sum().backward()
    assert moved.decoder.layers[0].mlp.router.weight.grad.abs().sum() > 0
    free = moved(tokens)
    assert not torch.allclose(logits, free)  # replay changed which experts computed the output


def test_trainer_replays_recorded_routing(moe_rollout):
    from vime.trainer import TrainBatch, Trainer, TrainerConfig
    import copy

    cfg, model, out = moe_rollout
    batch = TrainBatch(
        prompt_tokens=out.prompt_tokens, response_tokens=out.response_tokens, loss_mask=out.loss_mask,
        rollout_logprobs=out.logprobs, rewards=torch.tensor([0.0, 1.0, 0.5, 0.25]), n_samples_per_prompt=2,
        routing=out.routing,
    )
    trainer = Trainer(copy.deepcopy(model), TrainerConfig(global_batch_size=4, use_rollout_routing_replay=True))
    rollout_metrics, steps = trainer.train_rollout(batch)
    assert steps[0]["train/grad_norm"] > 0
    # same weights as the rollout: the trainer's own routing agrees everywhere
    assert rollout_metrics["rollout/r3_routing_mismatch_frac"] == 0.0
    assert rollout_metrics["rollout/r3_expert_overlap"] == 1.0
    bad = TrainBatch(**{**batch.__dict__, "routing": {k: v[:, :-1] for k, v in out.routing.items()}})
    with pytest.raises(ValueError, match="cannot replay"):
        trainer.train_rollout(bad)
