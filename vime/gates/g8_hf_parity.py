"""G8 HF parity: a checkpoint written by vime's save_hf loads in transformers' own class
(LlamaForCausalLM for the dense configs, plain and with grouped KV heads + tied head;
MixtralForCausalLM for the MoE config) and gives the same logits as vime's rollout and train models loaded from that directory, within the per-dtype tolerance
of vime.hf_parity (reasoning there). Skips with the reason when transformers is not installed.

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


CONFIGS = {
    "dense": {},
    "moe": {"moe": True},
    "gqa_tied": {"num_kv_heads": 2, "tie_word_embeddings": True},  # grouped KV heads, tied head
}


def _checkpoint(tmp: Path, label: str, dtype: torch.dtype) -> Path:
    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    return save_train_model_hf(tmp / label, TrainLM(tiny_config(**CONFIGS[label])).to(dtype))


def _swap_gate_up(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    pairs = [("mlp.gate_proj", "mlp.up_proj"), ("block_sparse_moe.experts.0.w1", "block_sparse_moe.experts.0.w3")]
    for a, b in pairs:
        ka, kb = f"model.layers.0.{a}.weight", f"model.layers.0.{b}.weight"
        if ka in weights:
            weights[ka], weights[kb] = weights[kb], weights[ka]
    return weights


def run(device: str, dtype: str, *, fault: str | None = None, configs: tuple[str, ...] = tuple(CONFIGS)) -> GateOutcome:
    from vime import hf_parity

    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown G8 fault {fault!r}; use one of {FAULTS}")
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        raise ValueError(f"unknown G8 configs {unknown}; use {tuple(CONFIGS)}")
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
    values["device_note"] = "parity runs on the host CPU (a property of the checkpoint, not of the device)"
    return outcome(checks, values, {"tolerance": "per dtype, see vime.hf_parity"})
