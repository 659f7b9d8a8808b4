"""MXFP8 reference quantiser, quant description, and the rollout worker extension's lifecycle."""

from __future__ import annotations

import json
import math
import sys
import types

import pytest
import torch

from vime.quant import mxfp8
from vime.quant.mxfp8 import (
    DESCRIPTION_FILE,
    MXFP8ConfigError,
    MXFP8LifecycleError,
    MXFP8RolloutExtension,
    QuantDescription,
    dequantize_mx,
    error_bound,
    quantize_mx_reference,
)


# ----------------------------------------------------------------------------- format


@pytest.mark.parametrize("k", [1, 31, 32, 33, 64, 100])
def test_scale_count_is_ceil_k_over_32(k):
    x = torch.randn(3, k)
    q, scale = quantize_mx_reference(x)
    assert q.shape == x.shape and q.dtype == torch.float8_e4m3fn
    assert scale.shape == (3, math.ceil(k / 32)) and scale.dtype == torch.uint8


def test_shared_exponent_follows_ocp_rule():
    # group max 1.0 -> floor(log2) = 0 -> E = -8 -> stored 119; elements scaled by 2**8
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 1] = 1.0, 0.25
    q, scale = quantize_mx_reference(x)
    assert scale.item() == 127 - 8
    assert q.float()[0, 0].item() == 256.0 and q.float()[0, 1].item() == 64.0
    assert torch.equal(dequantize_mx(q, scale), x)


def test_exactly_representable_values_round_trip():
    # e4m3 grid values times a power of two survive unchanged
    grid = torch.tensor([1.0, 1.125, 1.25, 1.5, 1.75, 0.5, -3.0, 448 / 256, 0.0] + [0.0] * 23).reshape(1, 32)
    q, scale = quantize_mx_reference(grid * 2.0**-5)
    assert torch.equal(dequantize_mx(q, scale), grid * 2.0**-5)


def test_saturation_clamps_to_448_with_bounded_error():
    x = torch.full((1, 32), 0.5)
    x[0, 0] = 0.999  # scaled by 2**9 -> 511.5 > 448
    q, scale = quantize_mx_reference(x)
    assert q.float()[0, 0].item() == 448.0
    err = (dequantize_mx(q, scale) - x).abs()
    assert err[0, 0] <= x[0, 0] / 8 + 1e-7
    assert bool((err <= error_bound(x, scale) * (1 + 1e-6)).all())


def test_all_zero_group_and_tiny_values():
    x = torch.zeros(2, 40)
    q, scale = quantize_mx_reference(x)
    assert int(scale.min()) == 0 and torch.equal(dequantize_mx(q, scale), x)
    tiny = torch.randn(4, 64, generator=torch.Generator().manual_seed(1)) * 1e-30
    q, scale = quantize_mx_reference(tiny)
    assert bool(((dequantize_mx(q, scale) - tiny).abs() <= error_bound(tiny, scale) * (1 + 1e-6)).all())


@pytest.mark.parametrize("std", [1e-3, 0.02, 1.0, 300.0])
def test_error_within_derived_bound_on_random_data(std):
    x = torch.randn(32, 96, generator=torch.Generator().manual_seed(2)) * std
    q, scale = quantize_mx_reference(x)
    err = (dequantize_mx(q, scale) - x).abs()
    bound = error_bound(x, scale)
    assert bool((err <= bound * (1 + 1e-6)).all())
    # the bound is tight enough to mean something: it is reached within a factor of 2
    assert float((err / bound).max()) > 0.5


def test_wrong_scale_breaks_the_bound():
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    q, scale = quantize_mx_reference(x)
    off = scale - 1
    assert not bool(((dequantize_mx(q, off) - x).abs() <= error_bound(x, off)).all())


def test_dequantize_rejects_mismatched_scale():
    q, scale = quantize_mx_reference(torch.randn(2, 64))
    with pytest.raises(ValueError, match="does not match"):
        dequantize_mx(q, scale[:, :1])


def test_npu_path_is_lazy_and_merges_scale_dims(monkeypatch):
    assert mxfp8.npu_mx_quant_available() is False  # no torch_npu here, and no import attempted
    assert "torch_npu" not in sys.modules
    calls = {}

    def fake_quant(x, axis, dst_type):
        calls["args"] = (x.dtype, axis, dst_type)
        q, s = quantize_mx_reference(x.float())
        return q, s.reshape(s.shape[0], s.shape[1], 1)  # the kernel's (rows, groups, 1) layout

    fake = types.SimpleNamespace(npu_dynamic_mx_quant=fake_quant, float8_e4m3fn="npu-e4m3")
    monkeypatch.setitem(sys.modules, "torch_npu", fake)
    monkeypatch.setattr(mxfp8, "npu_mx_quant_available", lambda: True)
    q, scale = mxfp8.quantize_mx(torch.randn(4, 64), backend="npu")
    assert calls["args"] == (torch.bfloat16, -1, "npu-e4m3")
    assert scale.shape == (4, 2) and scale.dtype == torch.uint8


def test_npu_backend_without_kernel_is_a_clear_error():
    with pytest.raises(MXFP8ConfigError, match="npu_dynamic_mx_quant"):
        mxfp8.quantize_mx(torch.randn(2, 32), backend="npu")


# ----------------------------------------------------------------------------- description


def _desc_dict(**over):
    base = {"quant_method": "ascend", "group_size": 32, "a.weight": "W8A8_MXFP8", "b.weight": "FLOAT"}
    base.update(over)
    return base


def test_description_load_and_eligibility(tmp_path):
    (tmp_path / DESCRIPTION_FILE).write_text(json.dumps(_desc_dict()))
    desc = QuantDescription.load(tmp_path)
    assert desc.is_eligible("a.weight") and not desc.is_eligible("b.weight") and not desc.is_eligible("c.weight")


@pytest.mark.parametrize(
    "raw, message",
    [
        (_desc_dict(quant_method="gptq"), "quant_method"),
        (_desc_dict(group_size=16), "group_size"),
        (_desc_dict(**{"a.weight": "W4A4_MXFP4"}), "unsupported quant types"),
        ({"quant_method": "ascend", "x.weight": "FLOAT"}, "no tensor is marked"),
        (_desc_dict(**{"a.bias": "W8A8_MXFP8"}), "only weights"),
        (["W8A8_MXFP8"], "JSON object"),
    ],
)
def test_description_rejects_incompatible(raw, message):
    with pytest.raises(MXFP8ConfigError, match=message):
        QuantDescription.from_dict(raw)


def test_description_missing_or_invalid_file(tmp_path):
    with pytest.raises(MXFP8ConfigError, match="no quant_model_description.json"):
        QuantDescription.load(tmp_path)
    (tmp_path / DESCRIPTION_FILE).write_text("{not json")
    with pytest.raises(MXFP8ConfigError, match="not valid JSON"):
        QuantDescription.load(tmp_path)


def test_description_must_match_the_model():
    desc = QuantDescription.from_dict(_desc_dict())
    desc.validate_against({"a.weight": (4, 32), "b.weight": (4,)})
    with pytest.raises(MXFP8ConfigError, match="not described"):
        desc.validate_against({"a.weight": (4, 32), "b.weight": (4,), "c.weight": (2, 2)})
    with pytest.raises(MXFP8ConfigError, match="not matrices"):
        desc.validate_against({"a.weight": (32,), "b.weight": (4,)})


def test_quantize_named_tensors_pairs_and_passthrough():
    desc = QuantDescription.from_dict(_desc_dict())
    a, b = torch.randn(4, 40), torch.randn(4)
    wire = list(mxfp8.quantize_named_tensors([("a.weight", a), ("b.weight", b)], desc))
    names = [n for n, _ in wire]
    assert names == ["a.weight", "a.weight_scale", "b.weight"]
    assert wire[0][1].dtype == torch.float8_e4m3fn and wire[1][1].dtype == torch.uint8
    assert wire[2][1] is b  # untouched, same object
    back = dict(mxfp8.dequantize_named_tensors(wire))
    assert back["b.weight"] is b and back["a.weight"].shape == a.shape
    with pytest.raises(MXFP8ConfigError, match="missing scale"):
        list(mxfp8.dequantize_named_tensors(wire[:1]))


# ----------------------------------------------------------------------------- extension


@pytest.fixture()
def quant_engine(tmp_path):
    from vime.convert import iter_hf_weights, save_train_model_hf
    from vime.model import TrainLM, tiny_config
    from vime.rollout.engine import RolloutEngine

    model = TrainLM(tiny_config(seed=5))
    save_train_model_hf(tmp_path / "ckpt", model)
    engine = RolloutEngine.from_hf(tmp_path / "ckpt")
    desc = mxfp8.describe_model({n: tuple(t.shape) for n, t in engine.named_weights().items()})
    mxfp8.write_description(tmp_path / "ckpt", desc)
    engine.init_weight_transfer_engine({})
    return engine, model, tmp_path / "ckpt", lambda: dict(iter_hf_weights(model))


def _update(engine, weights):
    engine.start_weight_update()
    engine.update_weights(weights)
    return engine.finish_weight_update()


def test_extension_quantises_eligible_weights_and_promotes_version(quant_engine):
    engine, model, ckpt, weights = quant_engine
    ext = MXFP8RolloutExtension.install(engine, ckpt)
    for expected_version in (1, 2):
        assert _update(engine, weights()) == expected_version
        assert ext.events[-2:] == ["prepare", "finalize:ok"]
    sent = weights()
    got = engine.named_weights()
    for name in ext._expected:
        ref = dequantize_mx(*quantize_mx_reference(sent[name]))
        assert torch.equal(got[name], ref), name
        assert not torch.equal(got[name], sent[name])  # really quantised
    untouched = [n for n in sent if n not in ext._expected]
    assert untouched and all(torch.equal(got[n], sent[n]) for n in untouched)
    module = engine.model.get_submodule(ext._expected[0].rsplit(".", 1)[0])
    assert module._mxfp8_transformed is True


def test_failed_update_keeps_old_weights_and_version(quant_engine):
    engine, model, ckpt, weights = quant_engine
    ext = MXFP8RolloutExtension.install(engine, ckpt)
    _update(engine, weights())
    before = {n: t.clone() for n, t in engine.named_weights().items()}
    ext.fault = "drop_scale"
    engine.start_weight_update()
    with pytest.raises(MXFP8ConfigError, match="missing scale"):
        engine.update_weights({n: t * 2 for n, t in weights().items()})
    engine.abort_weight_update()
    assert ext.events[-1] == "finalize:failed"
    assert engine.get_weight_version() == 1
    assert all(torch.equal(before[n], t) for n, t in engine.named_weights().items())


def test_missing_quantised_weight_fails_at_finish(quant_engine):
    engine, model, ckpt, weights = quant_engine
    MXFP8RolloutExtension.install(engine, ckpt)
    w = weights()
    engine.start_weight_update()
    engine.update_weights({n: t for n, t in w.items() if n != "model.layers.0.mlp.up_proj.weight"})
    with pytest.raises(MXFP8ConfigError, match="incomplete"):
        engine.finish_weight_update()
    assert engine.weight_version is None


def test_lifecycle_nested_prepare_and_idempotent_finalize(quant_engine):
    engine, model, ckpt, weights = quant_engine
    ext = MXFP8RolloutExtension.install(engine, ckpt)
    assert MXFP8RolloutExtension.install(engine, ckpt) is ext  # installing twice is a no-op
    ext.prepare()
    with pytest.raises(MXFP8LifecycleError, match="twice"):
        ext.prepare()
    ext.finalize(success=True)
    ext.finalize(success=True)
    assert ext.events == ["prepare", "finalize:ok", "finalize:ok:noop"]


def test_install_fails_closed(quant_engine, tmp_path):
    engine, model, ckpt, weights = quant_engine
    with pytest.raises(MXFP8ConfigError, match="external rollout server"):
        MXFP8RolloutExtension.install(engine, ckpt, external_server=True)
    with pytest.raises(MXFP8ConfigError, match="conflicts"):
        MXFP8RolloutExtension.install(engine, ckpt, worker_extension_cls="my.pkg.Extension")
    with pytest.raises(MXFP8ConfigError, match="no quant_model_description"):
        MXFP8RolloutExtension.install(engine, tmp_path)
    engine.worker_extension = object()
    with pytest.raises(MXFP8ConfigError, match="refusing to stack"):
        MXFP8RolloutExtension.install(engine, ckpt)
    with pytest.raises(MXFP8ConfigError, match="needs --hf-checkpoint"):
        mxfp8.enable_for_engine(engine, None)


def test_description_for_another_model_is_refused(quant_engine, tmp_path):
    engine, model, ckpt, weights = quant_engine
    desc = json.loads((ckpt / DESCRIPTION_FILE).read_text())
    desc["model.layers.9.mlp.up_proj.weight"] = "W8A8_MXFP8"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / DESCRIPTION_FILE).write_text(json.dumps(desc))
    with pytest.raises(MXFP8ConfigError, match="not in the model"):
        MXFP8RolloutExtension.install(engine, tmp_path / "other")


def test_describe_cli_writes_a_valid_description(tmp_path, capsys):
    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    ckpt = save_train_model_hf(tmp_path / "ckpt", TrainLM(tiny_config(moe=True)))
    assert mxfp8.main(["describe", str(ckpt)]) == 0
    desc = QuantDescription.load(ckpt)
    assert desc.is_eligible("model.layers.0.block_sparse_moe.experts.1.w2.weight")
    assert not desc.is_eligible("model.layers.0.block_sparse_moe.gate.weight")
    assert not desc.is_eligible("model.embed_tokens.weight")
    assert "W8A8_MXFP8" in capsys.readouterr().out


def test_driver_refuses_a_conflicting_worker_extension(quant_engine, capsys):
    from vime.train import main

    _, _, ckpt, _ = quant_engine
    code = main(["--colocate", "--num-rollout", "1", "--hf-checkpoint", str(ckpt), "--vllm-quantization", "ascend",
                 "--vllm-worker-extension-cls", "my.pkg.Extension"])
    assert code == 2 and "conflicts with the MXFP8 worker extension" in capsys.readouterr().err


def test_activations_are_mx_quantised_in_the_rollout_forward(quant_engine):
    engine, model, ckpt, weights = quant_engine
    ext = MXFP8RolloutExtension.install(engine, ckpt)
    _update(engine, weights())
    name = ext._expected[0]
    module = engine.model.get_submodule(name.rsplit(".", 1)[0])
    seen = {}
    def keep_input(m, args, out):
        seen.setdefault("x", args[0])  # returns None: the output stays untouched

    handle = module.register_forward_hook(keep_input)
    prompts = torch.randint(0, 256, (2, 6), generator=torch.Generator().manual_seed(0))
    with_a8 = engine.model(prompts)
    handle.remove()
    x = seen["x"]  # what the linear layer actually received, after the pre-hook
    assert torch.equal(dequantize_mx(*quantize_mx_reference(x)), x)  # already on the MX grid
    for h in ext._hooks:
        h.remove()
    without_a8 = engine.model(prompts)
    assert not torch.equal(with_a8, without_a8)
    assert ext.summary()["activations"] is True
