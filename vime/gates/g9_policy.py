"""G9 policy objective: the trainer's GRPO advantages, PPO clipped loss and its gradient equal an
independent float64 reference on an *off-policy* batch where clipping is active on both sides, and
an on-policy step moves the policy toward positive-advantage samples.

Batch: the engine samples 4 prompts x 4 responses; responses get different lengths (masks), and the
old log-probs the trainer is given (`use_rollout_logprobs`) are the current policy's shifted by
seeded offsets in [-0.6, 0.6], so ratios fall outside [1 - eps_clip, 1 + eps_clip_high] with both
advantage signs. The reference, written here from the formulas (not vime.trainer):
  A_i = (r_i - mean_g) / (std_g (unbiased) + 1e-6) per group of n samples;
  ratio = exp(logp - old); token loss = max(-A ratio, -A clip(ratio, 1 - eps, 1 + eps_high));
  pg_loss = mean over responses of the masked token mean; loss = pg_loss - entropy_coef * entropy,
and it is differentiated by autograd on a float64 copy of the model taken before the step.
Checked: advantages, pg_loss, clip fraction (share of tokens where the clipped term binds, per
response, averaged), and the gradient (relative L2 error and cosine) against the reference; the
reference clip fraction is in (0.1, 0.9) and some ratios lie beyond each bound (else clipping
would not be exercised). Then an on-policy GRPO step with a small learning rate must raise
sum_i A_i * (mean log-prob change of response i) above 0 (a sign error in the advantages or the
loss makes it negative).

Tolerances (measured on CPU in brackets): float32 - loss 1e-5 relative (5e-8), gradient relative L2
error 1e-4 (4.7e-7), cosine >= 0.9999; bf16 - the trainer's forward rounds activations to 8 bits, so
its ratios carry ~2^-8 relative error: loss 2e-3 (3e-5), gradient 0.05 (5.4e-3), cosine >= 0.999
(0.99999); fp16 (3 more mantissa bits): loss 1e-3, gradient 0.02, cosine >= 0.9995. A negated
advantage flips the gradient (cosine -1), a removed clip changes the loss by the clipped share
(> 10% here).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from vime.gates.common import Check, GateOutcome, outcome

EPS_CLIP, EPS_CLIP_HIGH, ENTROPY_COEF = 0.2, 0.28, 0.01
PROMPTS, SAMPLES, NEW_TOKENS = 4, 4, 12
TOLS = {"float32": (1e-5, 1e-4, 0.9999), "bfloat16": (2e-3, 0.05, 0.999), "float16": (1e-3, 0.02, 0.9995)}


def reference_advantages(rewards: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.empty(rewards.numel(), dtype=torch.float64)
    r = rewards.double().tolist()
    for g in range(0, len(r), n):
        group = r[g : g + n]
        mean = sum(group) / n
        std = (sum((x - mean) ** 2 for x in group) / (n - 1)) ** 0.5
        for j, x in enumerate(group):
            out[g + j] = (x - mean) / (std + 1e-6)
    return out


def reference_loss(logits: torch.Tensor, tokens: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor):
    """float64 pg_loss, entropy, loss, clip fraction; logits (B,R,V) at temperature 1."""
    logp_all = logits.double().log_softmax(-1)
    logp = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    ratio = torch.exp(logp - old.double())
    a = adv.double()[:, None]
    unclipped = -a * ratio
    clipped = -a * torch.clamp(ratio, 1 - EPS_CLIP, 1 + EPS_CLIP_HIGH)
    token = torch.where(clipped > unclipped, clipped, unclipped)
    m = mask.double()
    per_sample = lambda x: (x * m).sum(-1) / m.sum(-1)  # noqa: E731
    pg = per_sample(token).mean()
    entropy = per_sample(-(logp_all.exp() * logp_all).sum(-1)).mean()
    clipfrac = per_sample((clipped > unclipped).double()).mean()
    return pg, entropy, pg - ENTROPY_COEF * entropy, clipfrac, ratio


def _batch(model, config, device, dtype, seed: int):
    from vime.convert import iter_hf_weights
    from vime.data import SyntheticPrompts, rule_reward
    from vime.rollout.engine import RolloutEngine
    from vime.trainer import TrainBatch

    engine = RolloutEngine(config, device=device, dtype=dtype,
                           hf_weights={n: t.detach().clone() for n, t in iter_hf_weights(model)})
    prompts = SyntheticPrompts(PROMPTS, 8, config.vocab_size, seed=seed)
    rows = torch.tensor([p.tokens for p in prompts.prompts for _ in range(SAMPLES)])
    labels = torch.tensor([p.label for p in prompts.prompts for _ in range(SAMPLES)])
    out = engine.generate(rows, max_new_tokens=NEW_TOKENS, temperature=1.0, rollout_seed=seed).cpu()
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, NEW_TOKENS + 1, (rows.shape[0],), generator=gen)
    mask = (torch.arange(NEW_TOKENS)[None, :] < lengths[:, None]).float()
    # rewards with spread inside every group (the rule reward of a random model can tie)
    rewards = rule_reward(out.response_tokens, mask, labels) + torch.rand(rows.shape[0], generator=gen) * 0.5
    return TrainBatch(out.prompt_tokens, out.response_tokens, mask, out.logprobs, rewards, SAMPLES), gen


def run(device: str, dtype: str) -> GateOutcome:
    from vime.model import TrainLM, tiny_config
    from vime.platform import get_platform
    from vime.trainer import Trainer, TrainerConfig

    if dtype not in TOLS:
        from vime.gates.common import GateSkip

        raise GateSkip(f"no G9 tolerance for {dtype}")
    loss_rtol, grad_rtol, min_cos = TOLS[dtype]
    dev, tdtype = get_platform(device).device(), getattr(torch, dtype)
    config = tiny_config(seed=11)
    model = TrainLM(config).to(device=dev, dtype=tdtype)
    batch, gen = _batch(model, config, dev, tdtype, seed=5)
    cfg = TrainerConfig(lr=1e-3, global_batch_size=len(batch), eps_clip=EPS_CLIP, eps_clip_high=EPS_CLIP_HIGH,
                        entropy_coef=ENTROPY_COEF, clip_grad=1e9, use_rollout_logprobs=True)
    trainer = Trainer(model, cfg)
    with torch.no_grad():
        current, _ = trainer.forward_logprobs(model, batch)
    offsets = (torch.rand(batch.response_tokens.shape, generator=gen, dtype=torch.float64) * 1.2 - 0.6)
    batch.rollout_logprobs = (current.double().cpu() + offsets).float()  # a stale policy: off-policy ratios

    snapshot = copy.deepcopy(model).double()
    _, steps = trainer.train_rollout(batch)
    step = steps[0]

    full = torch.cat([batch.prompt_tokens, batch.response_tokens], dim=1)[:, :-1].to(dev)
    logits = snapshot(full)[:, batch.prompt_tokens.shape[1] - 1 :]
    adv_ref = reference_advantages(batch.rewards, SAMPLES)
    tokens, old, mask = (t.to(dev) for t in (batch.response_tokens, batch.rollout_logprobs, batch.loss_mask))
    pg, entropy, loss, clipfrac, ratio = reference_loss(logits, tokens, old, adv_ref.to(dev), mask)
    loss.backward()
    pg, clipfrac, ratio = pg.detach(), clipfrac.detach(), ratio.detach()
    ref_grads = {n: p.grad.detach() for n, p in snapshot.named_parameters() if p.grad is not None}
    got = torch.cat([trainer.last_grads[n].double().reshape(-1) for n in ref_grads])
    want = torch.cat([ref_grads[n].reshape(-1) for n in ref_grads])
    grad_rel = float((got - want).norm() / want.norm().clamp(min=1e-30))
    cosine = float(torch.nn.functional.cosine_similarity(got, want, dim=0))
    adv_err = float((trainer.last_rollout_tensors["advantages"].double().cpu() - adv_ref).abs().max())
    live = mask.bool()
    beyond_high = int(((ratio > 1 + EPS_CLIP_HIGH) & live).sum())
    beyond_low = int(((ratio < 1 - EPS_CLIP) & live).sum())
    loss_err = abs(step["train/pg_loss"] - float(pg)) / max(1.0, abs(float(pg)))
    clip_err = abs(step["train/pg_clipfrac"] - float(clipfrac))

    improvement = _on_policy_improvement(device, dtype)
    precision = _precision_checks(trainer, tdtype)
    values: dict[str, Any] = {
        "pg_loss": step["train/pg_loss"], "pg_loss_reference": float(pg), "pg_clipfrac": step["train/pg_clipfrac"],
        "pg_clipfrac_reference": float(clipfrac), "ratios_beyond_high": beyond_high, "ratios_beyond_low": beyond_low,
        "grad_relative_error": grad_rel, "grad_cosine": cosine, "advantages_max_error": adv_err,
        "on_policy_improvement": improvement,
    }
    checks = [
        Check("off_policy.clipping_active", 0.1 < float(clipfrac) < 0.9 and beyond_high > 0 and beyond_low > 0,
              round(float(clipfrac), 4), "(0.1, 0.9), ratios beyond both bounds"),
        Check("advantages_equal_reference", adv_err <= 1e-5, adv_err, 1e-5),
        Check("pg_loss_equals_reference", loss_err <= loss_rtol, loss_err, loss_rtol,
              f"trainer pg_loss {step['train/pg_loss']:.6g} vs reference {float(pg):.6g}"),
        Check("clipfrac_equals_reference", clip_err <= max(1e-6, 5 * loss_rtol), clip_err, max(1e-6, 5 * loss_rtol)),
        Check("gradient_equals_reference", grad_rel <= grad_rtol, grad_rel, grad_rtol),
        Check("gradient_direction", cosine >= min_cos, cosine, min_cos),
        Check("on_policy_step_improves_objective", improvement > 0, improvement, "> 0",
              "after a GRPO step the policy moved away from positive-advantage responses"),
    ]
    checks += precision
    return outcome(checks, values, {"eps_clip": EPS_CLIP, "eps_clip_high": EPS_CLIP_HIGH})


def _precision_checks(trainer: Any, dtype: torch.dtype) -> list[Check]:
    """bf16/fp16: AdamW steps fp32 master weights with fp32 moments, and the model's weights are
    exactly the masters rounded to the model dtype after the step; fp16 also has a loss scaler."""
    if dtype == torch.float32:
        return []
    opt_params = [p for g in trainer.optimizer.param_groups for p in g["params"]]
    states = [t for st in trainer.optimizer.state.values() for t in st.values() if torch.is_tensor(t) and t.dim() > 0]
    fp32 = all(p.dtype == torch.float32 for p in opt_params) and bool(states) and all(t.dtype == torch.float32 for t in states)
    model_params = list(trainer.model.parameters())
    in_step = len(opt_params) == len(model_params) and all(
        torch.equal(m.detach().to(dtype), p.detach()) for m, p in zip(opt_params, model_params))
    checks = [
        Check("precision.fp32_master_weights_and_moments", fp32,
              detail="the optimizer does not step fp32 master weights with fp32 moments"),
        Check("precision.model_equals_rounded_masters", in_step,
              detail="after the step the model weights are not the masters rounded to the model dtype"),
    ]
    if dtype == torch.float16:
        checks.append(Check("precision.fp16_loss_scaling", getattr(trainer, "scaler", None) is not None,
                            detail="fp16 training without a loss scaler"))
    return checks


def _on_policy_improvement(device: str, dtype: str) -> float:
    """sum_i A_i * (mean log-prob change of response i) after one small on-policy step."""
    from vime.model import TrainLM, tiny_config
    from vime.platform import get_platform
    from vime.trainer import Trainer, TrainerConfig

    dev, tdtype = get_platform(device).device(), getattr(torch, dtype)
    config = tiny_config(seed=12)
    model = TrainLM(config).to(device=dev, dtype=tdtype)
    batch, _ = _batch(model, config, dev, tdtype, seed=6)
    trainer = Trainer(model, TrainerConfig(lr=3e-3, global_batch_size=len(batch), clip_grad=1e9))
    mask = batch.loss_mask.to(dev)
    with torch.no_grad():
        before, _ = trainer.forward_logprobs(model, batch)
    trainer.train_rollout(batch)
    with torch.no_grad():
        after, _ = trainer.forward_logprobs(model, batch)
    delta = ((after.double() - before.double()) * mask).sum(-1) / mask.sum(-1)
    adv = reference_advantages(batch.rewards, SAMPLES).to(dev)
    return float((adv * delta).sum())
