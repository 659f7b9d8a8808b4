"""Trainer math on hand-checked examples, and one real GRPO step."""

from __future__ import annotations

import math

import pytest
import torch

from vime.model import TrainLM, tiny_config
from vime.trainer import (
    TrainBatch,
    Trainer,
    TrainerConfig,
    approx_kl,
    grpo_advantages,
    lr_lambda,
    policy_loss,
    sample_mean,
)


def test_grpo_advantages_hand_example():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 4.0])
    adv = grpo_advantages(rewards, 2, std_normalization=False)
    assert adv.tolist() == [0.5, -0.5, 0.0, 0.0, -1.0, 1.0]
    std = grpo_advantages(rewards, 2)
    # group (1, 0): unbiased std = sqrt(0.5); (0.5, 0.5): std 0 -> stays 0; (2, 4): std sqrt(2)
    torch.testing.assert_close(std, torch.tensor([0.5 / (math.sqrt(0.5) + 1e-6), -0.5 / (math.sqrt(0.5) + 1e-6), 0.0, 0.0,
                                                  -1 / (math.sqrt(2) + 1e-6), 1 / (math.sqrt(2) + 1e-6)]))
    assert grpo_advantages(torch.tensor([3.0, 1.0]), 1).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="groups of 4"):
        grpo_advantages(rewards, 4)


def test_policy_loss_clips_with_separate_low_and_high_eps():
    old = torch.zeros(1, 4)
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.1, 0.7]]))  # ratios 1.5, 0.5, 1.1, 0.7
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped, kl = policy_loss(logp, old, adv, eps_clip=0.2, eps_clip_high=0.3)
    # A>0, r=1.5 -> clipped to 1.3: max(-1.5, -1.3) = -1.3 (clipped); A>0, r=0.5: max(-0.5, -0.8) = -0.5
    # A<0, r=1.1: max(1.1, 1.1) = 1.1; A<0, r=0.7 -> 0.8: max(0.7, 0.8) = 0.8 (clipped)
    torch.testing.assert_close(loss, torch.tensor([[-1.3, -0.5, 1.1, 0.8]]))
    assert clipped.tolist() == [[1.0, 0.0, 0.0, 1.0]]
    torch.testing.assert_close(kl, -logp)


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -2.0])
    assert approx_kl(logp, ref, "k1").tolist() == [0.5, 0.0]
    assert approx_kl(logp, ref, "k2").tolist() == [0.125, 0.0]
    torch.testing.assert_close(approx_kl(logp, ref, "low_var_kl"), torch.tensor([math.exp(-0.5) + 0.5 - 1, 0.0]))
    assert approx_kl(torch.tensor([0.0]), torch.tensor([30.0]), "k3").item() == 10.0  # clamped


def test_sample_mean_weighs_each_response_equally():
    x = torch.tensor([[1.0, 3.0, 100.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert sample_mean(x, mask).tolist() == [2.0, 4.0]


def test_lr_schedules():
    cfg = TrainerConfig(lr=1.0, min_lr=0.1, lr_warmup_iters=2, lr_decay_style="linear", lr_decay_iters=6)
    f = lr_lambda(cfg, 6)
    assert [round(f(i), 4) for i in range(7)] == [0.5, 1.0, 1.0, 0.775, 0.55, 0.325, 0.1]
    cos = lr_lambda(TrainerConfig(lr=1.0, lr_decay_style="cosine"), 4)
    assert cos(0) == 1.0 and abs(cos(2) - 0.5) < 1e-12 and cos(4) == 0.0
    with pytest.raises(ValueError, match="kl_loss_type"):
        TrainerConfig(kl_loss_type="k9")


def _batch(model, n=4, samples=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    b = n * samples
    prompt = torch.randint(0, 256, (b, 4), generator=g)
    response = torch.randint(0, 256, (b, 6), generator=g)
    with torch.no_grad():
        logits = model(torch.cat([prompt, response], 1)[:, :-1])[:, 3:]
        lp = logits.log_softmax(-1).gather(-1, response[..., None]).squeeze(-1)
    return TrainBatch(prompt, response, torch.ones(b, 6), lp, torch.rand(b, generator=g), samples)


def test_first_step_has_zero_kl_and_updates_params():
    model = TrainLM(tiny_config())
    trainer = Trainer(model, TrainerConfig(lr=1e-3, global_batch_size=4, use_kl_loss=True, kl_loss_coef=0.1,
                                           entropy_coef=0.01))
    before = [p.detach().clone() for p in model.parameters()]
    rollout, steps = trainer.train_rollout(_batch(model))
    assert len(steps) == 2 and trainer.step == 2
    first = steps[0]
    assert first["train/ppo_kl"] == 0.0 and first["train/kl_loss"] == 0.0 and first["train/pg_clipfrac"] == 0.0
    assert first["train/train_rollout_logprob_abs_diff"] < 1e-6
    assert first["train/grad_norm"] > 0 and steps[1]["train/kl_loss"] > 0  # step 2 sees moved weights
    assert rollout["rollout/log_probs"] == rollout["rollout/ref_log_probs"]
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    expected = {"loss", "pg_loss", "entropy_loss", "pg_clipfrac", "ppo_kl", "kl_loss",
                "train_rollout_logprob_abs_diff", "grad_norm", "lr", "step"}
    assert {k.removeprefix("train/") for k in first} == expected


def test_loss_is_pg_minus_entropy_plus_kl():
    model = TrainLM(tiny_config())
    trainer = Trainer(model, TrainerConfig(lr=1e-3, global_batch_size=8, entropy_coef=0.5))
    _, (step,) = trainer.train_rollout(_batch(model))
    assert step["train/loss"] == pytest.approx(step["train/pg_loss"] - 0.5 * step["train/entropy_loss"], abs=1e-6)


def test_grad_clipping_and_state_round_trip():
    model = TrainLM(tiny_config())
    trainer = Trainer(model, TrainerConfig(lr=1e-2, global_batch_size=8, clip_grad=1e-4))
    trainer.train_rollout(_batch(model))
    total = torch.sqrt(sum(g.pow(2).sum() for g in trainer.last_grads.values()))
    assert total <= 1e-4 * 1.01  # grads are clipped before the step (grad_norm reports the raw norm)
    state = trainer.state_dict()
    clone = Trainer(TrainLM(tiny_config(seed=3)), TrainerConfig(lr=1e-2, global_batch_size=8))
    clone.load_state_dict(state)
    assert clone.step == 1
    assert all(torch.equal(a, b) for a, b in zip(clone.model.parameters(), model.parameters()))
    s1, s2 = clone.optimizer.state_dict()["state"], trainer.optimizer.state_dict()["state"]
    assert all(torch.equal(s1[i]["exp_avg_sq"], s2[i]["exp_avg_sq"]) for i in s2)


def test_rollout_must_split_into_global_batches():
    model = TrainLM(tiny_config())
    with pytest.raises(ValueError, match="global batches of 3"):
        Trainer(model, TrainerConfig(global_batch_size=3)).train_rollout(_batch(model))


def test_grpo_raises_the_reward_it_is_given():
    """End-to-end sign check: engine sampling + GRPO on 'emit tokens with t % 4 == 0' must learn."""
    from vime.convert import iter_hf_weights
    from vime.rollout import RolloutEngine

    config = tiny_config()
    model = TrainLM(config)
    trainer = Trainer(model, TrainerConfig(lr=3e-3, global_batch_size=64))
    engine = RolloutEngine(config)
    engine.init_weight_transfer_engine({})

    def sync():
        engine.start_weight_update()
        engine.update_weights(iter_hf_weights(model))
        engine.finish_weight_update()

    sync()
    g = torch.Generator().manual_seed(0)
    rewards = []
    for rollout_id in range(16):
        prompts = torch.randint(0, 256, (8, 8), generator=g).repeat_interleave(8, 0)
        out = engine.generate(prompts, max_new_tokens=12, rollout_id=rollout_id)
        reward = ((out.response_tokens % 4) == 0).float().mean(-1)
        trainer.train_rollout(TrainBatch(out.prompt_tokens, out.response_tokens, out.loss_mask, out.logprobs, reward, 8))
        sync()
        rewards.append(reward.mean().item())
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.1, rewards


def test_low_precision_trainer_steps_fp32_masters_and_fp16_scales_the_loss():
    import math

    from vime.arguments import parse_args
    from vime.train import run

    for dtype in ("bfloat16", "float16"):
        r = run(parse_args(["--colocate", "--dtype", dtype, "--num-rollout", "3", "--lr", "1e-3", "--rollout-batch-size", "2",
                            "--n-samples-per-prompt", "4", "--rollout-max-response-len", "6", "--ci-test"]), log=lambda _l: None)
        assert all(math.isfinite(s["train/loss"]) and s["train/grad_norm"] > 0 for s in r.step_metrics), dtype


def test_bf16_masters_accumulate_updates_below_half_an_ulp():
    import torch

    from vime.model import TrainLM, tiny_config
    from vime.trainer import Trainer, TrainerConfig

    model = TrainLM(tiny_config()).to(torch.bfloat16)
    trainer = Trainer(model, TrainerConfig(lr=1e-6))
    before = [m.detach().clone() for m in trainer.masters]
    for p, m in zip(model.parameters(), trainer.masters):
        m.grad = torch.ones_like(m)
    trainer.optimizer.step()
    trainer._masters_to_model()
    moved = sum(int((m != b).sum()) for m, b in zip(trainer.masters, before))
    assert moved > 0 and all(m.dtype == torch.float32 for m in trainer.masters)
    assert all(torch.equal(p, m.to(torch.bfloat16)) for p, m in zip(model.parameters(), trainer.masters))
