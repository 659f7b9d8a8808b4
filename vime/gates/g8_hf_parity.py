"""G8 HF parity, both directions:
  * checkpoints written by vime's save_hf load in transformers' own class (LlamaForCausalLM for the
    dense configs, plain and with grouped KV heads + tied head; MixtralForCausalLM for MoE;
    Qwen2ForCausalLM with q/k/v bias; Qwen3ForCausalLM with q/k norm, head_dim != hidden/heads,
    tied head, theta 1e6);
  * checkpoints written by transformers (save_pretrained, transformers 5 config.json with
    `rope_parameters`) load in vime: Llama with llama3 rope scaling, theta 5e5 and gelu-tanh; Qwen2
    with linear rope scaling and theta 1e6; Qwen3 tied (gelu, head_dim 32) and untied with
    attention_bias;
and give the same logits as vime's rollout and train models loaded from that directory, within the
per-dtype tolerance of vime.hf_parity (reasoning there); in float32 the top token must agree at
every position. Skips with the reason when transformers is not installed.

Knob: `fault="swap_gate_up"` makes vime read layer 0's gate_proj as up_proj and vice versa (a
naming convention that differs from transformers'); the logits then differ and G8 must fail.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from vime.gates.common import Check, GateOutcome, GateSkip, outcome

FAULTS = ("swap_gate_up",)


CONFIGS = {  # written by vime's save_hf
    "dense": {},
    "moe": {"moe": True},
    "gqa_tied": {"num_kv_heads": 2, "tie_word_embeddings": True},  # grouped KV heads, tied head
    "qwen2": {"family": "qwen2", "qkv_bias": True, "num_kv_heads": 2},
    "qwen3": {"family": "qwen3", "qk_norm": True, "attention_head_dim": 32, "num_kv_heads": 2,
              "tie_word_embeddings": True, "rope_theta": 1e6},
}
# written by transformers itself (save_pretrained of a seeded random model built from its config
# class, every tensor perturbed so norms and biases matter), with non-default rope and activations
HF_WRITTEN = {
    "hf_llama3_rope": ("LlamaConfig", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                            "original_max_position_embeddings": 8},
                                        "hidden_act": "gelu_pytorch_tanh", "rms_norm_eps": 1e-5}),
    "hf_qwen2_linear_rope": ("Qwen2Config", {"rope_parameters": {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0},
                                              "rms_norm_eps": 1e-5}),
    "hf_qwen3": ("Qwen3Config", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "head_dim": 32,
                                  "tie_word_embeddings": True, "hidden_act": "gelu", "rms_norm_eps": 1e-5}),
    "hf_qwen3_untied": ("Qwen3Config", {"rope_parameters": {"rope_type": "default", "rope_theta": 2e5}, "head_dim": 16,
                                         "tie_word_embeddings": False, "attention_bias": True}),
}
ALL_CONFIGS = tuple(CONFIGS) + tuple(HF_WRITTEN)
HF_SIZES = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2}


def _checkpoint(tmp: Path, label: str, dtype: torch.dtype) -> Path:
    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    if label in HF_WRITTEN:
        return _transformers_checkpoint(tmp / label, label, dtype)
    return save_train_model_hf(tmp / label, TrainLM(tiny_config(**CONFIGS[label])).to(dtype))


def _transformers_checkpoint(path: Path, label: str, dtype: torch.dtype) -> Path:
    from vime.hf_parity import _quiet_transformers

    transformers = _quiet_transformers()
    cls_name, overrides = HF_WRITTEN[label]
    config_cls = getattr(transformers, cls_name)
    config = config_cls(**HF_SIZES, **overrides)
    config.architectures = [cls_name.replace("Config", "ForCausalLM")]
    model_cls = getattr(transformers, config.architectures[0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(20240601)
        model = model_cls(config)
        gen = torch.Generator().manual_seed(7)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    model.to(dtype).save_pretrained(str(path))
    return path


def _swap_gate_up(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    pairs = [("mlp.gate_proj", "mlp.up_proj"), ("block_sparse_moe.experts.0.w1", "block_sparse_moe.experts.0.w3")]
    for a, b in pairs:
        ka, kb = f"model.layers.0.{a}.weight", f"model.layers.0.{b}.weight"
        if ka in weights:
            weights[ka], weights[kb] = weights[kb], weights[ka]
    return weights


def run(device: str, dtype: str, *, fault: str | None = None, configs: tuple[str, ...] = ALL_CONFIGS) -> GateOutcome:
    from vime import hf_parity

    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown G8 fault {fault!r}; use one of {FAULTS}")
    unknown = sorted(set(configs) - set(ALL_CONFIGS))
    if unknown:
        raise ValueError(f"unknown G8 configs {unknown}; use {ALL_CONFIGS}")
    ok, why = hf_parity.transformers_status()
    if not ok:
        raise GateSkip(why)
    torch_dtype = getattr(torch, dtype)
    if torch_dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise GateSkip(f"no parity tolerance for {dtype}")
    values: dict[str, Any] = {"fault": fault}
    checks: list[Check] = []
    tokens = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
    with tempfile.TemporaryDirectory(prefix="vime-g8-") as tmp:
        for label in configs:
            path = _checkpoint(Path(tmp), label, torch_dtype)
            hook = _swap_gate_up if fault == "swap_gate_up" else None
            result = hf_parity.check_parity(path, tokens, dtype=torch_dtype, vime_weights_hook=hook)
            values[label] = result.to_dict()
            worst = max(result.max_abs_diff_rollout, result.max_abs_diff_train)
            checks.append(Check(f"{label}.{result.architecture}.logits", result.ok, worst, result.tolerance))
            checks.append(Check(f"{label}.argmax_agreement", result.argmax_agreement == 1.0 or torch_dtype != torch.float32,
                                result.argmax_agreement, 1.0))
    values["device_note"] = "parity runs on the host CPU (a property of the checkpoint, not of the device)"
    return outcome(checks, values, {"tolerance": "per dtype, see vime.hf_parity"})
