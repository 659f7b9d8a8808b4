"""G4 weight sync: after every training step + sync, the rollout engine holds exactly the trainer's
weights and scores a probe batch like the trainer does.

For each transport (colocated hand-over; decoupled broadcast between two processes) and for packed
and per-tensor buckets:
  * the initial push of the checkpoint weights round-trips bit-exactly: the engine's fingerprint
    snapshot (taken at load) compares equal afterwards (--check-weight-update-equal);
  * after a GRPO step + sync: the update succeeded, the weight version went up by exactly 1, every
    engine parameter was sent exactly once, the engine's weight fingerprints equal those of the
    trainer's HF-converted weights (exact), and the engine's log-probs on a probe batch equal the
    trainer forward within the G1 tolerance for this device/dtype.

Knobs: `fault="corrupt"|"drop"` perturbs or drops one tensor in every push (must fail);
`transports=("colocated", "broadcast")` selects what runs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from vime.gates.common import Check, GateOutcome, GateSkip, outcome, tolerance

TRANSPORTS = ("colocated", "broadcast")


def _iteration_checks(tag: str, report: Any, before: int, names: list[str], fp_diff: dict, gap: dict, tol: Any) -> list[Check]:
    return [
        Check(f"{tag}.ok", report.ok, detail=report.error or "update failed"),
        Check(f"{tag}.version_step", report.version == before + 1, report.version, before + 1),
        Check(
            f"{tag}.all_params_once",
            sorted(report.names) == sorted(names),
            len(report.names),
            len(names),
            detail=f"sent {len(report.names)} tensors ({len(set(report.names))} distinct) for {len(names)} parameters",
        ),
        Check(f"{tag}.fingerprints_exact", not any(fp_diff.values()), fp_diff, "all 0"),
        Check(f"{tag}.logprob_mean", gap["mean"] <= tol.logprob_mean, gap["mean"], tol.logprob_mean),
        Check(f"{tag}.logprob_max", gap["max"] <= tol.logprob_max, gap["max"], tol.logprob_max),
    ]


def _colocated(world: Any, fault: Any, tol: Any, values: dict) -> list[Check]:
    from vime.gates import world as w
    from vime.rollout.engine import RolloutEngine
    from vime.weight_sync import ColocatedSync

    engine = RolloutEngine.from_hf(world.hf_dir, device=world.device, dtype=world.dtype)
    names = list(engine.named_weights())
    checks: list[Check] = []
    engine.check_weights("snapshot")
    sync = ColocatedSync(engine, packed=True, buffer_size=w.SYNC_BUFFER)
    first = sync.push(w.iter_weights(world), fault=fault)
    checks.append(Check("colocated.initial.ok", first.ok, detail=first.error or "initial update failed"))
    try:
        engine.check_weights("compare")
        checks.append(Check("colocated.initial.snapshot_equal", True))
    except AssertionError as exc:
        checks.append(Check("colocated.initial.snapshot_equal", False, detail=str(exc)[:200]))
    for i, packed in enumerate((True, False), start=1):
        w.train_once(world, engine.generate, rollout_id=i)
        sync.packed = packed
        before = int(engine.weight_version or 0)
        report = sync.push(w.iter_weights(world), fault=fault)
        tag = f"colocated.{'packed' if packed else 'per_tensor'}"
        fp = w.fingerprint_diff(w.trainer_fingerprints(world), w.engine_fingerprints(engine))
        gap = w.logprob_gap(engine.compute_logprobs(world.probe_prompt, world.probe_response), w.trainer_probe(world))
        checks += _iteration_checks(tag, report, before, names, fp, gap, tol)
        values[tag] = {**report.to_dict(), "logprob_gap": gap}
    return checks


def _broadcast(world: Any, device: str, fault: Any, tol: Any, values: dict) -> list[Check]:
    from vime.gates import world as w
    from vime.rollout.engine import build_engine
    from vime.weight_sync import BroadcastSync, EngineSpec

    kind = device
    if device != "cpu":
        import torch

        if getattr(torch, device).device_count() < 2:
            # nccl/hccl refuse two ranks on one device; the protocol is still exercised over gloo.
            kind = "cpu"
            values["broadcast.note"] = f"one {device} device visible: decoupled sync ran over gloo with host tensors"
    spec = EngineSpec(
        build_engine, (), {"config": {}, "device": str(world.device) if kind != "cpu" else "cpu",
                           "dtype": str(world.dtype).removeprefix("torch."), "hf_dir": str(world.hf_dir)},
    )
    checks: list[Check] = []
    with BroadcastSync(spec, packed=True, buffer_size=w.SYNC_BUFFER, device_kind=kind, timeout_s=60) as sync:
        values["broadcast.backend"] = sync.backend
        names = list(sync.apply(w.engine_fingerprints))
        sync.call("check_weights", "snapshot")
        first = sync.push(w.iter_weights(world), fault=fault)
        checks.append(Check("broadcast.initial.ok", first.ok, detail=first.error or "initial update failed"))
        try:
            sync.call("check_weights", "compare")
            checks.append(Check("broadcast.initial.snapshot_equal", True))
        except Exception as exc:  # WeightSyncError wraps the engine's WeightCheckError
            checks.append(Check("broadcast.initial.snapshot_equal", False, detail=str(exc).splitlines()[0][:200]))

        def generate(prompts, **kw):
            return sync.call("generate_cpu", prompts, **kw)

        for i, packed in enumerate((True, False), start=1):
            w.train_once(world, generate, rollout_id=i)
            sync.packed = packed
            before = sync.version
            report = sync.push(w.iter_weights(world), fault=fault)
            tag = f"broadcast.{'packed' if packed else 'per_tensor'}"
            fp = w.fingerprint_diff(w.trainer_fingerprints(world), sync.apply(w.engine_fingerprints))
            gap = w.logprob_gap(sync.call("compute_logprobs", world.probe_prompt, world.probe_response), w.trainer_probe(world))
            checks += _iteration_checks(tag, report, before, names, fp, gap, tol)
            values[tag] = {**report.to_dict(), "logprob_gap": gap}
    return checks


def run(device: str, dtype: str, *, fault: str | None = None, transports: tuple[str, ...] = TRANSPORTS) -> GateOutcome:
    from vime.gates import world as w
    from vime.weight_sync import SyncFault

    unknown = set(transports) - set(TRANSPORTS)
    if unknown:
        raise ValueError(f"unknown transports {sorted(unknown)}; use {TRANSPORTS}")
    tol = tolerance(device, dtype)
    sync_fault = SyncFault(fault) if fault else None
    values: dict[str, Any] = {"fault": fault}
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="vime-g4-") as tmp:
        for transport in transports:
            world = w.make_world(Path(tmp) / transport, device, dtype)
            if transport == "colocated":
                checks += _colocated(world, sync_fault, tol, values)
            else:
                checks += _broadcast(world, device, sync_fault, tol, values)
    if not checks:
        raise GateSkip("no transport selected")
    return outcome(
        checks,
        values,
        {"logprob_mean": tol.logprob_mean, "logprob_max": tol.logprob_max, "version_step": 1, "fingerprints": "exact"},
    )
