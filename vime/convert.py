"""Train layout <-> HF (rollout) layout, and HF-format checkpoints (config.json + model.safetensors).

* `train_to_hf(state_dict, config)` splits fused `linear_qkv` -> q/k/v_proj and `linear_fc1` ->
  gate/up_proj (Mixtral experts: w1/w3) and renames everything; `hf_to_train` is its inverse. Both are
  pure name/row-slicing maps, so a round trip is bit-exact.
* `iter_hf_weights(model)` yields (hf_name, tensor) one parameter at a time: the weight-sync payload.
  Tensors are views of the trainer's storage; receivers must copy (the engine clones on receive).
* `hf_config_dict(config)` / `config_from_hf(dict)`: transformers' LlamaConfig (dense) or MixtralConfig
  (MoE) fields plus a `vime` block with the fields transformers does not know (seed, attention).
* `save_hf(path, hf_state_dict, config)` writes atomically (temp dir + rename);
  `load_hf(path) -> (config, hf_state_dict)`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Mapping

import torch

from vime.fsio import write_dir_atomically
from vime.model import ModelConfig, TrainLM

SAFETENSORS_FILE = "model.safetensors"


class CheckpointFormatError(ValueError):
    """An HF checkpoint directory is missing files or holds tensors that do not fit its config."""


def _layer_pairs(config: ModelConfig, i: int) -> list[tuple[str, str]]:
    """(train name, hf name) for the 1:1 renamed parameters of layer i."""
    t, h = f"decoder.layers.{i}", f"model.layers.{i}"
    pairs = [
        (f"{t}.input_layernorm.weight", f"{h}.input_layernorm.weight"),
        (f"{t}.self_attention.linear_proj.weight", f"{h}.self_attn.o_proj.weight"),
        (f"{t}.pre_mlp_layernorm.weight", f"{h}.post_attention_layernorm.weight"),
    ]
    if config.o_bias:
        pairs.append((f"{t}.self_attention.linear_proj.bias", f"{h}.self_attn.o_proj.bias"))
    if config.qk_norm:
        pairs.append((f"{t}.self_attention.q_layernorm.weight", f"{h}.self_attn.q_norm.weight"))
        pairs.append((f"{t}.self_attention.k_layernorm.weight", f"{h}.self_attn.k_norm.weight"))
    if config.is_moe:
        pairs.append((f"{t}.mlp.router.weight", f"{h}.block_sparse_moe.gate.weight"))
        for e in range(config.num_experts):
            pairs.append(
                (f"{t}.mlp.experts.local_experts.{e}.linear_fc2.weight", f"{h}.block_sparse_moe.experts.{e}.w2.weight")
            )
    else:
        pairs.append((f"{t}.mlp.linear_fc2.weight", f"{h}.mlp.down_proj.weight"))
    return pairs


def _fused(config: ModelConfig, i: int) -> list[tuple[str, list[str], list[int]]]:
    """(train fused name, hf part names, row sizes) for layer i."""
    t, h = f"decoder.layers.{i}", f"model.layers.{i}"
    kv = config.num_kv_heads * config.head_dim
    inter = config.intermediate_size
    out = [
        (
            f"{t}.self_attention.linear_qkv.weight",
            [f"{h}.self_attn.q_proj.weight", f"{h}.self_attn.k_proj.weight", f"{h}.self_attn.v_proj.weight"],
            [config.q_dim, kv, kv],
        )
    ]
    if config.qkv_bias:
        out.append((f"{t}.self_attention.linear_qkv.bias",
                    [f"{h}.self_attn.q_proj.bias", f"{h}.self_attn.k_proj.bias", f"{h}.self_attn.v_proj.bias"],
                    [config.q_dim, kv, kv]))
    if config.is_moe:
        for e in range(config.num_experts):
            base = f"{h}.block_sparse_moe.experts.{e}"
            out.append((f"{t}.mlp.experts.local_experts.{e}.linear_fc1.weight", [f"{base}.w1.weight", f"{base}.w3.weight"], [inter, inter]))
    else:
        out.append((f"{t}.mlp.linear_fc1.weight", [f"{h}.mlp.gate_proj.weight", f"{h}.mlp.up_proj.weight"], [inter, inter]))
    return out


def _global_pairs(config: ModelConfig) -> list[tuple[str, str]]:
    pairs = [
        ("embedding.word_embeddings.weight", "model.embed_tokens.weight"),
        ("decoder.final_layernorm.weight", "model.norm.weight"),
    ]
    if not config.tie_word_embeddings:
        pairs.append(("output_layer.weight", "lm_head.weight"))
    return pairs


def hf_names(config: ModelConfig) -> list[str]:
    """Every parameter name of the rollout layout, in sync order."""
    return [name for name, _ in _iter_mapping(config, {}, names_only=True)]


def _iter_mapping(config: ModelConfig, sd: Mapping[str, torch.Tensor], names_only: bool = False):
    get = (lambda n: None) if names_only else (lambda n: sd[n])
    g = _global_pairs(config)
    yield g[0][1], get(g[0][0])
    for i in range(config.num_layers):
        for fused, parts, sizes in _fused(config, i):
            pieces = [None] * len(parts) if names_only else get(fused).split(sizes, dim=0)
            yield from zip(parts, pieces)
        for train_name, hf_name in _layer_pairs(config, i):
            yield hf_name, get(train_name)
    for train_name, hf_name in g[1:]:
        yield hf_name, get(train_name)


def iter_hf_weights(model: TrainLM) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield the trainer's weights under HF names, one tensor at a time (views, no copies)."""
    sd = {name: p.detach() for name, p in model.named_parameters()}
    yield from _iter_mapping(model.config, sd)


def train_to_hf(state_dict: Mapping[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    missing = [n for n in train_names(config) if n not in state_dict]
    if missing:
        raise CheckpointFormatError(f"train state dict lacks {len(missing)} tensors, e.g. {missing[:3]}")
    return dict(_iter_mapping(config, state_dict))


def train_names(config: ModelConfig) -> list[str]:
    names = [p for p, _ in _global_pairs(config)]
    for i in range(config.num_layers):
        names += [f for f, _, _ in _fused(config, i)] + [t for t, _ in _layer_pairs(config, i)]
    return names


def hf_to_train(hf: Mapping[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    expected = set(hf_names(config))
    missing, unexpected = sorted(expected - set(hf)), sorted(set(hf) - expected)
    if missing or unexpected:
        raise CheckpointFormatError(
            f"HF weights do not match the config: missing {len(missing)} {missing[:3]}, "
            f"unexpected {len(unexpected)} {unexpected[:3]}"
        )
    out: dict[str, torch.Tensor] = {}
    for train_name, hf_name in _global_pairs(config):
        out[train_name] = hf[hf_name]
    for i in range(config.num_layers):
        for fused, parts, _ in _fused(config, i):
            out[fused] = torch.cat([hf[p] for p in parts], dim=0)
        for train_name, hf_name in _layer_pairs(config, i):
            out[train_name] = hf[hf_name]
    return out


# --------------------------------------------------------------------------------------- HF config

ARCHITECTURES = {"llama": "LlamaForCausalLM", "mixtral": "MixtralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM"}
FAMILY_OF_ARCHITECTURE = {arch: family for family, arch in ARCHITECTURES.items()}
DEFAULT_ROPE_THETA = {"llama": 10000.0, "mixtral": 1e6, "qwen2": 10000.0, "qwen3": 10000.0}

# config.json fields with no effect on the forward pass (metadata, generation, token ids, init)
_METADATA_KEYS = {
    "transformers_version", "architectures", "model_type", "output_hidden_states", "return_dict", "dtype",
    "torch_dtype", "chunk_size_feed_forward", "is_encoder_decoder", "id2label", "label2id", "problem_type",
    "use_cache", "pad_token_id", "bos_token_id", "eos_token_id", "_name_or_path", "output_attentions",
    "initializer_range", "max_position_embeddings", "tie_word_embeddings", "vime", "tokenizer_class",
}
# fields vime honours, per family
_HONOURED = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "rope_theta", "rope_parameters",
    "rope_scaling",
}
_FAMILY_KEYS = {
    "llama": {"attention_bias"},
    "qwen3": {"attention_bias"},
    "qwen2": set(),
    "mixtral": {"num_local_experts", "num_experts_per_tok"},
}
# fields vime cannot honour unless they hold the neutral value (key -> predicate on the value)
_NEUTRAL = {
    "attention_dropout": lambda v: float(v or 0) == 0.0,
    "mlp_bias": lambda v: not v,
    "pretraining_tp": lambda v: v in (None, 1),
    "use_sliding_window": lambda v: not v,
    "router_jitter_noise": lambda v: float(v or 0) == 0.0,
    "output_router_logits": lambda v: not v,  # the router aux loss applies only with router logits
    "partial_rotary_factor": lambda v: v in (None, 1, 1.0),
    "layer_types": lambda v: v is None or all(t == "full_attention" for t in v),
}
# fields that only matter together with a neutral one above
_DEPENDENT = {"sliding_window": "use_sliding_window", "max_window_layers": "use_sliding_window",
              "router_aux_loss_coef": "output_router_logits"}


class UnsupportedConfigError(CheckpointFormatError):
    """config.json asks for something vime cannot compute; the message names the field."""


def _rope_dict(config: ModelConfig) -> dict:
    params = {"rope_type": "default", "rope_theta": config.rope_theta}
    if config.rope_scaling:
        params.update({k: v for k, v in config.rope_scaling.items()})
    return params


def hf_config_dict(config: ModelConfig, dtype: torch.dtype = torch.float32) -> dict:
    family = config.hf_family
    common = {
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": config.hidden_act,
        "max_position_embeddings": config.max_position_embeddings,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,  # transformers 4 reads these two ...
        "rope_scaling": dict(config.rope_scaling) if config.rope_scaling else None,
        "rope_parameters": _rope_dict(config),  # ... transformers 5 this one
        "attention_dropout": 0.0,
        "tie_word_embeddings": config.tie_word_embeddings,
        "initializer_range": config.init_std,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "architectures": [ARCHITECTURES[family]],
        "model_type": family,
        "vime": {"seed": config.seed, "attention": config.attention},
    }
    if family == "mixtral":
        return {**common, "num_local_experts": config.num_experts, "num_experts_per_tok": config.num_experts_per_tok,
                "output_router_logits": False, "router_aux_loss_coef": 0.0, "sliding_window": None}
    if family == "qwen2":
        if config.o_bias or not config.qkv_bias or config.qk_norm:
            raise UnsupportedConfigError("a qwen2 model has q/k/v bias, no o_proj bias and no q/k norm")
        return {**common, "use_sliding_window": False, "sliding_window": None}
    if config.qkv_bias != config.o_bias:
        raise UnsupportedConfigError(f"{family}: attention_bias covers q/k/v and o_proj together")
    if family == "qwen3":
        if not config.qk_norm:
            raise UnsupportedConfigError("a qwen3 model has q/k norm")
        return {**common, "attention_bias": config.qkv_bias, "use_sliding_window": False, "sliding_window": None}
    if config.qk_norm:
        raise UnsupportedConfigError("llama has no q/k norm; use family qwen3")
    return {**common, "attention_bias": config.qkv_bias, "mlp_bias": False}


def _family(data: Mapping) -> str:
    arch = (data.get("architectures") or [None])[0]
    if arch is not None:
        if arch not in FAMILY_OF_ARCHITECTURE:
            raise UnsupportedConfigError(
                f"config.json architecture {arch!r} is not supported; vime runs {', '.join(ARCHITECTURES.values())}")
        return FAMILY_OF_ARCHITECTURE[arch]
    model_type = data.get("model_type")
    if model_type not in ARCHITECTURES:
        raise UnsupportedConfigError(f"config.json model_type {model_type!r} is not supported; vime runs {', '.join(ARCHITECTURES)}")
    return model_type


def _rope_theta(data: Mapping, family: str = "llama") -> float:
    """transformers 5 writes theta inside rope_parameters; transformers 4 at the top level."""
    params = data.get("rope_parameters") or {}
    if "rope_theta" in params:
        return float(params["rope_theta"])
    return float(data.get("rope_theta", DEFAULT_ROPE_THETA[family]))


def _rope_scaling(data: Mapping) -> dict | None:
    params = dict(data.get("rope_parameters") or data.get("rope_scaling") or {})
    if not params:
        return None
    kind = params.pop("rope_type", params.pop("type", "default"))
    params.pop("rope_theta", None)
    if kind == "default":
        if params:
            raise UnsupportedConfigError(f"rope parameters {sorted(params)} are not used by the default rope type")
        return None
    allowed = {"linear": {"factor"}, "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}}
    if kind not in allowed:
        raise UnsupportedConfigError(f"rope type {kind!r} is not supported by vime (supported: default, linear, llama3)")
    extra = sorted(set(params) - allowed[kind])
    if extra:
        raise UnsupportedConfigError(f"{kind} rope parameters {extra} are not supported")
    return {"rope_type": kind, **{k: float(v) if k != "original_max_position_embeddings" else int(v) for k, v in params.items()}}


def config_from_hf(data: Mapping) -> ModelConfig:
    """ModelConfig from a transformers config.json; every field vime cannot honour is an error."""
    family = _family(data)
    allowed = _METADATA_KEYS | _HONOURED | _FAMILY_KEYS[family] | set(_NEUTRAL) | set(_DEPENDENT)
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise UnsupportedConfigError(f"config.json field(s) {unknown} are not supported by vime for {family}: it cannot honour them")
    for key, neutral in _NEUTRAL.items():
        if key in data and not neutral(data[key]):
            raise UnsupportedConfigError(f"config.json {key}={data[key]!r} is not supported by vime (it cannot honour it)")
    extra = data.get("vime", {}) or {}
    bias = bool(data.get("attention_bias", False))
    qkv_bias, o_bias = (True, False) if family == "qwen2" else (bias, bias)
    experts = int(data.get("num_local_experts", 0) or 0) if family == "mixtral" else 0
    hidden, heads = data["hidden_size"], data["num_attention_heads"]
    head_dim = data.get("head_dim")
    try:
        return _model_config(data, family, extra, qkv_bias, o_bias, experts, hidden, heads, head_dim)
    except ValueError as exc:
        if isinstance(exc, UnsupportedConfigError):
            raise
        raise UnsupportedConfigError(f"config.json: {exc}") from exc


def _model_config(data, family, extra, qkv_bias, o_bias, experts, hidden, heads, head_dim) -> ModelConfig:
    return ModelConfig(
        vocab_size=data["vocab_size"],
        hidden_size=hidden,
        num_layers=data["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=data.get("num_key_value_heads") or heads,
        intermediate_size=data["intermediate_size"],
        max_position_embeddings=data.get("max_position_embeddings", 512),
        rope_theta=_rope_theta(data, family),
        rms_norm_eps=float(data["rms_norm_eps"]),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
        num_experts=experts,
        num_experts_per_tok=int(data.get("num_experts_per_tok", 2) or 2),
        init_std=float(data.get("initializer_range", 0.02)),
        seed=int(extra.get("seed", 1234)),
        attention=str(extra.get("attention", "sdpa")),
        family="" if family in ("llama", "mixtral") else family,
        attention_head_dim=None if head_dim in (None, hidden // heads) else int(head_dim),
        hidden_act=str(data.get("hidden_act", "silu")),
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        qk_norm=family == "qwen3",
        rope_scaling=_rope_scaling(data),
    )


# --------------------------------------------------------------------------------------- files


def save_hf(path: str | Path, hf_state_dict: Mapping[str, torch.Tensor], config: ModelConfig) -> Path:
    """Write config.json + model.safetensors (CPU, contiguous, unshared copies) atomically."""
    from safetensors.torch import save_file

    expected = set(hf_names(config))
    if set(hf_state_dict) != expected:
        raise CheckpointFormatError(
            f"refusing to save an incomplete HF checkpoint: missing {sorted(expected - set(hf_state_dict))[:3]}, "
            f"unexpected {sorted(set(hf_state_dict) - expected)[:3]}"
        )
    tensors = {n: t.detach().to("cpu").contiguous().clone() for n, t in hf_state_dict.items()}
    dtype = next(iter(tensors.values())).dtype

    def fill(tmp: Path) -> None:
        save_file(tensors, str(tmp / SAFETENSORS_FILE), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(hf_config_dict(config, dtype), indent=2) + "\n")

    return write_dir_atomically(Path(path), fill)


def save_train_model_hf(path: str | Path, model: TrainLM) -> Path:
    return save_hf(path, dict(iter_hf_weights(model)), model.config)


def load_hf(path: str | Path) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    path = Path(path)
    cfg_file, weights = path / "config.json", path / SAFETENSORS_FILE
    for f in (cfg_file, weights):
        if not f.is_file():
            raise CheckpointFormatError(f"{f} is missing; an HF checkpoint dir needs config.json and {SAFETENSORS_FILE}")
    config = config_from_hf(json.loads(cfg_file.read_text()))
    tensors = load_file(str(weights))
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)  # some writers store the tied head anyway
    expected = set(hf_names(config))
    if set(tensors) != expected:
        raise CheckpointFormatError(
            f"{weights}: tensors do not match config.json (missing {sorted(expected - set(tensors))[:3]}, "
            f"unexpected {sorted(set(tensors) - expected)[:3]})"
        )
    return config, tensors


def load_train_model(path: str | Path, dtype: torch.dtype | None = None) -> TrainLM:
    """Trainer model initialised from an HF checkpoint dir."""
    config, hf = load_hf(path)
    model = TrainLM(config, init=False)
    model.load_state_dict(hf_to_train(hf, config))
    return model.to(dtype) if dtype is not None else model
