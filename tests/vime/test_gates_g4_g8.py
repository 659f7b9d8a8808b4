"""Gates G4-G8: each passes on a healthy runtime and fails when its fault knob breaks the mechanism."""

from __future__ import annotations

import importlib.util

import pytest

from vime.gates import run_gate


def _run(gate, **knobs):
    result = run_gate(gate, device="cpu", dtype="float32", **knobs)
    assert result.verdict in ("pass", "fail", "skip"), f"{gate} {knobs}: {result.verdict} {result.reason}\n{result.traceback}"
    return result


def test_g4_passes_for_both_transports():
    r = _run("G4")
    assert r.verdict == "pass", r.reason
    for tag in ("colocated.packed", "colocated.per_tensor", "broadcast.packed", "broadcast.per_tensor"):
        assert r.values["checks"][f"{tag}.fingerprints_exact"] and r.values[tag]["ok"]
    assert r.values["broadcast.backend"] == "gloo"


@pytest.mark.parametrize("fault, failing", [("corrupt", "fingerprints_exact"), ("drop", "version_step")])
def test_g4_fails_on_a_broken_sync(fault, failing):
    r = _run("G4", fault=fault, transports=("colocated",))
    assert r.verdict == "fail"
    assert r.values["checks"][f"colocated.packed.{failing}"] is False


def test_g5_passes_with_bounds_and_iterations():
    r = _run("G5")
    assert r.verdict == "pass", r.reason
    assert r.values["format.worst_error_over_bound"] <= 1.0
    for tag in ("colocated.iter0", "colocated.iter1", "broadcast.iter0", "broadcast.iter1"):
        assert r.values[tag]["ok"]
    assert r.values["broadcast.iter1"]["version"] == 2
    assert "bf16_engine_vs_trainer" in " ".join(r.values)


@pytest.mark.parametrize(
    "fault, failing",
    [("bad_scale", "format.normal.error_within_bound"), ("drop_scale", "colocated.iter0.version_step"),
     ("skip_quant", "colocated.iter0.ok")],
)
def test_g5_fails_on_broken_quantisation(fault, failing):
    r = _run("G5", fault=fault, transports=("colocated",))
    assert r.verdict == "fail" and r.values["checks"][failing] is False


def test_g6_passes():
    r = _run("G6")
    assert r.verdict == "pass", r.reason
    assert r.values["greedy.draft_model"]["identical"] and r.values["sampling"]["p_value"] >= 1e-3


def test_g6_fails_on_biased_sampler_and_wrong_greedy_verification():
    biased = _run("G6", fault="no_residual", parts=("sampling",))
    assert biased.verdict == "fail" and biased.values["sampling"]["min_p_value"] < 1e-6
    greedy = _run("G6", fault="accept_all", parts=("greedy",))
    assert greedy.verdict == "fail" and not greedy.values["greedy.draft_model"]["identical"]


def test_g7_passes_and_measures_mismatch():
    r = _run("G7")
    assert r.verdict == "pass", r.reason
    assert r.values["mismatch.without_replay"]["r3/routing_mismatch_frac"] > 0
    assert r.values["mismatch.with_replay"]["r3/routing_mismatch_frac"] == 0


@pytest.mark.parametrize("fault", ["no_replay", "shuffled"])
def test_g7_fails_without_faithful_replay(fault):
    r = _run("G7", fault=fault)
    assert r.verdict == "fail" and r.values["checks"]["with_replay.routing_equal"] is False


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers not installed")
def test_g8_passes_and_catches_naming_disagreement():
    assert _run("G8").verdict == "pass"
    assert _run("G8", fault="swap_gate_up", configs=("dense",)).verdict == "fail"


def test_g8_skips_without_transformers(monkeypatch):
    from vime import hf_parity

    monkeypatch.setattr(hf_parity, "transformers_status", lambda: (False, "transformers is not installed"))
    r = _run("G8")
    assert r.verdict == "skip" and "transformers" in r.reason


def test_unknown_fault_is_an_error_not_a_pass():
    assert run_gate("G7", device="cpu", fault="nonsense").verdict == "error"
