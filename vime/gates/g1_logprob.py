"""G1 logprob alignment: after the initial weight sync, the engine's processed log-probs of the tokens
it sampled equal the trainer's forward on the same tokens, within the device/dtype tolerance.

Measured: `train_rollout_logprob_abs_diff` (per-response mean |delta|, averaged over responses, vime's
metric) and the largest per-token |delta|. Also vime's first-step checks: |log_probs - ref_log_probs|
< 1e-8 at rollout 0 (actor = reference), `ppo_kl` and `kl_loss` < 1e-8 at step 0, and the mean
log-prob finite and within [-ln V - 1, 0] (vime's trained-model range does not apply to a random model).

Sampling uses temperature 0.8 so a trainer that forgot the temperature would fail. The trainer is
built the way the driver builds it (flags -> `vime.train.trainer_config_from_args`), and both sides are
compared with an independent reference: float64 `log_softmax(logits / T)` of the trainer model's own
logits at the *rollout's* temperature. So a driver that does not hand --rollout-temperature to the
trainer, a trainer forward that drops it, or an engine that applies it twice all fail here, whatever
the bf16 noise floor (the reference uses the trainer's logits, so trainer vs reference is exact up to
float32 rounding: bound `SAME_LOGITS_TOL`).

Knobs: `perturb_engine` (add this much noise to the engine's lm_head after the sync - a broken
conversion must fail), `attention` (engine attention kernel, e.g. "eager"), `moe` (MoE config),
`temperature`.
"""

from __future__ import annotations

import math

import torch

from vime.gates.common import ZERO_KL, Check, GateOutcome, gate_argv, outcome, tolerance

# trainer log-probs vs the float64 reference on the *same* logits: float32 log_softmax rounding only
# (a few ulp of |logp| <= ~10, i.e. ~1e-6); a temperature error is >= 1e-2 here.
SAME_LOGITS_TOL = 1e-4


def run(device: str, dtype: str, *, perturb_engine: float = 0.0, attention: str | None = None,
        moe: bool = False, temperature: float = 0.8) -> GateOutcome:
    from dataclasses import replace

    from vime.arguments import parse_args
    from vime.convert import iter_hf_weights
    from vime.data import SyntheticPrompts, rule_reward
    from vime.model import TrainLM
    from vime.platform import get_platform
    from vime.rollout.engine import RolloutEngine
    from vime.train import model_config_from_args, trainer_config_from_args
    from vime.trainer import TrainBatch, Trainer
    from vime.weight_sync import ColocatedSync

    tol = tolerance(device, dtype)
    platform = get_platform(device)
    dev, tdtype = platform.device(), getattr(torch, dtype)
    argv = gate_argv(device, dtype, "--rollout-temperature", repr(float(temperature)), "--ci-test",
                     *(["--num-experts", "4"] if moe else []))
    args = parse_args(argv)
    config = model_config_from_args(args)
    model = TrainLM(config).to(device=dev, dtype=tdtype)
    trainer = Trainer(model, trainer_config_from_args(args))
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
    out = engine.generate(rows, max_new_tokens=16, temperature=args.rollout_temperature, rollout_seed=42, rollout_id=0)
    reference = _reference_logprobs(model, out.prompt_tokens, out.response_tokens, args.rollout_temperature)
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
    mask = out.loss_mask.to(trainer.device).bool()
    trainer_ref = float((trainer.last_rollout_tensors["log_probs"].double() - reference)[mask].abs().max())
    engine_ref = (out.logprobs.to(trainer.device).double() - reference)[mask].abs()
    checks = [
        Check("trainer_temperature_is_rollout_temperature", trainer.cfg.temperature == args.rollout_temperature,
              trainer.cfg.temperature, args.rollout_temperature),
        Check("trainer_vs_reference_max", trainer_ref <= SAME_LOGITS_TOL, trainer_ref, SAME_LOGITS_TOL,
              f"trainer log-probs differ from log_softmax(logits / {args.rollout_temperature}) by {trainer_ref:.3e}"),
        Check("engine_vs_reference_mean", float(engine_ref.mean()) <= tol.logprob_mean, float(engine_ref.mean()), tol.logprob_mean),
        Check("engine_vs_reference_max", float(engine_ref.max()) <= tol.logprob_max, float(engine_ref.max()), tol.logprob_max),
        Check("train_rollout_logprob_abs_diff", mean_diff <= tol.logprob_mean, mean_diff, tol.logprob_mean),
        Check("max_abs_logprob_diff", max_diff <= tol.logprob_max, max_diff, tol.logprob_max),
        Check("log_probs_minus_ref_at_rollout_0", ref_gap < ZERO_KL, ref_gap, ZERO_KL),
        Check("ppo_kl_step_0", abs(step0["train/ppo_kl"]) < ZERO_KL, step0["train/ppo_kl"], ZERO_KL),
        Check("kl_loss_step_0", abs(step0["train/kl_loss"]) < ZERO_KL, step0["train/kl_loss"], ZERO_KL),
        Check("log_probs_range", math.isfinite(lp) and low <= lp <= 0, lp, [round(low, 4), 0]),
    ]
    return outcome(checks, values={"tolerance_note": tol.note, "weight_version": out.weight_version,
                                   "temperature": args.rollout_temperature})


@torch.no_grad()
def _reference_logprobs(model, prompt: torch.Tensor, response: torch.Tensor, temperature: float) -> torch.Tensor:
    """float64 log_softmax(logits / T) of the response tokens, from the model's own forward."""
    dev = next(model.parameters()).device
    full = torch.cat([prompt, response], dim=1).to(dev)
    logits = model(full[:, :-1])[:, prompt.shape[1] - 1 :].double()
    logp = (logits / temperature).log_softmax(-1)
    return logp.gather(-1, response.to(dev).unsqueeze(-1)).squeeze(-1)

