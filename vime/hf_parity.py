"""HF parity: a checkpoint written by `vime.convert.save_hf` loads in the matching transformers class
(LlamaForCausalLM for the dense config, MixtralForCausalLM for the MoE one) and gives the same logits
as vime's own models loaded from the same directory.

transformers is optional (the `parity` extra): without it the check reports why it cannot run.

Tolerance (max |logit difference|), per dtype, with the reasoning:
  * float32: 1e-4 * max(1, max|logit|). Both sides run the same float32 math (RMSNorm in float32,
    rotate-half RoPE, SwiGLU, softmax attention); on CPU we measured an exact 0. The margin covers a
    different attention kernel or a TF32 matmul on an accelerator, which move results at ~1e-5.
  * bfloat16 / float16: 4 ULPs of the largest |logit| (ULP = 2**-7 for bf16, 2**-10 for fp16).
    Both sides round the same activations; a fused or differently ordered reduction can move the
    last bit of a few intermediate values, and one bit at the logits of a 2-layer model stays within
    a couple of output ULPs. On CPU we measured 0 (dense) and 1 ULP (MoE).
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

ULPS = 4
_EPS = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}


def transformers_status() -> tuple[bool, str]:
    """(available, reason if not)."""
    if importlib.util.find_spec("transformers") is None:
        return False, "transformers is not installed (pip install 'porter[parity]' or transformers>=4.46)"
    return True, ""


def tolerance(dtype: torch.dtype, max_abs_logit: float) -> float:
    scale = max(1.0, max_abs_logit)
    if dtype == torch.float32:
        return 1e-4 * scale
    if dtype in _EPS:
        return ULPS * _EPS[dtype] * scale
    raise ValueError(f"no parity tolerance for {dtype}")


@dataclass
class ParityResult:
    architecture: str  # transformers class that loaded the checkpoint
    dtype: str
    max_abs_diff_rollout: float  # transformers vs vime RolloutLM (HF layout)
    max_abs_diff_train: float  # transformers vs vime TrainLM (fused layout, via hf_to_train)
    max_abs_logit: float
    tolerance: float
    argmax_agreement: float  # share of positions whose top token agrees
    transformers_version: str

    @property
    def ok(self) -> bool:
        return max(self.max_abs_diff_rollout, self.max_abs_diff_train) <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def _quiet_transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only, never the hub
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def load_transformers_model(checkpoint_dir: str | Path, dtype: torch.dtype) -> Any:
    """Load with the class named in config.json's `architectures` (no Auto* guessing)."""
    transformers = _quiet_transformers()
    cfg = json.loads((Path(checkpoint_dir) / "config.json").read_text())
    arch = (cfg.get("architectures") or [""])[0]
    cls = getattr(transformers, arch, None)
    if cls is None:
        raise RuntimeError(f"transformers {transformers.__version__} has no class {arch!r} (from {checkpoint_dir}/config.json)")
    try:
        model = cls.from_pretrained(str(checkpoint_dir), dtype=dtype)
    except TypeError:  # transformers 4.x spells it torch_dtype
        model = cls.from_pretrained(str(checkpoint_dir), torch_dtype=dtype)
    return model.eval()


@torch.no_grad()
def check_parity(
    checkpoint_dir: str | Path,
    tokens: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    vime_weights_hook: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
) -> ParityResult:
    """Logits of transformers vs vime (rollout and train layouts) on `tokens` (B, T).

    `vime_weights_hook` rewrites the HF tensors before vime loads them (tests use it to model a vime
    that reads a name differently from transformers)."""
    from vime.convert import hf_to_train, load_hf, load_train_model
    from vime.model import RolloutLM, TrainLM

    transformers = _quiet_transformers()
    hf_model = load_transformers_model(checkpoint_dir, dtype)
    config, weights = load_hf(checkpoint_dir)
    if vime_weights_hook is not None:
        weights = vime_weights_hook(dict(weights))
    rollout = RolloutLM(config)
    rollout.load_state_dict(weights)
    rollout = rollout.to(dtype).eval()
    if vime_weights_hook is None:
        train = load_train_model(checkpoint_dir, dtype=dtype).eval()
    else:
        train = TrainLM(config, init=False)
        train.load_state_dict(hf_to_train(weights, config))
        train = train.to(dtype).eval()

    ref = hf_model(input_ids=tokens).logits.float()
    ours_rollout = rollout(tokens).float()
    ours_train = train(tokens).float()
    max_logit = float(ref.abs().max())
    return ParityResult(
        architecture=type(hf_model).__name__,
        dtype=str(dtype).removeprefix("torch."),
        max_abs_diff_rollout=float((ref - ours_rollout).abs().max()),
        max_abs_diff_train=float((ref - ours_train).abs().max()),
        max_abs_logit=max_logit,
        tolerance=tolerance(dtype, max_logit),
        argmax_agreement=float((ref.argmax(-1) == ours_rollout.argmax(-1)).float().mean()),
        transformers_version=transformers.__version__,
    )
