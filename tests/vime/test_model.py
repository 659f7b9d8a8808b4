"""vime.model + vime.convert: both layouts compute the same function; conversion is bit-exact;
KV-cache decoding equals a full forward; R3 record/replay; attention seams."""

from __future__ import annotations

import importlib.machinery
import sys
import types

import pytest
import torch

from vime.convert import hf_names, hf_to_train, iter_hf_weights, train_names, train_to_hf
from vime.model import (
    KVCache,
    ModelConfig,
    RolloutLM,
    RoutingReplay,
    TrainLM,
    npu_fusion_attention,
    sdpa_attention,
    tiny_config,
)

CONFIGS = {
    "dense": tiny_config(),
    "gqa": tiny_config(num_kv_heads=2),
    "moe": tiny_config(moe=True),
    "tied": tiny_config(tie_word_embeddings=True),
}


def _pair(config):
    train = TrainLM(config)
    rollout = RolloutLM(config)
    rollout.load_state_dict(dict(iter_hf_weights(train)))
    return train, rollout


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_layouts_compute_the_same_logits(name):
    train, rollout = _pair(CONFIGS[name])
    ids = torch.randint(0, 256, (3, 11), generator=torch.Generator().manual_seed(1))
    assert torch.equal(train(ids), rollout(ids))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_conversion_round_trip_is_bit_exact(name):
    config = CONFIGS[name]
    train = TrainLM(config)
    back = hf_to_train(train_to_hf(train.state_dict(), config), config)
    assert set(back) == set(train_names(config)) == set(train.state_dict())
    assert all(torch.equal(back[k], v) for k, v in train.state_dict().items())


def test_hf_names_are_transformers_llama_names():
    names = set(hf_names(tiny_config()))
    assert set(RolloutLM(tiny_config()).state_dict()) == names
    for expected in (
        "model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
        "model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
    ):
        assert expected in names
    moe = set(hf_names(tiny_config(moe=True)))
    assert "model.layers.0.block_sparse_moe.gate.weight" in moe
    assert "model.layers.1.block_sparse_moe.experts.3.w3.weight" in moe


def test_fused_rows_are_q_k_v_and_gate_up():
    config = tiny_config(num_kv_heads=2)
    train = TrainLM(config)
    hf = dict(iter_hf_weights(train))
    qkv = train.decoder.layers[0].self_attention.linear_qkv.weight
    assert torch.equal(hf["model.layers.0.self_attn.q_proj.weight"], qkv[:64])
    assert torch.equal(hf["model.layers.0.self_attn.v_proj.weight"], qkv[96:])
    fc1 = train.decoder.layers[0].mlp.linear_fc1.weight
    assert torch.equal(hf["model.layers.0.mlp.up_proj.weight"], fc1[128:])


def test_init_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a, b = TrainLM(tiny_config()), TrainLM(tiny_config())
    c = TrainLM(tiny_config(seed=7))
    assert torch.equal(torch.get_rng_state(), before)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.output_layer.weight, c.output_layer.weight)


@pytest.mark.parametrize("name", ["dense", "gqa", "moe"])
def test_kv_cache_decoding_equals_full_forward(name):
    _, model = _pair(CONFIGS[name])
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(3))
    full = model(ids)
    cache = KVCache(model.config, 2, 16, "cpu", torch.float32)
    pieces = [model(ids[:, :5], cache=cache)]  # prefill
    pieces += [model(ids[:, i : i + 1], cache=cache) for i in range(5, 8)]  # decode steps
    pieces.append(model(ids[:, 8:], cache=cache))  # a multi-token block after a cache (spec verify)
    assert cache.length == 12
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)


def test_kv_cache_truncate_and_overflow():
    config = tiny_config()
    cache = KVCache(config, 1, 4, "cpu", torch.float32)
    model = RolloutLM(config, init=True)
    model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
    cache.truncate(1)
    assert cache.length == 1
    with pytest.raises(ValueError, match="KV cache full"):
        model(torch.zeros(1, 4, dtype=torch.long), cache=cache)


def test_routing_record_then_replay_reproduces_and_other_ids_change_output():
    train, rollout = _pair(CONFIGS["moe"])
    ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(4))
    rec = RoutingReplay("record")
    cache = KVCache(rollout.config, 2, 9, "cpu", torch.float32)
    rollout(ids[:, :6], cache=cache, routing=rec)
    for i in range(6, 9):
        rollout(ids[:, i : i + 1], cache=cache, routing=rec)
    recorded = rec.recorded()
    assert set(recorded) == {0, 1} and recorded[0].shape == (2, 9, 2)

    replay = RoutingReplay("replay", recorded)
    out = train(ids, routing=replay)
    replay.assert_all_consumed()
    torch.testing.assert_close(out, train(ids), rtol=0, atol=1e-5)

    flipped = {layer: (ids_ + 1) % 4 for layer, ids_ in recorded.items()}
    assert not torch.allclose(train(ids, routing=RoutingReplay("replay", flipped)), out)
    short = RoutingReplay("replay", {layer: r[:, :4] for layer, r in recorded.items()})
    with pytest.raises(ValueError, match="cannot replay"):
        train(ids, routing=short)
    partial = RoutingReplay("replay", recorded)
    train(ids[:, :5], routing=partial)
    with pytest.raises(AssertionError, match="used 5 of 9"):
        partial.assert_all_consumed()


def test_replay_keeps_router_gradients():
    train, _ = _pair(CONFIGS["moe"])
    ids = torch.randint(0, 256, (1, 5))
    rec = RoutingReplay("record")
    train(ids, routing=rec)
    train(ids, routing=RoutingReplay("replay", rec.recorded())).sum().backward()
    assert train.decoder.layers[0].mlp.router.weight.grad.abs().sum() > 0


def test_config_validation():
    with pytest.raises(ValueError, match="not a multiple"):
        ModelConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        ModelConfig(num_experts=2, num_experts_per_tok=3)
    assert ModelConfig.from_dict({**tiny_config().to_dict(), "unknown": 1}) == tiny_config()


def test_attention_registry_and_npu_seam(monkeypatch):
    q = torch.randn(1, 4, 3, 16)
    k = v = torch.randn(1, 4, 5, 16)
    calls = {}

    def fake_fusion(q_, k_, v_, head_num, layout, **kw):
        calls.update(head_num=head_num, layout=layout, **kw)
        return (sdpa_attention(q_, k_, v_, kw["scale"]),)

    mod = types.ModuleType("torch_npu")
    mod.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    mod.npu_fusion_attention = fake_fusion
    monkeypatch.setitem(sys.modules, "torch_npu", mod)
    out = npu_fusion_attention(q, k, v, 0.25)
    assert calls["layout"] == "BNSD" and calls["head_num"] == 4 and calls["keep_prob"] == 1.0
    # NPU masks are True where attention is forbidden: query 0 (position 2) must not see keys 3, 4
    assert calls["atten_mask"][0].tolist() == [False, False, False, True, True]
    assert torch.equal(out, sdpa_attention(q, k, v, 0.25))
    with pytest.raises(ValueError, match="unknown attention"):
        RolloutLM(tiny_config(attention="flash"), init=True)(torch.zeros(1, 2, dtype=torch.long))


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=12, deadline=None)
@given(
    layers=st.integers(1, 3),
    heads_kv=st.sampled_from([(4, 4), (4, 2), (4, 1), (2, 2)]),
    experts=st.sampled_from([0, 2, 4]),
    tie=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_any_small_config_converts_exactly(layers, heads_kv, experts, tie, seed):
    heads, kv = heads_kv
    config = tiny_config(num_layers=layers, num_heads=heads, num_kv_heads=kv, num_experts=experts,
                         num_experts_per_tok=min(2, experts) or 2, tie_word_embeddings=tie, seed=seed)
    train, rollout = _pair(config)
    assert set(rollout.state_dict()) == set(hf_names(config))
    back = hf_to_train(dict(iter_hf_weights(train)), config)
    assert all(torch.equal(back[k], v) for k, v in train.state_dict().items())
    ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(seed))
    assert torch.equal(train(ids), rollout(ids))
