"""R3 (rollout routing replay) for the MoE layers: record routing at rollout, replay it in training.

Why: the trainer recomputes log-probs with newer weights (and, on real hardware, other kernels) than
the rollout engine used. For a MoE model a tiny score change flips a token's top-k experts, so the
trainer would optimise a different sub-network than the one that produced the sample. R3 makes the
training forward use the experts the rollout chose; router probabilities are still gathered from the
current scores, so the router keeps receiving gradients.

The model's router hook (`vime.model.RoutingReplay`) does the per-layer work. This module turns one
rollout's record into a replay for the training forward, splits/stacks records per sample when the
trainer regroups samples, and measures how far the training forward's own routing drifted from the
rollout's (the mismatch R3 removes).

Tensor layout, shared with the engine: {layer: LongTensor (B, T, k)} for the T = P + R - 1 tokens
the model consumed (prompt plus response without its last token), which is exactly the input of the
trainer's log-prob forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

Routing = dict[int, torch.Tensor]


class RoutingReplayError(ValueError):
    """A routing record does not fit the forward it is meant to drive."""


@dataclass(frozen=True)
class RoutingMismatch:
    """How often training routing differs from rollout routing (0.0 = identical expert sets)."""

    mismatch_frac: float  # share of (layer, token) pairs whose top-k expert *set* differs
    expert_overlap: float  # mean |rollout ∩ train| / k over (layer, token) pairs
    per_layer: dict[int, float]
    tokens: int  # (layer, token) pairs compared

    def scalars(self, prefix: str = "rollout/r3_") -> dict[str, float]:
        """Flat float metrics for the driver's metric lines."""
        return {f"{prefix}routing_mismatch_frac": self.mismatch_frac, f"{prefix}expert_overlap": self.expert_overlap}

    def to_dict(self) -> dict[str, Any]:
        return {
            "r3/routing_mismatch_frac": round(self.mismatch_frac, 6),
            "r3/expert_overlap": round(self.expert_overlap, 6),
            "r3/per_layer_mismatch": {str(k): round(v, 6) for k, v in self.per_layer.items()},
            "r3/compared": self.tokens,
        }


def validate(routing: Mapping[int, torch.Tensor], tokens: torch.Tensor, num_layers: int, top_k: int) -> None:
    """Check a record against the token batch of the forward that will replay it."""
    missing = sorted(set(range(num_layers)) - set(routing))
    if missing:
        raise RoutingReplayError(f"routing record lacks MoE layers {missing}; record it with record_routing=True")
    want = (tokens.shape[0], tokens.shape[1], top_k)
    for layer, ids in routing.items():
        if tuple(ids.shape) != want:
            raise RoutingReplayError(
                f"routing for layer {layer} has shape {tuple(ids.shape)}; the training forward needs {want} "
                "(batch, prompt + response - 1, top_k)"
            )


def replay_for(routing: Mapping[int, torch.Tensor], tokens: torch.Tensor | None = None, config: Any = None):
    """A fresh replay hook for one training forward (each hook is consumed once, like vime's)."""
    from vime.model import RoutingReplay

    if tokens is not None and config is not None:
        validate(routing, tokens, config.num_layers, config.num_experts_per_tok)
    return RoutingReplay("replay", {int(k): v for k, v in routing.items()})


@torch.no_grad()
def capture(model: torch.nn.Module, tokens: torch.Tensor) -> Routing:
    """The routing a model chooses on its own for `tokens` (a record-mode forward, no gradients)."""
    from vime.model import RoutingReplay

    recorder = RoutingReplay("record")
    model(tokens, routing=recorder)
    return recorder.recorded()


def mismatch(
    rollout: Mapping[int, torch.Tensor], train: Mapping[int, torch.Tensor], mask: torch.Tensor | None = None
) -> RoutingMismatch:
    """Compare expert sets per (layer, token). `mask` (B, T) picks the tokens that count (e.g. responses)."""
    if set(rollout) != set(train):
        raise RoutingReplayError(f"layers differ: rollout {sorted(rollout)} vs train {sorted(train)}")
    per_layer: dict[int, float] = {}
    differ_total, overlap_total, count = 0.0, 0.0, 0
    for layer in sorted(rollout):
        a, b = rollout[layer].to("cpu"), train[layer].to("cpu")
        if a.shape != b.shape:
            raise RoutingReplayError(f"layer {layer}: rollout routing {tuple(a.shape)} vs train {tuple(b.shape)}")
        a_sorted, b_sorted = a.sort(-1).values, b.sort(-1).values
        differ = (a_sorted != b_sorted).any(-1).float()  # (B, T)
        overlap = (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).float().mean(-1)  # (B, T)
        m = torch.ones_like(differ) if mask is None else mask.to("cpu").float()
        n = float(m.sum())
        per_layer[layer] = float((differ * m).sum()) / n if n else 0.0
        differ_total += float((differ * m).sum())
        overlap_total += float((overlap * m).sum())
        count += int(n)
    return RoutingMismatch(
        mismatch_frac=differ_total / count if count else 0.0,
        expert_overlap=overlap_total / count if count else 1.0,
        per_layer=per_layer,
        tokens=count,
    )


def split(routing: Mapping[int, torch.Tensor]) -> list[Routing]:
    """Per-sample records ({layer: (T, k)}), e.g. to store routing next to each sample."""
    if not routing:
        return []
    batch = next(iter(routing.values())).shape[0]
    return [{layer: ids[i] for layer, ids in routing.items()} for i in range(batch)]


def stack(samples: Sequence[Mapping[int, torch.Tensor]]) -> Routing:
    """Inverse of split for a training micro-batch (samples must share the token length)."""
    if not samples:
        raise RoutingReplayError("no samples to stack")
    layers = set(samples[0])
    for i, s in enumerate(samples):
        if set(s) != layers:
            raise RoutingReplayError(f"sample {i} has routing for layers {sorted(s)}, expected {sorted(layers)}")
    try:
        return {layer: torch.stack([s[layer] for s in samples]) for layer in sorted(layers)}
    except RuntimeError as exc:
        raise RoutingReplayError(f"samples have different token lengths: {exc}") from exc
