"""The engine's generate() result, shared by the plain engine and speculative decoding (which
imports this module, not the engine: the dependency runs one way, engine -> spec_decode)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class RolloutOutput:
    prompt_tokens: torch.Tensor  # (B, P) long
    response_tokens: torch.Tensor  # (B, R) long; positions after EOS hold pad_token_id
    logprobs: torch.Tensor  # (B, R) float32 processed logprobs; 0 where loss_mask == 0
    loss_mask: torch.Tensor  # (B, R) float32
    sample_indices: list[int]
    weight_version: int | None
    routing: dict[int, torch.Tensor] | None = None  # layer -> (B, P+R-1, k) expert ids (R3)
    stats: dict[str, Any] = field(default_factory=dict)

    def cpu(self) -> "RolloutOutput":
        move = lambda t: t.detach().to("cpu")  # noqa: E731
        return RolloutOutput(
            move(self.prompt_tokens), move(self.response_tokens), move(self.logprobs), move(self.loss_mask),
            list(self.sample_indices), self.weight_version,
            {k: move(v) for k, v in self.routing.items()} if self.routing is not None else None, dict(self.stats),
        )

    @property
    def response_lengths(self) -> list[int]:
        return [int(x) for x in self.loss_mask.sum(-1).tolist()]

    @property
    def tokens(self) -> torch.Tensor:
        return torch.cat([self.prompt_tokens, self.response_tokens], dim=1)
