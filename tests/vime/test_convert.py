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


@pytest.mark.parametrize("change, message", [
    ({"architectures": ["GPT2LMHeadModel"]}, "architecture 'GPT2LMHeadModel' is not supported"),
    ({"quantization_config": {"quant_method": "fp8"}}, "quantization_config"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}}, "rope type 'yarn'"),
    ({"attention_dropout": 0.1}, "attention_dropout=0.1"),
    ({"mlp_bias": True}, "mlp_bias=True"),
    ({"hidden_act": "quick_gelu"}, "hidden_act 'quick_gelu'"),
    ({"use_sliding_window": True}, "use_sliding_window=True"),
])
def test_config_fields_vime_cannot_honour_are_errors(change, message):
    from vime.convert import UnsupportedConfigError, config_from_hf, hf_config_dict
    from vime.model import tiny_config

    data = {**hf_config_dict(tiny_config()), **change}
    with pytest.raises(UnsupportedConfigError, match=message.replace("(", r"\(")):
        config_from_hf(data)


def test_rope_theta_is_read_from_transformers5_rope_parameters():
    from vime.convert import config_from_hf, hf_config_dict
    from vime.model import tiny_config

    data = hf_config_dict(tiny_config())
    del data["rope_theta"], data["rope_scaling"]
    data["rope_parameters"] = {"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}
    cfg = config_from_hf(data)
    assert cfg.rope_theta == 5e5 and cfg.rope_scaling == {"rope_type": "linear", "factor": 2.0}


@pytest.mark.parametrize("overrides", [
    {"family": "qwen2", "qkv_bias": True},
    {"family": "qwen3", "qk_norm": True, "attention_head_dim": 32, "tie_word_embeddings": True},
])
def test_qwen_round_trip_is_bit_exact(overrides):
    import torch

    from vime.convert import config_from_hf, hf_config_dict, hf_to_train, train_to_hf
    from vime.model import TrainLM, tiny_config

    cfg = tiny_config(**overrides)
    assert config_from_hf(hf_config_dict(cfg)) == cfg
    model = TrainLM(cfg)
    sd = model.state_dict()
    back = hf_to_train(train_to_hf(sd, cfg), cfg)
    assert set(back) == set(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
