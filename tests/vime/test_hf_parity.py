"""HF parity: vime's HF checkpoints load in transformers' classes with the same logits."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from vime import hf_parity

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers not installed (parity extra)"
)


def test_tolerance_per_dtype():
    assert hf_parity.tolerance(torch.float32, 0.5) == pytest.approx(1e-4)
    assert hf_parity.tolerance(torch.float32, 20.0) == pytest.approx(2e-3)
    assert hf_parity.tolerance(torch.bfloat16, 2.0) == pytest.approx(4 * 2**-7 * 2)
    with pytest.raises(ValueError):
        hf_parity.tolerance(torch.int8, 1.0)


def test_status_reports_missing_transformers(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name, *a))
    ok, why = hf_parity.transformers_status()
    assert not ok and "transformers is not installed" in why


@needs_transformers
@pytest.mark.parametrize("moe, arch", [(False, "LlamaForCausalLM"), (True, "MixtralForCausalLM")])
def test_saved_checkpoint_matches_transformers(tmp_path, moe, arch):
    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    path = save_train_model_hf(tmp_path / "ckpt", TrainLM(tiny_config(moe=moe, seed=4)))
    tokens = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    result = hf_parity.check_parity(path, tokens)
    assert result.architecture == arch
    assert result.ok and result.argmax_agreement == 1.0, result.to_dict()


@needs_transformers
def test_a_naming_disagreement_is_caught(tmp_path):
    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    path = save_train_model_hf(tmp_path / "ckpt", TrainLM(tiny_config(seed=4)))

    def swap(weights):
        a, b = "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight"
        weights[a], weights[b] = weights[b], weights[a]
        return weights

    result = hf_parity.check_parity(path, torch.randint(0, 256, (2, 12)), vime_weights_hook=swap)
    assert not result.ok and result.max_abs_diff_rollout > result.tolerance
