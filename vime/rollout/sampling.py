"""Sampling pieces shared by the engine and speculative decoding.

* `sample_seed(rollout_seed, rollout_id, index)`: each sample's own seed, so a sample's tokens depend
  only on its prompt, the weights and this triple (reproducible, resumable, batch-independent).
* `process_logits`: temperature -> top-k -> top-p, returning the *processed* log-probs (the
  distribution actually sampled from; vLLM's `processed_logprobs`). With top-k/top-p off it is exactly
  `log_softmax(logits.float() / temperature)`, the trainer's computation.
* `sample`: inverse-CDF draw with one uniform per sample from a CPU generator (device-independent).
"""

from __future__ import annotations

import hashlib

import torch


def sample_seed(rollout_seed: int, rollout_id: int, index: int) -> int:
    digest = hashlib.sha256(f"vime-sample:{rollout_seed}:{rollout_id}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def make_generators(rollout_seed: int, rollout_id: int, indices) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(sample_seed(rollout_seed, rollout_id, int(i))) for i in indices]


def process_logits(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """logits (B, V) -> processed log-probs (B, V), float32; removed tokens get -inf.

    temperature <= 0 means greedy: the log-probs are those of the unscaled distribution."""
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    if temperature > 0 and 0 < top_k < scaled.shape[-1]:
        kth = scaled.topk(top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if temperature > 0 and top_p < 1.0:
        sorted_logits, order = scaled.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass before it already reaches top_p (the top token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled.log_softmax(-1)


def sample(logprobs: torch.Tensor, generators: list[torch.Generator], greedy: bool = False) -> torch.Tensor:
    """One token per row of processed log-probs (B, V)."""
    if greedy:
        return logprobs.argmax(-1)
    u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators]).to(logprobs.device)
    cdf = logprobs.double().exp().cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp_(max=logprobs.shape[-1] - 1)
