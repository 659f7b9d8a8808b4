"""GRPO/PPO actor: forward-only log-probs, group-normalised advantages, clipped policy loss with
optional KL and entropy terms, AdamW + grad clipping + LR schedule, and vime's metric names.

Per rollout (`train_rollout(batch)`):
  1. old `log_probs` from a forward-only pass (or the rollout's own, `use_rollout_logprobs`),
     `ref_log_probs` from the frozen reference when one is kept;
  2. GRPO advantages: per prompt group, reward - mean (divided by std + 1e-6 unless
     `grpo_std_normalization` is off), broadcast over the response tokens;
  3. `len(batch) // global_batch_size` optimizer steps, each over its slice of samples.
Loss reduction is vime's `sum_of_sample_mean` scaled to a mean: each response's masked token mean,
averaged over the responses of the step (every response weighs the same).

  ratio = exp(logp - old_logp); pg = max(-A*ratio, -A*clip(ratio, 1-eps_clip, 1+eps_clip_high))
  loss  = pg - entropy_coef * entropy + kl_loss_coef * kl(logp, ref_logp)   [kl: k1 | k2 | low_var_kl]

Step metrics (`train/` prefix): loss, pg_loss, entropy_loss, pg_clipfrac, ppo_kl, kl_loss,
train_rollout_logprob_abs_diff, grad_norm, lr. Rollout metrics (`rollout/` prefix): log_probs,
ref_log_probs, rollout_log_probs, advantages, raw_reward, response_lengths, entropy.

R3: with `use_rollout_routing_replay`, every trainer forward replays the experts recorded at rollout.

Precision (Megatron's bf16 recipe): with a bf16 or fp16 model the forward and backward run in that
dtype, but AdamW updates fp32 master copies of the parameters (its moments are fp32 too) and the
model's low-precision weights are re-cast from the masters after every step, so small updates
accumulate instead of rounding away. fp16 adds dynamic loss scaling (`LossScaler`: scale 2**16,
halved and the step skipped on inf/nan gradients, doubled after 200 clean steps) because fp16
gradients underflow. Checkpoints carry the masters and the scaler.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch

from vime.model import RoutingReplay, TrainLM, response_logprobs

KL_TYPES = ("k1", "k2", "k3", "low_var_kl")
LR_DECAY_STYLES = ("constant", "linear", "cosine")


@dataclass
class TrainerConfig:
    lr: float = 1e-3
    min_lr: float = 0.0
    lr_warmup_iters: int = 0
    lr_decay_style: str = "constant"
    lr_decay_iters: int | None = None
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    eps_clip: float = 0.2
    eps_clip_high: float | None = None  # None -> eps_clip
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: str = "low_var_kl"
    entropy_coef: float = 0.0
    grpo_std_normalization: bool = True
    global_batch_size: int = 16
    temperature: float = 1.0
    use_rollout_logprobs: bool = False
    use_rollout_routing_replay: bool = False
    keep_ref: bool = False  # keep a frozen reference even without the KL loss (for the rollout-0 checks)

    def __post_init__(self) -> None:
        if self.kl_loss_type not in KL_TYPES:
            raise ValueError(f"kl_loss_type must be one of {KL_TYPES}, not {self.kl_loss_type!r}")
        if self.lr_decay_style not in LR_DECAY_STYLES:
            raise ValueError(f"lr_decay_style must be one of {LR_DECAY_STYLES}, not {self.lr_decay_style!r}")
        if self.global_batch_size < 1:
            raise ValueError("global_batch_size must be >= 1")


@dataclass
class TrainBatch:
    prompt_tokens: torch.Tensor  # (B, P)
    response_tokens: torch.Tensor  # (B, R)
    loss_mask: torch.Tensor  # (B, R)
    rollout_logprobs: torch.Tensor  # (B, R)
    rewards: torch.Tensor  # (B,)
    n_samples_per_prompt: int
    routing: dict[int, torch.Tensor] | None = None
    extras: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.prompt_tokens.shape[0]


# --------------------------------------------------------------------------------------- math (pure)


def grpo_advantages(rewards: torch.Tensor, n_samples: int, std_normalization: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """(B,) rewards, consecutive groups of n_samples -> (B,) advantages."""
    if rewards.numel() % n_samples:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {n_samples}")
    grouped = rewards.float().view(-1, n_samples)
    centred = grouped - grouped.mean(-1, keepdim=True)
    if std_normalization and n_samples > 1:
        centred = centred / (grouped.std(-1, keepdim=True) + eps)
    return centred.view(-1)


def sample_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-response masked token mean, (B, R) -> (B,)."""
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def approx_kl(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    log_ratio = logp.float() - ref_logp.float()
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return log_ratio.pow(2) / 2
    # k3 / low_var_kl: exp(ref - logp) - (ref - logp) - 1, clamped as in vime
    neg = -log_ratio
    return (neg.exp() - neg - 1).clamp(-10, 10)


def policy_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_clip: float, eps_clip_high: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token-wise PPO clipped loss, clip indicator and approx KL (old - new). advantages (B,) or (B,R)."""
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    ratio = (logp - old_logp).exp()
    loss1 = -adv * ratio
    loss2 = -adv * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    return torch.maximum(loss1, loss2), (loss2 > loss1).float(), old_logp - logp


def lr_lambda(cfg: TrainerConfig, total_iters: int):
    """Multiplier on cfg.lr for optimizer step `it`: linear warmup, then constant/linear/cosine to min_lr."""
    decay_iters = cfg.lr_decay_iters or total_iters
    floor = cfg.min_lr / cfg.lr if cfg.lr > 0 else 0.0

    def fn(it: int) -> float:
        if cfg.lr_warmup_iters and it < cfg.lr_warmup_iters:
            return (it + 1) / cfg.lr_warmup_iters
        if cfg.lr_decay_style == "constant":
            return 1.0
        span = max(1, decay_iters - cfg.lr_warmup_iters)
        progress = min(1.0, (it - cfg.lr_warmup_iters) / span)
        if cfg.lr_decay_style == "linear":
            return floor + (1 - floor) * (1 - progress)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    return fn


# --------------------------------------------------------------------------------------- actor


class LossScaler:
    """Dynamic loss scaling for fp16 (the scheme of Megatron/apex): multiply the loss, unscale the
    gradients; on a non-finite gradient skip the step and halve the scale."""

    def __init__(self, scale: float = 2.0**16, growth_interval: int = 200, min_scale: float = 1.0):
        self.scale, self.growth_interval, self.min_scale = scale, growth_interval, min_scale
        self.good_steps = 0
        self.skipped = 0

    def update(self, finite: bool) -> None:
        if not finite:
            self.scale = max(self.min_scale, self.scale / 2)
            self.good_steps = 0
            self.skipped += 1
            return
        self.good_steps += 1
        if self.good_steps % self.growth_interval == 0:
            self.scale *= 2

    def state_dict(self) -> dict:
        return {"scale": self.scale, "good_steps": self.good_steps, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.good_steps, self.skipped = float(state["scale"]), int(state["good_steps"]), int(state["skipped"])


LOW_PRECISION = (torch.bfloat16, torch.float16)


class Trainer:
    def __init__(self, model: TrainLM, cfg: TrainerConfig, total_steps: int = 1, ref_model: TrainLM | None = None,
                 dp_group=None, dp_size: int = 1):
        self.model = model
        self.cfg = cfg
        # data parallel: gradients are averaged over `dp_group` (a torch.distributed group of dp_size ranks)
        self.dp_group, self.dp_size = dp_group, dp_size
        dtypes = {p.dtype for p in model.parameters()}
        if len(dtypes) != 1:
            raise ValueError(f"the trainer model mixes parameter dtypes {sorted(map(str, dtypes))}")
        self.param_dtype = dtypes.pop()
        self._names = [n for n, _ in model.named_parameters()]
        # fp32 master weights (and so fp32 optimizer state) for a bf16/fp16 model
        self.masters: list[torch.nn.Parameter] | None = None
        if self.param_dtype in LOW_PRECISION:
            self.masters = [torch.nn.Parameter(p.detach().float().clone()) for p in model.parameters()]
        self.scaler = LossScaler() if self.param_dtype == torch.float16 else None
        self.ref_model = ref_model
        if self.ref_model is None and (cfg.use_kl_loss or cfg.keep_ref):
            self.ref_model = copy.deepcopy(model)
        if self.ref_model is not None:
            self.ref_model.eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.masters if self.masters is not None else model.parameters(), lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
            weight_decay=cfg.weight_decay, foreach=False,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(cfg, max(1, total_steps)))
        self.step = 0  # optimizer steps taken (global)
        self.last_grads: dict[str, torch.Tensor] = {}  # gradients of the last step (resume audit)
        self.last_rollout_tensors: dict[str, torch.Tensor] = {}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _routing(self, batch: TrainBatch, rows: slice) -> RoutingReplay | None:
        if not (self.cfg.use_rollout_routing_replay and batch.routing):
            return None
        return RoutingReplay("replay", {layer: ids[rows] for layer, ids in batch.routing.items()})

    def forward_logprobs(self, model: TrainLM, batch: TrainBatch, rows: slice = slice(None), replay: bool = True):
        """(logprobs, entropy), each (b, R) for batch rows `rows`."""
        prompt = batch.prompt_tokens[rows].to(self.device)
        response = batch.response_tokens[rows].to(self.device)
        full = torch.cat([prompt, response], dim=1)
        routing = self._routing(batch, rows) if replay else None
        logits = model(full[:, :-1], routing=routing)[:, prompt.shape[1] - 1 :]
        if routing is not None:
            routing.assert_all_consumed()
        return response_logprobs(logits, response, self.cfg.temperature)

    @torch.no_grad()
    def rollout_pass(self, batch: TrainBatch) -> tuple[dict, dict]:
        """Forward-only pass: old/ref log-probs and advantages, plus rollout/* metrics."""
        mask = batch.loss_mask.to(self.device)
        log_probs, entropy = self.forward_logprobs(self.model, batch)
        tensors = {"log_probs": log_probs, "entropy": entropy}
        metrics = {
            "rollout/log_probs": sample_mean(log_probs, mask).mean().item(),
            "rollout/rollout_log_probs": sample_mean(batch.rollout_logprobs.to(self.device), mask).mean().item(),
            "rollout/entropy": sample_mean(entropy, mask).mean().item(),
            "rollout/raw_reward": batch.rewards.float().mean().item(),
            "rollout/response_lengths": mask.sum(-1).mean().item(),
        }
        if self.ref_model is not None:
            # the reference does not replay routing (as in vime): R3 runs relax the zero-KL checks
            ref, _ = self.forward_logprobs(self.ref_model, batch, replay=False)
            tensors["ref_log_probs"] = ref
            metrics["rollout/ref_log_probs"] = sample_mean(ref, mask).mean().item()
        adv = grpo_advantages(batch.rewards.to(self.device), batch.n_samples_per_prompt, self.cfg.grpo_std_normalization)
        tensors["advantages"] = adv
        metrics["rollout/advantages"] = adv.mean().item()
        if batch.routing:
            # R3: how often the trainer's own routing differs from the rollout's (what replay removes)
            from vime import routing_replay

            full = torch.cat([batch.prompt_tokens, batch.response_tokens], dim=1)[:, :-1].to(self.device)
            own = routing_replay.capture(self.model, full)
            metrics.update(routing_replay.mismatch(batch.routing, own).scalars())
        return tensors, metrics

    def train_rollout(self, batch: TrainBatch) -> tuple[dict, list[dict]]:
        """One rollout's worth of training. Returns (rollout metrics, [step metrics, ...])."""
        n = len(batch)
        gbs = self.cfg.global_batch_size
        if n % gbs:
            raise ValueError(f"rollout of {n} samples does not split into global batches of {gbs}")
        self.model.train()
        tensors, rollout_metrics = self.rollout_pass(batch)
        self.last_rollout_tensors = tensors  # forward-only log-probs etc. of this rollout (gates read them)
        old = batch.rollout_logprobs.to(self.device) if self.cfg.use_rollout_logprobs else tensors["log_probs"]
        steps = [self._train_step(batch, slice(s, s + gbs), old, tensors) for s in range(0, n, gbs)]
        return rollout_metrics, steps

    def _train_step(self, batch: TrainBatch, rows: slice, old_all: torch.Tensor, tensors: dict) -> dict:
        cfg = self.cfg
        mask = batch.loss_mask[rows].to(self.device)
        old = old_all[rows]
        adv = tensors["advantages"][rows]
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)  # with fp32 masters the optimizer does not own the model's grads
        logp, entropy = self.forward_logprobs(self.model, batch, rows)
        pg, clipped, kl_old = policy_loss(logp, old, adv, cfg.eps_clip, cfg.eps_clip if cfg.eps_clip_high is None else cfg.eps_clip_high)
        pg_loss = sample_mean(pg, mask).mean()
        entropy_loss = sample_mean(entropy, mask).mean()
        loss = pg_loss - cfg.entropy_coef * entropy_loss
        kl_loss = torch.zeros((), device=self.device)
        if "ref_log_probs" in tensors:
            kl_loss = sample_mean(approx_kl(logp, tensors["ref_log_probs"][rows], cfg.kl_loss_type), mask).mean()
            if cfg.use_kl_loss:
                loss = loss + cfg.kl_loss_coef * kl_loss
        (loss * self.scaler.scale if self.scaler is not None else loss).backward()
        if self.dp_size > 1:
            self._average_gradients()
        params = self._step_params()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_grad)
        self.last_grads = {n: p.grad.detach().clone() for n, p in zip(self._names, params) if p.grad is not None}
        lr = self.optimizer.param_groups[0]["lr"]
        finite = bool(torch.isfinite(grad_norm))
        if self.scaler is not None:
            self.scaler.update(finite)
        if finite or self.scaler is None:
            self.optimizer.step()
            self._masters_to_model()
        self.scheduler.step()
        self.step += 1
        # vime's alignment metric: trainer's forward-only log-probs vs the engine's, per-response mean
        diff = sample_mean((tensors["log_probs"][rows] - batch.rollout_logprobs[rows].to(self.device)).abs(), mask).mean()
        return {
            "train/loss": loss.item(),
            "train/pg_loss": pg_loss.item(),
            "train/entropy_loss": entropy_loss.item(),
            "train/pg_clipfrac": sample_mean(clipped, mask).mean().item(),
            "train/ppo_kl": sample_mean(kl_old.detach(), mask).mean().item(),
            "train/kl_loss": kl_loss.item(),
            "train/train_rollout_logprob_abs_diff": diff.item(),
            "train/grad_norm": float(grad_norm),
            "train/lr": lr,
            "train/step": self.step,
        }

    def _average_gradients(self) -> None:
        """Data parallel: each rank's loss is the mean over its shard; the mean of the shard
        gradients is the full batch's gradient (equal shards)."""
        import torch.distributed as dist

        for p in self.model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=self.dp_group)
                p.grad /= self.dp_size

    def _step_params(self) -> list[torch.Tensor]:
        """The tensors the optimizer steps, with this step's (unscaled, fp32) gradients."""
        if self.masters is None:
            return list(self.model.parameters())
        inv = 1.0 / self.scaler.scale if self.scaler is not None else 1.0
        for master, p in zip(self.masters, self.model.parameters()):
            master.grad = None if p.grad is None else p.grad.detach().float() * inv
        return self.masters

    @torch.no_grad()
    def _masters_to_model(self) -> None:
        if self.masters is not None:
            for master, p in zip(self.masters, self.model.parameters()):
                p.copy_(master)

    # ----------------------------------------------------------------------------- state

    def state_dict(self) -> dict:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
        }
        if self.masters is not None:
            state["master_params"] = {n: m.detach() for n, m in zip(self._names, self.masters)}
        if self.scaler is not None:
            state["loss_scaler"] = self.scaler.state_dict()
        if self.ref_model is not None:
            state["ref_model"] = self.ref_model.state_dict()
        return state

    def load_state_dict(self, state: dict, load_optim: bool = True) -> None:
        self.model.load_state_dict(state["model"])
        if self.masters is not None:
            saved = state.get("master_params")
            with torch.no_grad():
                for name, master, p in zip(self._names, self.masters, self.model.parameters()):
                    # a checkpoint without masters (saved in fp32, or --finetune from one) starts them from the weights
                    master.copy_(saved[name] if saved is not None else p.float())
        if self.scaler is not None and "loss_scaler" in state:
            self.scaler.load_state_dict(state["loss_scaler"])
        if self.ref_model is not None and "ref_model" in state:
            self.ref_model.load_state_dict(state["ref_model"])
        self.step = int(state.get("step", 0))
        if load_optim:
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
