"""The driver: `python -m vime.train [flags]` (flags: vime.arguments), or `run(args)` in process.

The loop follows the production train.py:
  setup: seed -> trainer model (--hf-checkpoint or a seeded tiny config) -> --load (start at
         loaded iteration + 1, data cursor restored) -> engine (from the HF checkpoint, or the
         trainer's initial weights) -> [--check-weight-update-equal: snapshot] -> initial weight sync
         (always) -> [compare];
  per rollout id: generate (rollout/reward) -> [sleep mode: offload engine] -> train -> save when due
         -> [onload weights] -> sync every --update-weights-interval -> [onload kv cache].
Lines printed: `rollout <id>: {...}`, `step <n>: {...}` (train/* metrics), `perf <id>: {...}`.

Weight sync: `--colocate` uses vime.weight_sync.ColocatedSync (in-process hand-over, receiver
clones); otherwise vime.weight_sync.BroadcastSync with the engine in a second process
(gloo/nccl/hccl over 127.0.0.1).

`run(args, log=print, audit=False) -> RunResult` returns metrics, sampled tokens, and (with audit)
sha256 digests of params/optimizer/scheduler/RNG/grads/data cursor per rollout, which the
reproducibility and resume gates compare.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from vime.arguments import parse_args
from vime.checkpoint import LoadedCheckpoint, capture_rng, load_checkpoint, save_checkpoint
from vime.convert import hf_to_train, iter_hf_weights, load_hf, save_train_model_hf
from vime.data import RolloutDataSource, SyntheticPrompts, rule_reward
from vime.digest import params_digest, state_digest
from vime.model import ModelConfig, TrainLM
from vime.platform import get_platform
from vime.trainer import TrainBatch, Trainer, TrainerConfig


class CICheckError(AssertionError):
    """A --ci-test check failed; the message names the metric, its value and the bound."""


@dataclass
class RunResult:
    start_rollout_id: int
    num_rollout: int
    rollout_metrics: list[dict] = field(default_factory=list)
    step_metrics: list[dict] = field(default_factory=list)
    perf: list[dict] = field(default_factory=list)
    tokens: list[torch.Tensor] = field(default_factory=list)  # response tokens per rollout
    audit: list[dict] = field(default_factory=list)  # per rollout, after training (audit=True)
    initial_audit: dict = field(default_factory=dict)  # after setup/load, before the first update
    sync_reports: list[dict] = field(default_factory=list)
    loaded: LoadedCheckpoint | None = None
    final_params_sha256: str = ""
    weight_version: int | None = None


def model_config_from_args(args) -> ModelConfig:
    return ModelConfig(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_attention_heads,
        num_kv_heads=args.num_query_groups or args.num_attention_heads,
        intermediate_size=args.ffn_hidden_size,
        tie_word_embeddings=not args.untie_embeddings_and_output_weights,
        num_experts=args.num_experts,
        num_experts_per_tok=args.moe_router_topk,
        seed=args.seed,
        attention=args.attention_backend,
    )


def trainer_config_from_args(args) -> TrainerConfig:
    return TrainerConfig(
        lr=args.lr, min_lr=args.min_lr, lr_warmup_iters=args.lr_warmup_iters, lr_decay_style=args.lr_decay_style,
        lr_decay_iters=args.lr_decay_iters, weight_decay=args.weight_decay, adam_beta1=args.adam_beta1,
        adam_beta2=args.adam_beta2, adam_eps=args.adam_eps, clip_grad=args.clip_grad, eps_clip=args.eps_clip, eps_clip_high=args.eps_clip_high,
        use_kl_loss=args.use_kl_loss, kl_loss_coef=args.kl_loss_coef, kl_loss_type=args.kl_loss_type,
        entropy_coef=args.entropy_coef, grpo_std_normalization=not args.disable_grpo_std_normalization,
        global_batch_size=args.global_batch_size, temperature=args.rollout_temperature,
        use_rollout_logprobs=args.use_rollout_logprobs, use_rollout_routing_replay=args.use_rollout_routing_replay,
        keep_ref=args.ci_test or args.use_kl_loss,
    )


# --------------------------------------------------------------------------------------- sync


class _RemoteEngine:
    """Engine living in the BroadcastSync process: every verb is a remote call."""

    def __init__(self, sync):
        self._sync = sync

    def generate(self, prompts, **kwargs):
        return self._sync.call("generate_cpu", prompts, **kwargs)

    @property
    def weight_version(self):
        return self._sync.call("get_weight_version")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *a, **k: self._sync.call(name, *a, **k)


class _Sync:
    def __init__(self, args, engine_kwargs: dict, platform):
        from vime import weight_sync

        self.error_type = weight_sync.WeightSyncError
        self.remote = None
        from vime.rollout.engine import build_engine

        if args.colocate:
            self.engine = build_engine(**engine_kwargs)
            self.transport = weight_sync.ColocatedSync(
                self.engine, packed=args.vllm_weight_sync_packed, buffer_size=args.update_weight_buffer_size
            )
        else:
            spec = weight_sync.EngineSpec(build_engine, (), engine_kwargs)
            self.remote = weight_sync.BroadcastSync(
                spec, packed=args.vllm_weight_sync_packed, buffer_size=args.update_weight_buffer_size,
                device_kind=platform.kind,
            ).start()
            self.transport = self.remote
            self.engine = _RemoteEngine(self.remote)

    def push(self, model: TrainLM) -> dict:
        report = self.transport.push(iter_hf_weights(model))
        if not report.ok:
            raise self.error_type(f"weight update failed: {report.error}; engine stays on version {report.version}")
        return report.to_dict()

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()


# --------------------------------------------------------------------------------------- helpers


def _should_save(args, rollout_id: int) -> bool:
    if not args.save or args.save_interval is None:
        return False
    return (rollout_id + 1) % args.save_interval == 0 or rollout_id == args.num_rollout - 1


def _fmt(metrics: dict) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in metrics.items()) + "}"


def _audit(trainer: Trainer, data: RolloutDataSource, platform) -> dict:
    opt = trainer.optimizer.state_dict()
    return {
        "params": params_digest(trainer.model),
        "optimizer": state_digest(opt["state"]),
        "optimizer_steps": sorted({int(s["step"]) for s in opt["state"].values()}) if opt["state"] else [],
        "scheduler": state_digest(trainer.scheduler.state_dict()),
        "rng": state_digest(capture_rng(platform)),
        "grads": state_digest(trainer.last_grads),
        "data": state_digest(data.state_dict()),
        "step": trainer.step,
    }


def _ci_checks(args, rollout_id: int, first_step: int, rollout_metrics: dict, steps: list[dict], vocab: int) -> None:
    lp = rollout_metrics["rollout/log_probs"]
    if not (math.isfinite(lp) and -math.log(vocab) - 1 <= lp <= 0):
        raise CICheckError(f"rollout {rollout_id}: rollout/log_probs {lp} outside [-ln V - 1, 0] = [{-math.log(vocab) - 1:.3f}, 0]")
    check_kl = not (args.ci_disable_kl_checker or args.use_rollout_routing_replay)
    if rollout_id == 0 and check_kl and "rollout/ref_log_probs" in rollout_metrics:
        gap = abs(lp - rollout_metrics["rollout/ref_log_probs"])
        if gap >= 1e-8:
            raise CICheckError(f"rollout 0: |log_probs - ref_log_probs| = {gap:.3e} >= 1e-8 (actor must equal ref)")
    for i, step in enumerate(steps):
        diff = step["train/train_rollout_logprob_abs_diff"]
        if diff > args.ci_train_rollout_logprob_abs_diff_threshold:
            raise CICheckError(
                f"step {first_step + i}: train_rollout_logprob_abs_diff {diff:.3e} > "
                f"--ci-train-rollout-logprob-abs-diff-threshold {args.ci_train_rollout_logprob_abs_diff_threshold}"
            )
        if first_step + i == 0 and check_kl:
            for key in ("train/ppo_kl", "train/kl_loss"):
                if abs(step[key]) >= 1e-8:
                    raise CICheckError(f"step 0: {key} = {step[key]:.3e}, expected < 1e-8 before any update")


def _debug_path(template: str, rollout_id: int) -> str:
    return template.format(rollout_id=rollout_id)


# --------------------------------------------------------------------------------------- main loop


def run(args, log: Callable[[str], None] = print, audit: bool = False, stop_after_rollout: int | None = None,
        after_train: Callable[[int], dict] | None = None) -> RunResult:
    """Run the loop. `stop_after_rollout` ends the run after that rollout id (its save and sync
    done) without changing --num-rollout, like an interrupted job; the resume gate uses it.
    `after_train(rollout_id) -> dict` runs after each rollout's training and its values join the
    rollout metrics (the resume gate draws from every RNG stream there, as dropout or a sampler would)."""
    platform = get_platform(None if args.device == "auto" else args.device)
    device, dtype = platform.device(), getattr(torch, args.dtype)
    random.seed(args.seed)
    import numpy as np

    np.random.seed(args.seed % (2**32))
    platform.manual_seed_all(args.seed)

    hf_weights = None
    if args.hf_checkpoint:
        config, hf_weights = load_hf(args.hf_checkpoint)
        model = TrainLM(config, init=False)
        model.load_state_dict(hf_to_train(hf_weights, config))
    else:
        config = model_config_from_args(args)
        model = TrainLM(config)
    model.to(device=device, dtype=dtype)

    data = RolloutDataSource(
        SyntheticPrompts(args.num_prompts, args.prompt_len, config.vocab_size, seed=args.rollout_seed),
        rollout_seed=args.rollout_seed, shuffle=args.rollout_shuffle,
    )
    samples = args.rollout_batch_size * args.n_samples_per_prompt
    total_steps = args.num_rollout * (samples // args.global_batch_size)
    trainer = Trainer(model, trainer_config_from_args(args), total_steps=total_steps)

    start_rollout_id, loaded = 0, None
    if args.load:
        loaded = load_checkpoint(
            args.load, trainer, data, ckpt_step=args.ckpt_step, no_load_optim=args.no_load_optim,
            no_load_rng=args.no_load_rng, finetune=args.finetune, platform=platform,
        )
        if loaded is not None and not loaded.finetune:
            start_rollout_id = loaded.iteration + 1
    if args.start_rollout_id is not None:
        start_rollout_id = args.start_rollout_id
    result = RunResult(start_rollout_id=start_rollout_id, num_rollout=args.num_rollout, loaded=loaded)

    engine_weights = None if args.hf_checkpoint else {n: t.detach().to("cpu").clone() for n, t in iter_hf_weights(model)}
    engine_kwargs = {
        # a decoupled engine uses its process's current device (the sync picks it), not the trainer's
        "config": config.to_dict(), "device": str(device) if args.colocate else platform.kind,
        "dtype": args.dtype, "hf_dir": args.hf_checkpoint,
        "hf_weights": engine_weights, "weight_version": loaded.weight_version if loaded else None,
    }
    sync = _Sync(args, engine_kwargs, platform)
    engine = sync.engine
    try:  # from here on the engine (maybe a second process) is always shut down
        if args.vllm_quantization:
            from vime.quant import mxfp8

            mxfp8.enable_for_engine(engine, args.hf_checkpoint, worker_extension_cls=args.vllm_worker_extension_cls)
        if args.check_weight_update_equal:
            engine.check_weights("snapshot")
        result.sync_reports.append(sync.push(model))  # always push once before the first rollout
        if args.check_weight_update_equal:
            engine.check_weights("compare")
        if audit:
            result.initial_audit = _audit(trainer, data, platform)

        for rollout_id in range(start_rollout_id, args.num_rollout):
            t0 = time.perf_counter()
            batch, tokens = _rollout(args, engine, data, rollout_id, device)
            t_rollout = time.perf_counter() - t0
            if args.vllm_enable_sleep_mode:
                engine.sleep(1)  # offload rollout while training
            first_step = trainer.step
            t1 = time.perf_counter()
            rollout_metrics, steps = trainer.train_rollout(batch)
            t_train = time.perf_counter() - t1
            rollout_metrics["rollout/weight_version"] = batch.extras["weight_version"]
            rollout_metrics["rollout/step"] = rollout_id
            if after_train is not None:
                rollout_metrics.update(after_train(rollout_id))
            for key, value in batch.extras.get("spec_decode", {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    rollout_metrics[f"spec/{key}"] = value
            log(f"rollout {rollout_id}: {_fmt(rollout_metrics)}")
            for i, step in enumerate(steps):
                log(f"step {first_step + i}: {_fmt(step)}")
            if args.ci_test:
                _ci_checks(args, rollout_id, first_step, rollout_metrics, steps, config.vocab_size)
            result.rollout_metrics.append(rollout_metrics)
            result.step_metrics.extend(steps)
            result.tokens.append(tokens)
            if audit:
                result.audit.append(_audit(trainer, data, platform))

            t2 = time.perf_counter()
            if _should_save(args, rollout_id):
                save_checkpoint(
                    args.save, rollout_id, trainer, data, weight_version=batch.extras["weight_version"],
                    platform=platform, save_optim=not args.no_save_optim,
                )
                if args.save_hf:
                    save_train_model_hf(_debug_path(args.save_hf, rollout_id), model)
                if args.draft_save_hf:  # once per save (the draft the engine speculates with)
                    from vime.spec_decode import export_draft_for_rollout

                    export_draft_for_rollout(args.draft_save_hf, rollout_id, args.speculative)
            t_save = time.perf_counter() - t2
            if args.vllm_enable_sleep_mode:
                engine.wake_up(("weights",))
            t3 = time.perf_counter()
            if (rollout_id + 1) % args.update_weights_interval == 0:
                result.sync_reports.append(sync.push(model))
            t_sync = time.perf_counter() - t3
            if args.vllm_enable_sleep_mode:
                engine.wake_up(("kv_cache",))
            perf = {
                "perf/rollout_time": t_rollout, "perf/train_time": t_train, "perf/save_time": t_save,
                "perf/update_weights_time": t_sync, "perf/step_time": time.perf_counter() - t0,
            }
            if batch.extras.get("gen_seconds") and batch.extras.get("new_tokens"):
                perf["perf/rollout_tok_per_s"] = batch.extras["new_tokens"] / batch.extras["gen_seconds"]
            result.perf.append(perf)
            log(f"perf {rollout_id}: {_fmt({k: round(v, 6) for k, v in perf.items()})}")
            if stop_after_rollout is not None and rollout_id >= stop_after_rollout:
                break
        result.weight_version = engine.get_weight_version()
    finally:
        sync.close()
    result.final_params_sha256 = params_digest(model)
    return result


def _rollout(args, engine, data: RolloutDataSource, rollout_id: int, device) -> tuple[TrainBatch, torch.Tensor]:
    n = args.n_samples_per_prompt
    prompts = data.get_prompts(args.rollout_batch_size, n)
    if args.load_debug_rollout_data:
        saved = torch.load(_debug_path(args.load_debug_rollout_data, rollout_id), weights_only=True)
        routing = saved.get("routing") or None
        batch = TrainBatch(
            saved["prompt_tokens"], saved["response_tokens"], saved["loss_mask"], saved["rollout_logprobs"],
            saved["rewards"], n, routing=routing, extras={"weight_version": saved.get("weight_version")},
        )
        return batch, saved["response_tokens"]
    rows = [p.tokens for p in prompts for _ in range(n)]
    labels = torch.tensor([p.label for p in prompts for _ in range(n)])
    out = engine.generate(
        torch.tensor(rows, dtype=torch.long),
        max_new_tokens=args.rollout_max_response_len, temperature=args.rollout_temperature,
        top_p=args.rollout_top_p, top_k=max(0, args.rollout_top_k), rollout_seed=args.rollout_seed,
        rollout_id=rollout_id, eos_token_id=args.eos_token_id,
        record_routing=args.use_rollout_routing_replay, speculative=args.speculative,
    )
    rewards = rule_reward(out.response_tokens.cpu(), out.loss_mask.cpu(), labels)
    batch = TrainBatch(
        out.prompt_tokens.cpu(), out.response_tokens.cpu(), out.loss_mask.cpu(), out.logprobs.cpu(), rewards, n,
        routing=out.routing,
        extras={"weight_version": out.weight_version, "spec_decode": out.stats.get("spec_decode", {}),
                "gen_seconds": out.stats.get("seconds"), "new_tokens": out.stats.get("new_tokens")},
    )
    if args.save_debug_rollout_data:
        import io

        from vime.fsio import atomic_write_bytes

        buf = io.BytesIO()
        torch.save({
            "prompt_tokens": batch.prompt_tokens, "response_tokens": batch.response_tokens,
            "loss_mask": batch.loss_mask, "rollout_logprobs": batch.rollout_logprobs, "rewards": rewards,
            "routing": batch.routing or {}, "weight_version": out.weight_version,
        }, buf)
        atomic_write_bytes(_debug_path(args.save_debug_rollout_data, rollout_id), buf.getvalue())
    return batch, out.response_tokens.cpu()


def main(argv: list[str] | None = None) -> int:
    """CLI exit codes: 0 ok, 1 a check or weight update failed, 2 bad flags or inputs, 3 device/runtime
    missing. Known errors print one line; anything else propagates with its traceback."""
    from vime.checkpoint import CheckpointError
    from vime.platform import PlatformError
    from vime.rollout.engine import WeightCheckError, WeightUpdateError
    from vime.weight_sync import WeightSyncError

    try:
        args = parse_args(argv)
        torch.set_num_threads(max(1, args.cpu_threads))
        run(args)
    except (CICheckError, WeightCheckError, WeightUpdateError, WeightSyncError) as exc:
        print(f"failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except (ValueError, CheckpointError) as exc:  # flags, configs, checkpoints
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PlatformError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
