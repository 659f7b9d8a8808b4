"""G2 reproducibility: two driver runs with the same --seed / --rollout-seed give identical sampled
tokens, identical metric dicts and identical sha256 of the final parameters; a run with a different
seed must give different tokens (so the check cannot pass by ignoring the seed).

CPU: bit-exact. CUDA/NPU: bit-exact is the target (recorded as `achieved`); otherwise metrics must
agree within the device tolerance (`metric_rtol`) and tokens must still match.

Knobs: `seed_offset` (run B uses seed + offset: any non-zero value must fail), `num_rollout`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch

from vime.gates.common import Check, GateOutcome, gate_argv, metrics_close, outcome, quiet, tolerance


def _run(device: str, dtype: str, seed: int, rollout_seed: int, num_rollout: int):
    from vime.arguments import parse_args
    from vime.train import run

    args = parse_args(gate_argv(device, dtype, num_rollout=num_rollout, seed=seed, rollout_seed=rollout_seed))
    return run(args, log=quiet)


@contextmanager
def _deterministic(device: str):
    """CUDA's recipe for bit-exact runs: deterministic algorithms + a fixed cuBLAS workspace (the env
    var only takes effect if cuBLAS was not initialised yet; `achieved` records what happened)."""
    if device != "cuda":
        yield
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def run(device: str, dtype: str, *, seed_offset: int = 0, num_rollout: int = 2) -> GateOutcome:
    tol = tolerance(device, dtype)
    with _deterministic(device):
        a = _run(device, dtype, 1234, 42, num_rollout)
        b = _run(device, dtype, 1234 + seed_offset, 42 + seed_offset, num_rollout)
        c = _run(device, dtype, 4321, 24, num_rollout)

    tokens_equal = len(a.tokens) == len(b.tokens) and all(torch.equal(x, y) for x, y in zip(a.tokens, b.tokens))
    metrics_a, metrics_b = a.rollout_metrics + a.step_metrics, b.rollout_metrics + b.step_metrics
    bitwise_metrics, worst = metrics_close(metrics_a, metrics_b, 0.0)
    close_metrics, _ = metrics_close(metrics_a, metrics_b, tol.metric_rtol)
    params_equal = a.final_params_sha256 == b.final_params_sha256
    bitwise = tokens_equal and bitwise_metrics and params_equal
    tokens_differ = not all(torch.equal(x, y) for x, y in zip(a.tokens, c.tokens))

    checks = [Check("tokens_identical", tokens_equal, tokens_equal, True)]
    if tol.bitwise:
        checks += [
            Check("metrics_identical", bitwise_metrics, worst, 0.0, f"worst relative difference {worst:.3e}"),
            Check("params_sha256_identical", params_equal, params_equal, True,
                  f"{a.final_params_sha256[:12]} != {b.final_params_sha256[:12]}"),
        ]
    else:
        checks.append(Check("metrics_within_tolerance", close_metrics, worst, tol.metric_rtol))
    checks.append(Check("different_seed_changes_tokens", tokens_differ, tokens_differ, True,
                        "a run with another seed sampled the same tokens: the seed is ignored"))
    return outcome(checks, values={
        "achieved": "bitwise" if bitwise else "tolerance",
        "params_sha256": a.final_params_sha256,
        "rollouts": num_rollout,
        "seed_offset": seed_offset,
    })
