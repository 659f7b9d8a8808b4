"""A small trainer + rollout world shared by gates G4, G5 and G7.

`make_world()` builds the trainer model (train layout) from a fixed seed, writes it as the HF
checkpoint the engine starts from (--hf-checkpoint), and fixes a probe batch (prompts + responses)
on which engine and trainer log-probs are compared. `train_once()` runs one real GRPO rollout:
the engine (local, or remote through a BroadcastSync proxy) samples, the rule reward scores, the
trainer takes its optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

PROMPTS, SAMPLES, NEW_TOKENS, PROMPT_LEN = 4, 4, 12, 8
SYNC_BUFFER = 96 * 1024  # small on purpose: the tiny model then spans several buckets


@dataclass
class World:
    config: Any  # vime.model.ModelConfig
    device: torch.device
    dtype: torch.dtype
    model: Any  # vime.model.TrainLM
    trainer: Any  # vime.trainer.Trainer
    hf_dir: Path
    data: Any  # vime.data.RolloutDataSource
    probe_prompt: torch.Tensor  # (B, P)
    probe_response: torch.Tensor  # (B, R)


def make_world(tmp: Path, device: str, dtype: str, *, moe: bool = False, lr: float = 1e-3, seed: int = 1234, **overrides: Any) -> World:
    from vime.convert import save_train_model_hf
    from vime.data import RolloutDataSource, SyntheticPrompts
    from vime.model import TrainLM, tiny_config
    from vime.platform import get_platform
    from vime.trainer import Trainer, TrainerConfig

    platform = get_platform(device)
    platform.manual_seed_all(seed)
    config = tiny_config(moe=moe, seed=seed, **overrides)
    torch_dtype = getattr(torch, dtype)
    dev = platform.device()
    model = TrainLM(config).to(device=dev, dtype=torch_dtype)
    hf_dir = save_train_model_hf(Path(tmp) / "hf", model)
    trainer = Trainer(model, TrainerConfig(lr=lr, global_batch_size=PROMPTS * SAMPLES, use_rollout_routing_replay=moe))
    data = RolloutDataSource(SyntheticPrompts(16, PROMPT_LEN, config.vocab_size, seed=seed), rollout_seed=42)
    gen = torch.Generator().manual_seed(seed + 1)
    probe_prompt = torch.randint(0, config.vocab_size, (4, PROMPT_LEN), generator=gen)
    probe_response = torch.randint(0, config.vocab_size, (4, NEW_TOKENS), generator=gen)
    return World(config, dev, torch_dtype, model, trainer, Path(hf_dir), data, probe_prompt, probe_response)


def rollout(world: World, generate: Callable[..., Any], rollout_id: int, *, record_routing: bool = False):
    """Sample one rollout with `generate` (engine.generate or a remote proxy) and build the TrainBatch."""
    from vime.data import rule_reward
    from vime.trainer import TrainBatch

    prompts = world.data.get_prompts(PROMPTS, SAMPLES)
    tokens = torch.tensor([p.tokens for p in prompts for _ in range(SAMPLES)], dtype=torch.long)
    labels = torch.tensor([p.label for p in prompts for _ in range(SAMPLES)], dtype=torch.long)
    out = generate(
        tokens, max_new_tokens=NEW_TOKENS, temperature=1.0, rollout_seed=42, rollout_id=rollout_id,
        record_routing=record_routing,
    )
    rewards = rule_reward(out.response_tokens.cpu(), out.loss_mask.cpu(), labels)
    batch = TrainBatch(
        prompt_tokens=out.prompt_tokens.cpu(), response_tokens=out.response_tokens.cpu(), loss_mask=out.loss_mask.cpu(),
        rollout_logprobs=out.logprobs.cpu(), rewards=rewards, n_samples_per_prompt=SAMPLES,
        routing={k: v.cpu() for k, v in out.routing.items()} if out.routing else None,
    )
    return batch, out


def train_once(world: World, generate: Callable[..., Any], rollout_id: int) -> dict:
    batch, _ = rollout(world, generate, rollout_id, record_routing=world.config.is_moe)
    _, steps = world.trainer.train_rollout(batch)
    return steps[-1]


@torch.no_grad()
def trainer_probe(world: World) -> torch.Tensor:
    from vime.model import response_logprobs

    full = torch.cat([world.probe_prompt, world.probe_response], dim=1).to(world.device)
    world.model.eval()
    logits = world.model(full[:, :-1])[:, world.probe_prompt.shape[1] - 1 :]
    return response_logprobs(logits, world.probe_response.to(world.device))[0].float().cpu()


def engine_fingerprints(engine: Any) -> dict[str, tuple]:
    """Top-level (picklable) so BroadcastSync.apply can run it in the engine process."""
    from vime.rollout.engine import fingerprint

    return {n: fingerprint(t) for n, t in engine.named_weights().items()}


def trainer_fingerprints(world: World) -> dict[str, tuple]:
    from vime.convert import iter_hf_weights
    from vime.rollout.engine import fingerprint

    return {n: fingerprint(t) for n, t in iter_hf_weights(world.model)}


def fingerprint_diff(a: dict[str, tuple], b: dict[str, tuple]) -> dict[str, int]:
    return {
        "missing": len(set(a) - set(b)),
        "unexpected": len(set(b) - set(a)),
        "changed": sum(1 for n in set(a) & set(b) if a[n] != b[n]),
    }


def logprob_gap(engine_lp: torch.Tensor, trainer_lp: torch.Tensor) -> dict[str, float]:
    diff = (engine_lp.float().cpu() - trainer_lp.float().cpu()).abs()
    return {"mean": float(diff.mean(-1).mean()), "max": float(diff.max())}


def iter_weights(world: World):
    """The sync payload: the trainer's weights under HF names (views; transports copy)."""
    from vime.convert import iter_hf_weights

    return iter_hf_weights(world.model)
