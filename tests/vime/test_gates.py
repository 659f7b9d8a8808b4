"""Gate registry behaviour and G1-G3: each passes on a healthy runtime and fails on its fault knob."""

from __future__ import annotations

import sys
import types

import pytest

import vime.gates as gates
from vime.gates import GATES, GateSpec, run_gate, run_gates
from vime.gates.common import Check, GateOutcome, GateSkip, metrics_close, outcome, tolerance
from vime.results import GateResult


def test_registry_lists_all_l3_gates():
    assert list(GATES) == [f"G{i}" for i in range(1, 10)]
    assert all(spec.level == "L3" and ":" in spec.target for spec in GATES.values())


def _fake_gate_module(monkeypatch, name, fn):
    mod = types.ModuleType(name)
    mod.run = fn
    monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setitem(GATES, "GX", GateSpec("GX", "fake", f"{name}:run"))


def test_skip_error_and_missing_module_paths(monkeypatch):
    def skipper(device, dtype):
        raise GateSkip("needs an NPU")

    _fake_gate_module(monkeypatch, "fake_gate_skip", skipper)
    r = run_gate("GX", device="cpu")
    assert (r.verdict, r.reason, r.device, r.dtype) == ("skip", "needs an NPU", "cpu", "float32")

    def broken(device, dtype):
        raise ZeroDivisionError("boom")

    _fake_gate_module(monkeypatch, "fake_gate_err", broken)
    r = run_gate("GX", device="cpu")
    assert r.verdict == "error" and "ZeroDivisionError: boom" in r.reason and "Traceback" in r.traceback

    monkeypatch.setitem(GATES, "GX", GateSpec("GX", "absent", "vime.gates.g_absent:run"))
    r = run_gate("GX", device="cpu")
    assert r.verdict == "error" and "not in this build" in r.reason

    assert run_gate("G99").verdict == "error"


def test_knobs_reach_the_gate_and_outcome_is_copied(monkeypatch):
    seen = {}

    def gate(device, dtype, *, flag=False):
        seen.update(device=device, dtype=dtype, flag=flag)
        return GateOutcome("fail", {"x": 1}, {"x": 0}, reason="x too big")

    _fake_gate_module(monkeypatch, "fake_gate_knob", gate)
    r = run_gate("GX", device="cpu", dtype="bfloat16", flag=True)
    assert seen == {"device": "cpu", "dtype": "bfloat16", "flag": True}
    assert (r.verdict, r.values, r.thresholds, r.reason) == ("fail", {"x": 1}, {"x": 0}, "x too big")
    assert isinstance(r, GateResult) and r.duration_s >= 0


def test_unavailable_device_is_a_skip():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    r = run_gate("G1", device="cuda")
    assert r.verdict == "skip" and "not available" in r.reason


def test_outcome_and_metric_helpers():
    ok = outcome([Check("a", True, 1, 2), Check("b", True)])
    assert ok.verdict == "pass" and ok.values["a"] == 1 and ok.thresholds["a"] == 2
    bad = outcome([Check("a", True), Check("b", False, 3, 1, "3 > 1")])
    assert bad.verdict == "fail" and bad.reason == "b: 3 > 1" and bad.values["checks"] == {"a": True, "b": False}
    assert metrics_close([{"x": 1.0}], [{"x": 1.0}], 0.0) == (True, 0.0)
    assert metrics_close([{"x": 1.0}], [{"x": 1.01}], 0.0)[0] is False
    assert metrics_close([{"x": 1.0}], [{"x": 1.01}], 0.02)[0] is True
    assert metrics_close([{"x": 1.0}], [{"y": 1.0}], 1.0)[0] is False
    assert tolerance("cpu", "float32").bitwise and not tolerance("npu", "bfloat16").bitwise
    with pytest.raises(GateSkip, match="no tolerance"):
        tolerance("cpu", "int8")


def test_g1_passes_and_detects_a_perturbed_engine():
    good = run_gate("G1", device="cpu")
    assert good.verdict == "pass", good.reason
    assert good.values["train_rollout_logprob_abs_diff"] <= 1e-6
    assert good.values["ppo_kl_step_0"] == 0.0
    bad = run_gate("G1", device="cpu", perturb_engine=1e-3)
    assert bad.verdict == "fail" and "train_rollout_logprob_abs_diff" in bad.reason


def test_g1_other_kernel_and_moe_stay_within_tolerance():
    assert run_gate("G1", device="cpu", attention="eager").verdict == "pass"
    assert run_gate("G1", device="cpu", moe=True).verdict == "pass"


def test_g2_passes_and_a_changed_seed_fails():
    good = run_gate("G2", device="cpu")
    assert good.verdict == "pass", good.reason
    assert good.values["achieved"] == "bitwise"
    bad = run_gate("G2", device="cpu", seed_offset=1)
    assert bad.verdict == "fail" and "tokens_identical" in bad.reason


def test_g3_passes_and_lost_optimizer_state_fails():
    good = run_gate("G3", device="cpu")
    assert good.verdict == "pass", good.reason
    bad = run_gate("G3", device="cpu", lose_optimizer_state=True)
    assert bad.verdict == "fail"
    assert bad.values["checks"]["state_after_load_equals_saved"] is False
    assert bad.values["checks"]["per_rollout_state_digests_equal"] is False
    rng = run_gate("G3", device="cpu", lose_rng_state=True)
    assert rng.verdict == "fail" and "flags_loaded_optim_rng_not_finetune" in rng.reason


def test_run_gates_runs_the_requested_ids_in_order():
    results = run_gates(["G1", "G99"], device="cpu")
    assert [(r.gate, r.verdict) for r in results] == [("G1", "pass"), ("G99", "error")]
    assert gates.DEFAULT_DTYPE == "float32"


@pytest.mark.slow
def test_g3_with_b1_in_a_fresh_process():
    r = run_gate("G3", device="cpu", fresh_process=True)
    assert r.verdict == "pass", r.reason
    assert r.values["fresh_process"] is True and r.values["achieved"] == "bitwise"
