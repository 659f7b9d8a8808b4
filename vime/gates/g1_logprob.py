"""G1 logprob alignment: after the initial weight sync, the engine's processed log-probs of the tokens
it sampled equal the trainer's forward on the same tokens, within the device/dtype tolerance.

Measured: `train_rollout_logprob_abs_diff` (per-response mean |delta|, averaged over responses, vime's
metric) and the largest per-token |delta|. Also vime's first-step checks: |log_probs - ref_log_probs|
< 1e-8 at rollout 0 (actor = reference), `ppo_kl` and `kl_loss` < 1e-8 at step 0, and the mean
log-prob finite and within [-ln V - 1, 0] (vime's trained-model range does not apply to a random model).

Sampling uses temperature 0.8 so a trainer that forgot the temperature would fail.

Knobs: `perturb_engine` (add this much noise to the engine's lm_head after the sync - a broken
conversion must fail), `attention` (engine attention kernel, e.g. "eager"), `moe` (MoE config),
`temperature`.
"""

from __future__ import annotations

import math

import torch

from vime.gates.common import ZERO_KL, Check, GateOutcome, outcome, tolerance


def run(device: str, dtype: str, *, perturb_engine: float = 0.0, attention: str | None = None,
        moe: bool = False, temperature: float = 0.8) -> GateOutcome:
    from dataclasses import replace

    from vime.convert import iter_hf_weights
    from vime.data import SyntheticPrompts, rule_reward
    from vime.model import TrainLM, tiny_config
    from vime.platform import get_platform
    from vime.rollout.engine import RolloutEngine
    from vime.trainer import TrainBatch, Trainer, TrainerConfig
    from vime.weight_sync import ColocatedSync

    tol = tolerance(device, dtype)
    platform = get_platform(device)
    dev, tdtype = platform.device(), getattr(torch, dtype)
    config = tiny_config(moe=moe)
    model = TrainLM(config).to(device=dev, dtype=tdtype)
    trainer = Trainer(model, TrainerConfig(global_batch_size=16, lr=1e-3, temperature=temperature, keep_ref=True))
    engine_config = replace(config, attention=attention) if attention else config
    engine = RolloutEngine(engine_config, device=dev, dtype=tdtype)
    report = ColocatedSync(engine, packed=True).push(iter_hf_weights(model))
    if not report.ok:
        return GateOutcome("fail", {"sync": report.to_dict()}, reason=f"initial weight sync failed: {report.error}")
    if perturb_engine:
        with torch.no_grad():
            gen = torch.Generator().manual_seed(0)
            w = engine.model.lm_head.weight
            w.add_((torch.randn(w.shape, generator=gen) * perturb_engine).to(w.device, w.dtype))

    prompts = SyntheticPrompts(4, 8, config.vocab_size, seed=7)
    rows = torch.tensor([p.tokens for p in prompts.prompts for _ in range(4)])
    labels = torch.tensor([p.label for p in prompts.prompts for _ in range(4)])
    out = engine.generate(rows, max_new_tokens=16, temperature=temperature, rollout_seed=42, rollout_id=0)
    batch = TrainBatch(
        out.prompt_tokens.cpu(), out.response_tokens.cpu(), out.loss_mask.cpu(), out.logprobs.cpu(),
        rule_reward(out.response_tokens.cpu(), out.loss_mask.cpu(), labels), 4,
    )
    rollout_metrics, steps = trainer.train_rollout(batch)
    step0 = steps[0]
    mean_diff = step0["train/train_rollout_logprob_abs_diff"]
    # largest per-token gap, from the trainer's forward-only log-probs taken before the update
    token_gap = (trainer.last_rollout_tensors["log_probs"] - out.logprobs.to(trainer.device)).abs()
    max_diff = float((token_gap * out.loss_mask.to(trainer.device)).max())
    lp = rollout_metrics["rollout/log_probs"]
    ref_gap = abs(lp - rollout_metrics["rollout/ref_log_probs"])
    low = -math.log(config.vocab_size) - 1
    checks = [
        Check("train_rollout_logprob_abs_diff", mean_diff <= tol.logprob_mean, mean_diff, tol.logprob_mean),
        Check("max_abs_logprob_diff", max_diff <= tol.logprob_max, max_diff, tol.logprob_max),
        Check("log_probs_minus_ref_at_rollout_0", ref_gap < ZERO_KL, ref_gap, ZERO_KL),
        Check("ppo_kl_step_0", abs(step0["train/ppo_kl"]) < ZERO_KL, step0["train/ppo_kl"], ZERO_KL),
        Check("kl_loss_step_0", abs(step0["train/kl_loss"]) < ZERO_KL, step0["train/kl_loss"], ZERO_KL),
        Check("log_probs_range", math.isfinite(lp) and low <= lp <= 0, lp, [round(low, 4), 0]),
    ]
    return outcome(checks, values={"tolerance_note": tol.note, "weight_version": out.weight_version})

