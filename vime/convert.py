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
            [config.hidden_size, kv, kv],
        )
    ]
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


def hf_config_dict(config: ModelConfig, dtype: torch.dtype = torch.float32) -> dict:
    common = {
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": config.max_position_embeddings,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": config.tie_word_embeddings,
        "initializer_range": config.init_std,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "vime": {"seed": config.seed, "attention": config.attention},
    }
    if config.is_moe:
        return {
            **common,
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "num_local_experts": config.num_experts,
            "num_experts_per_tok": config.num_experts_per_tok,
            "output_router_logits": False,
            "router_aux_loss_coef": 0.0,
            "sliding_window": None,
        }
    return {**common, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "mlp_bias": False}


def config_from_hf(data: Mapping) -> ModelConfig:
    extra = data.get("vime", {}) or {}
    return ModelConfig(
        vocab_size=data["vocab_size"],
        hidden_size=data["hidden_size"],
        num_layers=data["num_hidden_layers"],
        num_heads=data["num_attention_heads"],
        num_kv_heads=data.get("num_key_value_heads", data["num_attention_heads"]),
        intermediate_size=data["intermediate_size"],
        max_position_embeddings=data.get("max_position_embeddings", 512),
        rope_theta=float(data.get("rope_theta", 10000.0)),
        rms_norm_eps=float(data.get("rms_norm_eps", 1e-6)),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
        num_experts=int(data.get("num_local_experts", 0) or 0),
        num_experts_per_tok=int(data.get("num_experts_per_tok", 2) or 2),
        init_std=float(data.get("initializer_range", 0.02)),
        seed=int(extra.get("seed", 1234)),
        attention=str(extra.get("attention", "sdpa")),
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
