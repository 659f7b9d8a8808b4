"""G3 save -> load -> resume continuity (vime's resume audit, scaled down).

Run A: N rollouts straight through. Run B0: the same arguments with --save every k rollouts, stopped
after rollout k-1 (--num-rollout unchanged). Run B1: fresh objects, --load from B0, runs rollouts
k..N-1. Live generation is comparable after resume because every sample's seed derives from
(rollout seed, rollout id, sample index).

Asserted: B1 starts at rollout k; the optimizer and RNG were loaded and it was not a finetune load;
B1's state after loading (params, optimizer moments + step, scheduler, RNG, data cursor) equals
B0's final state; per-rollout digests of params, optimizer, scheduler, RNG, gradients and data cursor
and every logged metric of A equal those of B0 then B1; sampled tokens equal; every update changed
the parameters with grad_norm > 0. CPU: bit-exact; accelerators: digests are the target, metrics
within the device tolerance otherwise.

The run crosses an epoch boundary of the data source (6 prompts, 4 per rollout: rollout 1 ends
epoch 0 and starts epoch 1, and B1 resumes inside epoch 1), and after every rollout the gate draws
one number from each RNG stream (python, numpy, torch CPU, and the device generator) into the
metrics, as dropout or a data sampler would: a stream that is not saved or not restored then
changes B1's numbers and its RNG digest.

Knobs: `lose_optimizer_state` (B1 resumes with --no-load-optim: must fail), `lose_rng_state`
(--no-load-rng), `n`, `k`, `fresh_process` (run B1 in a new interpreter, as production's audit does;
off by default because it costs an interpreter start, about 2-3 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import torch

from vime.gates.common import Check, GateOutcome, gate_argv, metrics_close, outcome, quiet, tolerance

NUM_PROMPTS = 6  # with 4 prompts per rollout, rollout 1 crosses into epoch 1
AUDIT_KEYS = ("params", "optimizer", "optimizer_steps", "scheduler", "rng", "grads", "data")
STATE_KEYS = ("params", "optimizer", "optimizer_steps", "scheduler", "rng", "data")


def consume_rng(device: str):
    """after_train hook: one draw from every RNG stream, reported as metrics."""
    import random

    import numpy as np

    def draw(_rollout_id: int) -> dict:
        values = {"rng/python": random.random(), "rng/numpy": float(np.random.random()),
                  "rng/torch_cpu": float(torch.rand(()))}
        if device != "cpu":
            from vime.platform import get_platform

            values["rng/device"] = float(torch.rand((), device=get_platform(device).device()))
        return values

    return draw


def _child(argv_json: str, out_path: str, threads: int, device: str = "cpu") -> None:
    """Entry point of the fresh-process B1: run, then write what the parent compares as JSON."""
    from vime.arguments import parse_args
    from vime.train import run as train_run

    torch.set_num_threads(threads)
    r = train_run(parse_args(json.loads(argv_json)), log=quiet, audit=True, after_train=consume_rng(device))
    loaded = r.loaded
    data = {
        "start_rollout_id": r.start_rollout_id, "audit": r.audit, "initial_audit": r.initial_audit,
        "rollout_metrics": r.rollout_metrics, "step_metrics": r.step_metrics,
        "tokens": [t.tolist() for t in r.tokens], "pid": os.getpid(),
        "loaded": None if loaded is None else {
            "loaded_optim": loaded.loaded_optim, "loaded_rng": loaded.loaded_rng, "finetune": loaded.finetune},
    }
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)


def _run_fresh_process(argv: list[str], tmp: str, device: str):
    out = os.path.join(tmp, "b1.json")
    code = (f"from vime.gates.g3_resume import _child; "
            f"_child({json.dumps(json.dumps(argv))}, {out!r}, {torch.get_num_threads()}, {device!r})")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"resumed run B1 failed in its own process (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    with open(out, encoding="utf-8") as fh:
        data = json.load(fh)
    data["tokens"] = [torch.tensor(t) for t in data["tokens"]]
    data["loaded"] = None if data["loaded"] is None else SimpleNamespace(**data["loaded"])
    return SimpleNamespace(**data)


def run(device: str, dtype: str, *, n: int = 4, k: int = 2, lose_optimizer_state: bool = False,
        lose_rng_state: bool = False, fresh_process: bool = False) -> GateOutcome:
    from vime.arguments import parse_args
    from vime.train import run as train_run

    if not 0 < k < n:
        raise ValueError(f"need 0 < k < n, got k={k} n={n}")
    tol = tolerance(device, dtype)
    base = gate_argv(device, dtype, "--num-prompts", str(NUM_PROMPTS), num_rollout=n)
    hook = consume_rng(device)
    with tempfile.TemporaryDirectory(prefix="vime-g3-") as tmp:
        a = train_run(parse_args(base), log=quiet, audit=True, after_train=hook)
        b0 = train_run(parse_args(base + ["--save", tmp, "--save-interval", str(k)]), log=quiet, audit=True,
                       stop_after_rollout=k - 1, after_train=hook)
        resume = ["--load", tmp]
        if lose_optimizer_state:
            resume.append("--no-load-optim")
        if lose_rng_state:
            resume.append("--no-load-rng")
        if fresh_process:
            b1 = _run_fresh_process(base + resume, tmp, device)
        else:
            b1 = train_run(parse_args(base + resume), log=quiet, audit=True, after_train=hook)

    loaded = b1.loaded
    joined_audit = b0.audit + b1.audit
    per_rollout = [
        all(x[key] == y[key] for key in AUDIT_KEYS) for x, y in zip(a.audit, joined_audit)
    ] if len(a.audit) == len(joined_audit) else [False]
    first_bad = next((i for i, ok in enumerate(per_rollout) if not ok), None)
    bad_keys = (
        [key for key in AUDIT_KEYS if a.audit[first_bad][key] != joined_audit[first_bad][key]]
        if first_bad is not None and len(a.audit) == len(joined_audit) else []
    )
    handoff = bool(b0.audit) and all(b1.initial_audit.get(key) == b0.audit[-1][key] for key in STATE_KEYS)
    metrics_a = a.rollout_metrics + a.step_metrics
    metrics_b = b0.rollout_metrics + b1.rollout_metrics + b0.step_metrics + b1.step_metrics
    exact, worst = metrics_close(metrics_a, metrics_b, 0.0)
    close, _ = metrics_close(metrics_a, metrics_b, tol.metric_rtol)
    tokens_equal = len(a.tokens) == n and all(torch.equal(x, y) for x, y in zip(a.tokens, b0.tokens + b1.tokens))
    params_chain = [a.initial_audit["params"]] + [r["params"] for r in a.audit]
    every_step_changes = len(set(params_chain)) == len(params_chain)
    grad_norms_positive = all(s["train/grad_norm"] > 0 for s in a.step_metrics + b0.step_metrics + b1.step_metrics)

    per_rollout_prompts = parse_args(base).rollout_batch_size
    crossed = [i for i in range(1, n) if (i * per_rollout_prompts) // NUM_PROMPTS != ((i + 1) * per_rollout_prompts - 1) // NUM_PROMPTS]
    resumed_epoch = (k * per_rollout_prompts) // NUM_PROMPTS
    checks = [
        Check("crosses_epoch_and_resumes_inside_later_epoch", bool(crossed) and resumed_epoch >= 1, resumed_epoch, ">= 1"),
        Check("resumed_at_rollout_k", b1.start_rollout_id == k, b1.start_rollout_id, k),
        Check("flags_loaded_optim_rng_not_finetune",
              bool(loaded and loaded.loaded_optim and loaded.loaded_rng and not loaded.finetune),
              None if loaded is None else {"optim": loaded.loaded_optim, "rng": loaded.loaded_rng, "finetune": loaded.finetune},
              {"optim": True, "rng": True, "finetune": False}),
        Check("state_after_load_equals_saved", handoff, handoff, True),
        Check("tokens_identical", tokens_equal, tokens_equal, True),
        Check("every_update_changes_params", every_step_changes, every_step_changes, True),
        Check("grad_norm_positive", grad_norms_positive, grad_norms_positive, True),
    ]
    if tol.bitwise:
        checks += [
            Check("per_rollout_state_digests_equal", first_bad is None, first_bad, None,
                  f"rollout {first_bad} differs in {bad_keys}"),
            Check("metrics_identical", exact, worst, 0.0, f"worst relative difference {worst:.3e}"),
        ]
    else:
        checks.append(Check("metrics_within_tolerance", close, worst, tol.metric_rtol))
    return outcome(checks, values={
        "achieved": "bitwise" if first_bad is None and exact else "tolerance",
        "n": n, "k": k, "final_params_sha256": a.final_params_sha256, "fresh_process": fresh_process,
    })
