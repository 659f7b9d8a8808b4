"""HF checkpoints: save/load round trip, config.json fields, atomic replace, clear errors."""

from __future__ import annotations

import json

import pytest
import torch

import vime.convert as convert
from vime.convert import CheckpointFormatError, iter_hf_weights, load_hf, load_train_model, save_hf, save_train_model_hf
from vime.model import TrainLM, tiny_config


def test_save_load_round_trip_dense(tmp_path):
    model = TrainLM(tiny_config(num_kv_heads=2))
    out = save_train_model_hf(tmp_path / "hf", model)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert (cfg["num_key_value_heads"], cfg["head_dim"], cfg["tie_word_embeddings"]) == (2, 16, False)
    config, weights = load_hf(out)
    assert config == model.config
    assert all(torch.equal(weights[n], t) for n, t in iter_hf_weights(model))
    back = load_train_model(out)
    assert all(torch.equal(a, b) for a, b in zip(back.parameters(), model.parameters()))


def test_moe_checkpoint_is_mixtral_shaped(tmp_path):
    model = TrainLM(tiny_config(moe=True))
    cfg = json.loads((save_train_model_hf(tmp_path / "m", model) / "config.json").read_text())
    assert cfg["architectures"] == ["MixtralForCausalLM"]
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"]) == (4, 2)
    assert load_hf(tmp_path / "m")[0] == model.config


def test_failed_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    model = TrainLM(tiny_config())
    target = tmp_path / "hf"
    save_train_model_hf(target, model)
    before = (target / "model.safetensors").read_bytes()

    import safetensors.torch

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        save_train_model_hf(target, TrainLM(tiny_config(seed=9)))
    assert (target / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # no temp dirs left behind


def test_incomplete_state_dict_is_refused(tmp_path):
    config = tiny_config()
    hf = dict(iter_hf_weights(TrainLM(config)))
    hf.pop("lm_head.weight")
    with pytest.raises(CheckpointFormatError, match="missing"):
        save_hf(tmp_path / "x", hf, config)
    assert not (tmp_path / "x").exists()


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(CheckpointFormatError, match="config.json is missing"):
        load_hf(tmp_path)
    model = TrainLM(tiny_config())
    save_train_model_hf(tmp_path / "hf", model)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointFormatError, match="do not match config.json"):
        load_hf(tmp_path / "hf")


def test_hf_to_train_reports_missing_and_unexpected():
    config = tiny_config()
    hf = dict(iter_hf_weights(TrainLM(config)))
    hf["model.extra.weight"] = torch.zeros(1)
    with pytest.raises(CheckpointFormatError, match="unexpected 1"):
        convert.hf_to_train(hf, config)
