"""A tiny decoder-only LM, written in two weight layouts that compute the same function.

* `TrainLM` - the trainer's layout (Megatron-like): fused `linear_qkv` ([q; k; v] rows) and fused
  `linear_fc1` ([gate; up] rows), names such as `decoder.layers.0.self_attention.linear_qkv.weight`.
* `RolloutLM` - the rollout engine's layout with transformers' names (`model.layers.0.self_attn.q_proj.weight`,
  `mlp.gate_proj`, `model.embed_tokens`, `model.norm`, `lm_head`), i.e. LlamaForCausalLM for the dense
  config and MixtralForCausalLM names (`block_sparse_moe.gate`, `experts.{e}.w1/w2/w3`) when
  `num_experts > 0` (then every layer is a MoE layer, as in Mixtral).

The name/shape conversion between the two (vime.convert) is the weight-sync payload, so a sync bug
changes numbers that the gates observe.

Building blocks follow transformers' Llama/Mixtral numerics: RMSNorm in float32, rotate-half RoPE with
float32 cos/sin, SwiGLU MLP, Mixtral routing (softmax in float32 -> top-k -> renormalise).

Seams:
* attention is a swappable function: `ModelConfig.attention` names an entry of `ATTENTION`
  (`sdpa` default, `eager`, `npu_fusion` -> `torch_npu.npu_fusion_attention`, imported lazily).
* R3 routing replay: every forward takes `routing: RoutingReplay | None`; in "record" mode the MoE
  routers store the chosen expert ids, in "replay" mode they use the given ids (probabilities are
  still gathered from the current router logits, so gradients flow).
* KV cache: `forward(input_ids, cache=KVCache, ...)` appends keys/values and returns logits for the new
  tokens; a query block of any length attends causally to everything cached before it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Literal

import torch
import torch.nn.functional as F
from torch import nn

# --------------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 4  # < num_heads for GQA
    intermediate_size: int = 128
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    num_experts: int = 0  # 0 = dense; > 0 = every layer is a top-k MoE layer (Mixtral-like)
    num_experts_per_tok: int = 2
    init_std: float = 0.02
    seed: int = 1234
    attention: str = "sdpa"
    # transformers families: llama (default dense), mixtral (MoE), qwen2 (q/k/v bias), qwen3 (q/k RMSNorm)
    family: str = ""  # "" -> llama, or mixtral when num_experts > 0
    attention_head_dim: int | None = None  # None -> hidden_size // num_heads (Qwen3 sets it apart)
    hidden_act: str = "silu"
    qkv_bias: bool = False  # bias on q/k/v projections (Qwen2; Llama/Qwen3 attention_bias)
    o_bias: bool = False  # bias on the output projection (Llama/Qwen3 attention_bias)
    qk_norm: bool = False  # per-head RMSNorm of q and k before RoPE (Qwen3)
    rope_scaling: dict | None = None  # {"rope_type": "linear", "factor"} or llama3's parameters

    def __post_init__(self) -> None:
        if self.attention_head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not supported; known: {', '.join(sorted(ACTIVATIONS))}")
        if self.family not in FAMILIES:
            raise ValueError(f"model family {self.family!r} is not supported; known: {', '.join(f for f in FAMILIES if f)}")
        if self.family == "mixtral" and not self.num_experts:
            raise ValueError("family 'mixtral' needs num_experts > 0")
        if self.family in ("qwen2", "qwen3") and self.num_experts:
            raise ValueError(f"family {self.family!r} is dense in this runtime (MoE variants are not supported)")
        validate_rope_scaling(self.rope_scaling)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"num_experts_per_tok must be in 1..{self.num_experts}")

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim or self.hidden_size // self.num_heads

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def hf_family(self) -> str:
        return self.family or ("mixtral" if self.is_moe else "llama")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


FAMILIES = ("", "llama", "mixtral", "qwen2", "qwen3")
ROPE_TYPES = ("default", "linear", "llama3")
_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu, "swish": F.silu, "gelu": F.gelu, "gelu_pytorch_tanh": _gelu_tanh, "gelu_new": _gelu_tanh, "relu": F.relu,
}


def activation(config: "ModelConfig", x: torch.Tensor) -> torch.Tensor:
    return ACTIVATIONS[config.hidden_act](x)


def validate_rope_scaling(rope: dict | None) -> None:
    if rope is None:
        return
    kind = rope.get("rope_type")
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope type {kind!r} is not supported; known: {', '.join(ROPE_TYPES)}")
    if kind == "linear" and not float(rope.get("factor", 0)) > 0:
        raise ValueError("linear rope scaling needs factor > 0")
    if kind == "llama3":
        missing = [k for k in _LLAMA3_KEYS if k not in rope]
        if missing:
            raise ValueError(f"llama3 rope scaling lacks {missing}")


def tiny_config(moe: bool = False, **overrides) -> ModelConfig:
    """The default gate model: vocab 256, hidden 64, 2 layers, 4 heads (optionally 4 experts, top-2)."""
    base = {"num_experts": 4, "num_experts_per_tok": 2} if moe else {}
    base.update(overrides)
    return ModelConfig(**base)


# --------------------------------------------------------------------------------------- attention

AttentionFn = Callable[..., torch.Tensor]


def _causal_mask(q_len: int, k_len: int, device) -> torch.Tensor:
    """True where query i (at absolute position k_len - q_len + i) may see key j."""
    offset = k_len - q_len
    q_pos = torch.arange(q_len, device=device)[:, None] + offset
    return torch.arange(k_len, device=device)[None, :] <= q_pos


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """q (B,H,Tq,D), k/v (B,H,Tk,D) with Tk >= Tq; causal with the queries at the end, or `mask`
    (B,1,Tq,Tk), True = visible (a ragged KV cache, whose rows hold different lengths)."""
    if mask is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    q_len, k_len = q.shape[-2], k.shape[-2]
    if q_len == k_len:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    if q_len == 1:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_causal_mask(q_len, k_len, q.device), scale=scale)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Reference math (softmax in float32), used to show a kernel swap stays within tolerance."""
    scores = (q @ k.transpose(-1, -2)).float() * scale
    if mask is None:
        mask = _causal_mask(q.shape[-2], k.shape[-2], q.device)
    scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1).to(q.dtype)) @ v


def npu_fusion_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Ascend seam: torch_npu.npu_fusion_attention in BNSD layout (mask True = hidden, unlike sdpa)."""
    import torch_npu  # lazy: only on NPU hosts

    mask = ~_causal_mask(q.shape[-2], k.shape[-2], q.device) if mask is None else ~mask
    out = torch_npu.npu_fusion_attention(
        q, k, v, q.shape[1], "BNSD",
        atten_mask=mask, scale=scale, pre_tockens=65536, next_tockens=0, keep_prob=1.0, sparse_mode=0,
    )
    return out[0]


ATTENTION: dict[str, AttentionFn] = {
    "sdpa": sdpa_attention,
    "eager": eager_attention,
    "npu_fusion": npu_fusion_attention,
}


def get_attention(name: str) -> AttentionFn:
    try:
        return ATTENTION[name]
    except KeyError:
        raise ValueError(f"unknown attention {name!r}; known: {', '.join(sorted(ATTENTION))}") from None


# --------------------------------------------------------------------------------------- pieces


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def _scaled_inv_freq(config: ModelConfig, inv_freq: torch.Tensor) -> torch.Tensor:
    """rope_scaling as transformers computes it: linear divides every frequency by `factor`; llama3
    divides the low frequencies, keeps the high ones and interpolates in between."""
    rope = config.rope_scaling or {"rope_type": "default"}
    kind = rope["rope_type"]
    if kind == "default":
        return inv_freq
    factor = float(rope["factor"])
    if kind == "linear":
        return inv_freq / factor
    low, high = float(rope["low_freq_factor"]), float(rope["high_freq_factor"])
    old = float(rope["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(config: ModelConfig, positions: torch.Tensor, dtype: torch.dtype):
    """cos/sin of shape (T, D) for absolute positions (T,) - or (B, 1, T, D) for per-row positions
    (B, T) - computed in float32 like transformers."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=positions.device).float() / dim))
    inv_freq = _scaled_inv_freq(config, inv_freq)
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    if positions.dim() == 2:
        emb = emb.unsqueeze(1)  # broadcast over heads
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class KVCache:
    """Preallocated per-layer keys/values: (B, Hkv, max_len, D). `length` = tokens cached so far.

    `ragged=True` keeps one length per row (`lengths`, (B,)): a forward writes each row's new tokens
    at that row's own positions and attends through a per-row causal mask, so rows may advance at
    different speeds (speculative decoding accepts a different number of drafts per row);
    `set_lengths` rolls rows back."""

    def __init__(self, config: ModelConfig, batch: int, max_len: int, device, dtype, ragged: bool = False):
        shape = (batch, config.num_kv_heads, max_len, config.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.length = 0
        self.max_len = max_len
        self.ragged = ragged
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device) if ragged else None
        self._mask: torch.Tensor | None = None  # (B,1,T,span) for the forward in progress

    def positions(self, t: int) -> torch.Tensor:
        """(B, T) absolute positions of the next T tokens of every row (ragged cache)."""
        return self.lengths[:, None] + torch.arange(t, device=self.lengths.device)

    def set_lengths(self, lengths: torch.Tensor) -> None:
        if not self.ragged:
            raise ValueError("set_lengths needs a ragged cache")
        if bool((lengths < 0).any()) or bool((lengths > self.max_len).any()):
            raise ValueError("cache lengths out of range")
        self.lengths = lengths.to(self.lengths.device, torch.long).clone()

    def _append_ragged(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = k.shape[-2]
        pos = self.positions(t)  # (B, T)
        span = int(pos.max()) + 1
        if span > self.max_len:
            raise ValueError(f"KV cache full: {span} tokens > max_len {self.max_len}")
        rows = torch.arange(k.shape[0], device=k.device)[:, None].expand_as(pos)
        self.keys[layer][rows, :, pos] = k.transpose(1, 2)
        self.values[layer][rows, :, pos] = v.transpose(1, 2)
        if layer == 0:
            # query i of row b sees keys 0 .. lengths[b] + i (stale slots beyond stay hidden)
            self._mask = (torch.arange(span, device=k.device)[None, None, :] <= pos[:, :, None]).unsqueeze(1)
        return self.keys[layer][:, :, :span], self.values[layer][:, :, :span]

    @property
    def mask(self) -> torch.Tensor | None:
        return self._mask if self.ragged else None

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.ragged:
            return self._append_ragged(layer, k, v)
        start, end = self.length, self.length + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} tokens > max_len {self.max_len}")
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, n: int) -> None:
        if self.ragged:
            self.lengths = self.lengths + n
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget tokens after `length` (speculative decoding rolls back rejected drafts)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate cache of {self.length} tokens to {length}")
        self.length = length

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (e.g. after some samples finished)."""
        self.keys = [k[rows] for k in self.keys]
        self.values = [v[rows] for v in self.values]
        if self.ragged:
            self.lengths = self.lengths[rows]


# --------------------------------------------------------------------------------------- R3 hook


class RoutingReplay:
    """Router hook for R3. mode "record": store top-k expert ids per layer as tokens flow through
    (prefill then decode steps append along the token axis); mode "replay": hand the stored ids back
    in the same order. `recorded()` -> {layer: LongTensor (B, T, k)}."""

    def __init__(self, mode: Literal["record", "replay"], recorded: dict[int, torch.Tensor] | None = None):
        if mode not in ("record", "replay"):
            raise ValueError(f"routing mode must be 'record' or 'replay', not {mode!r}")
        if mode == "replay" and recorded is None:
            raise ValueError("replay mode needs the recorded expert ids")
        self.mode = mode
        self._chunks: dict[int, list[torch.Tensor]] = {}
        self._replay = dict(recorded or {})
        self._offset: dict[int, int] = {}

    def route(self, layer: int, router_logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """router_logits (B, T, E) -> (weights (B,T,k) float32, expert ids (B,T,k))."""
        probs = router_logits.float().softmax(-1)
        if self.mode == "record":
            weights, ids = probs.topk(top_k, dim=-1)
            self._chunks.setdefault(layer, []).append(ids.detach().to("cpu"))
        else:
            stored = self._replay.get(layer)
            if stored is None:
                raise KeyError(f"no recorded routing for layer {layer}")
            start = self._offset.get(layer, 0)
            end = start + router_logits.shape[1]
            if end > stored.shape[1] or stored.shape[0] != router_logits.shape[0]:
                raise ValueError(
                    f"recorded routing for layer {layer} has shape {tuple(stored.shape)}; "
                    f"cannot replay tokens {start}:{end} for batch {router_logits.shape[0]}"
                )
            ids = stored[:, start:end].to(router_logits.device)
            self._offset[layer] = end
            weights = probs.gather(-1, ids)
        return weights / weights.sum(-1, keepdim=True), ids

    def recorded(self) -> dict[int, torch.Tensor]:
        return {layer: torch.cat(chunks, dim=1) for layer, chunks in self._chunks.items()}

    def assert_all_consumed(self) -> None:
        for layer, stored in self._replay.items():
            used = self._offset.get(layer, 0)
            if used != stored.shape[1]:
                raise AssertionError(f"routing replay for layer {layer}: used {used} of {stored.shape[1]} tokens")


def default_route(router_logits: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = router_logits.float().softmax(-1)
    weights, ids = probs.topk(top_k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), ids


def _moe_combine(x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, experts) -> torch.Tensor:
    """Mixtral-style dispatch: each expert runs on the tokens routed to it."""
    flat = x.reshape(-1, x.shape[-1])
    w = weights.reshape(-1, weights.shape[-1]).to(x.dtype)
    idx = ids.reshape(-1, ids.shape[-1])
    out = torch.zeros_like(flat)
    for e, expert in enumerate(experts):
        token, slot = torch.where(idx == e)
        if token.numel() == 0:
            continue
        out.index_add_(0, token, expert(flat[token]) * w[token, slot, None])
    return out.reshape(x.shape)


# --------------------------------------------------------------------------------------- shared core


class _Layer(nn.Module):
    """Shared attention and routing; each layout defines `qkv(x)`, `attn_out(h)` and its forward."""

    config: ModelConfig
    index: int

    def attention(self, x, cos, sin, cache: KVCache | None):
        cfg = self.config
        b, t, _ = x.shape
        q, k, v = self.qkv(x)
        q = q.view(b, t, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = k.view(b, t, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = v.view(b, t, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(self.index, k, v)
        groups = cfg.num_heads // cfg.num_kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        mask = cache.mask if cache is not None else None
        if mask is None:
            h = get_attention(cfg.attention)(q, k, v, 1.0 / math.sqrt(cfg.head_dim))
        else:
            h = get_attention(cfg.attention)(q, k, v, 1.0 / math.sqrt(cfg.head_dim), mask)
        return self.attn_out(h.transpose(1, 2).reshape(b, t, cfg.q_dim))

    def route(self, logits, routing: RoutingReplay | None):
        k = self.config.num_experts_per_tok
        return default_route(logits, k) if routing is None else routing.route(self.index, logits, k)


class _LM(nn.Module):
    """Shared model forward; subclasses provide `embed`, `layers`, `final_norm`, `head_weight()`."""

    config: ModelConfig

    def forward(
        self,
        input_ids: torch.Tensor,
        cache: KVCache | None = None,
        routing: RoutingReplay | None = None,
    ) -> torch.Tensor:
        """input_ids (B, T) -> logits (B, T, V). With `cache`, positions continue from cache.length."""
        if cache is not None and cache.ragged:
            positions = cache.positions(input_ids.shape[1])
        else:
            start = cache.length if cache is not None else 0
            positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)
        x = self.embed(input_ids)
        cos, sin = rope_cos_sin(self.config, positions, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin, cache, routing)
        if cache is not None:
            cache.advance(input_ids.shape[1])
        return F.linear(self.final_norm(x), self.head_weight())


def _materialize_(module: nn.Module, config: ModelConfig, init: bool) -> None:
    """Overwrite torch's default init: norms = 1; other weights ~ N(0, init_std) from a private
    generator seeded by config.seed when `init`, else zeros (the engine's weights arrive by sync).
    Construction runs under fork_rng, so building a model never moves the global RNG (resume
    audits compare it). (The meta device would avoid the default init, but costs ~2 s of imports.)"""
    gen = torch.Generator().manual_seed(config.seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias") and not init:
                p.zero_()
            elif init:
                p.copy_(torch.randn(p.shape, generator=gen) * config.init_std)
            else:
                p.zero_()


# --------------------------------------------------------------------------------------- train layout


class _TrainExpertMLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.linear_fc1 = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.linear_fc2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.linear_fc1(x).chunk(2, dim=-1)
        return self.linear_fc2(activation(self.config, gate) * up)


class _TrainExperts(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.local_experts = nn.ModuleList(_TrainExpertMLP(config) for _ in range(config.num_experts))


class _TrainMoE(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.router = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = _TrainExperts(config)


class _TrainAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        kv = config.num_kv_heads * config.head_dim
        self.linear_qkv = nn.Linear(config.hidden_size, config.q_dim + 2 * kv, bias=config.qkv_bias)
        self.linear_proj = nn.Linear(config.q_dim, config.hidden_size, bias=config.o_bias)
        if config.qk_norm:
            self.q_layernorm = RMSNorm(config.head_dim, config.rms_norm_eps)
            self.k_layernorm = RMSNorm(config.head_dim, config.rms_norm_eps)


class TrainLayer(_Layer):
    def __init__(self, config: ModelConfig, index: int):
        super().__init__()
        self.config, self.index = config, index
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attention = _TrainAttention(config)
        self.pre_mlp_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = _TrainMoE(config) if config.is_moe else _TrainExpertMLP(config)

    def qkv(self, x):
        kv = self.config.num_kv_heads * self.config.head_dim
        return self.self_attention.linear_qkv(x).split([self.config.q_dim, kv, kv], dim=-1)

    def q_norm(self, q):
        return self.self_attention.q_layernorm(q)

    def k_norm(self, k):
        return self.self_attention.k_layernorm(k)

    def attn_out(self, h):
        return self.self_attention.linear_proj(h)

    def mlp_forward(self, x, routing):
        if not self.config.is_moe:
            return self.mlp(x)
        weights, ids = self.route(self.mlp.router(x), routing)
        return _moe_combine(x, weights, ids, self.mlp.experts.local_experts)

    def forward(self, x, cos, sin, cache, routing):
        x = x + self.attention(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp_forward(self.pre_mlp_layernorm(x), routing)


class _Embedding(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)


class _Decoder(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(TrainLayer(config, i) for i in range(config.num_layers))
        self.final_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class TrainLM(_LM):
    """Trainer layout: fused linear_qkv / linear_fc1 (Megatron-like names)."""

    def __init__(self, config: ModelConfig, init: bool = True):
        super().__init__()
        self.config = config
        with torch.random.fork_rng(devices=[]):
            self.embedding = _Embedding(config)
            self.decoder = _Decoder(config)
            if not config.tie_word_embeddings:
                self.output_layer = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        _materialize_(self, config, init)

    def embed(self, ids):
        return self.embedding.word_embeddings(ids)

    @property
    def layers(self):
        return self.decoder.layers

    def final_norm(self, x):
        return self.decoder.final_layernorm(x)

    def head_weight(self):
        if self.config.tie_word_embeddings:
            return self.embedding.word_embeddings.weight
        return self.output_layer.weight


# --------------------------------------------------------------------------------------- rollout layout


class _HFMLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(activation(self.config, self.gate_proj(x)) * self.up_proj(x))


class _HFExpert(nn.Module):
    """Mixtral expert naming: w1 = gate, w3 = up, w2 = down."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)

    def forward(self, x):
        return self.w2(activation(self.config, self.w1(x)) * self.w3(x))


class _HFSparseMoE(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(_HFExpert(config) for _ in range(config.num_experts))


class _HFAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        kv = config.num_kv_heads * config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, config.q_dim, bias=config.qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv, bias=config.qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv, bias=config.qkv_bias)
        self.o_proj = nn.Linear(config.q_dim, config.hidden_size, bias=config.o_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)


class RolloutLayer(_Layer):
    def __init__(self, config: ModelConfig, index: int):
        super().__init__()
        self.config, self.index = config, index
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = _HFAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.is_moe:
            self.block_sparse_moe = _HFSparseMoE(config)
        else:
            self.mlp = _HFMLP(config)

    def qkv(self, x):
        a = self.self_attn
        return a.q_proj(x), a.k_proj(x), a.v_proj(x)

    def q_norm(self, q):
        return self.self_attn.q_norm(q)

    def k_norm(self, k):
        return self.self_attn.k_norm(k)

    def attn_out(self, h):
        return self.self_attn.o_proj(h)

    def forward(self, x, cos, sin, cache, routing):
        x = x + self.attention(self.input_layernorm(x), cos, sin, cache)
        h = self.post_attention_layernorm(x)
        if not self.config.is_moe:
            return x + self.mlp(h)
        moe = self.block_sparse_moe
        weights, ids = self.route(moe.gate(h), routing)
        return x + _moe_combine(h, weights, ids, moe.experts)


class _HFModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(RolloutLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class RolloutLM(_LM):
    """Rollout layout with transformers' parameter names (state_dict() is an HF state dict)."""

    def __init__(self, config: ModelConfig, init: bool = False):
        super().__init__()
        self.config = config
        with torch.random.fork_rng(devices=[]):
            self.model = _HFModel(config)
            if not config.tie_word_embeddings:
                self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        _materialize_(self, config, init)

    def embed(self, ids):
        return self.model.embed_tokens(ids)

    @property
    def layers(self):
        return self.model.layers

    def final_norm(self, x):
        return self.model.norm(x)

    def head_weight(self):
        if self.config.tie_word_embeddings:
            return self.model.embed_tokens.weight
        return self.lm_head.weight


# --------------------------------------------------------------------------------------- helpers


def response_logprobs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of `tokens` under softmax(logits / temperature), and the entropy of that distribution.

    This is exactly what the engine reports as processed logprobs when top-p/top-k are off, so
    trainer and engine agree bit-for-bit when they see the same logits.
    """
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    logp = scaled.log_softmax(-1)
    chosen = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return chosen, entropy
