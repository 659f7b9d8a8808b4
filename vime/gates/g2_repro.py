"""G2 reproducibility: two driver runs with the same --seed / --rollout-seed give identical sampled
tokens, identical metric dicts and identical sha256 of the final parameters; a run with a different
seed must give different tokens (so the check cannot pass by ignoring the seed).

CPU: bit-exact. CUDA/NPU: bit-exact is the target (recorded as `achieved`); otherwise metrics must
agree within the device tolerance (`metric_rtol`) and tokens must still match.

Sampling seeds, checked on the engine directly (a driver run cannot tell them apart: a different
--seed also changes the initial weights): the same call twice gives the same tokens; changing only
the rollout id, only --rollout-seed, or only the sample index (the n samples of one prompt) changes
every sample; and a sample's tokens do not depend on the rest of its batch.

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


def _seed_checks(device: str, dtype: str) -> tuple[list[Check], dict]:
    from vime.convert import iter_hf_weights
    from vime.model import TrainLM, tiny_config
    from vime.platform import get_platform
    from vime.rollout.engine import RolloutEngine

    config = tiny_config()
    weights = {n: t.detach().clone() for n, t in iter_hf_weights(TrainLM(config))}
    engine = RolloutEngine(config, device=get_platform(device).device(), dtype=getattr(torch, dtype), hf_weights=weights)
    prompt = torch.randint(0, config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(3))
    rows = prompt.repeat(4, 1)  # one prompt, 4 samples (a GRPO group)

    def gen(batch=rows, **kw):
        base = {"max_new_tokens": 12, "temperature": 1.0, "rollout_seed": 42, "rollout_id": 0}
        return engine.generate(batch, **{**base, **kw}).response_tokens.cpu()

    ref = gen()
    again = gen()
    other_id = gen(rollout_id=1)
    other_seed = gen(rollout_seed=43)
    alone = gen(batch=rows[2:3], sample_indices=[2])
    all_rows_differ = lambda a, b: bool((a != b).any(-1).all())  # noqa: E731
    group_distinct = len({tuple(r.tolist()) for r in ref}) == ref.shape[0]
    checks = [
        Check("seed.same_call_same_tokens", torch.equal(ref, again), detail="two identical generate() calls sampled different tokens"),
        Check("seed.rollout_id_changes_tokens", all_rows_differ(ref, other_id),
              detail="rollout ids 0 and 1 sampled the same tokens: the per-sample seed ignores the rollout id"),
        Check("seed.rollout_seed_changes_tokens", all_rows_differ(ref, other_seed),
              detail="--rollout-seed 42 and 43 sampled the same tokens"),
        Check("seed.group_samples_distinct", group_distinct,
              detail="the samples of one prompt are identical: the seed ignores the sample index"),
        Check("seed.batch_independent", torch.equal(alone[0], ref[2]),
              detail="sample 2 alone differs from sample 2 in its batch"),
    ]
    return checks, {"seed.group_distinct": group_distinct}


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
    seed_checks, seed_values = _seed_checks(device, dtype)
    checks += seed_checks
    return outcome(checks, values={**seed_values,
        "achieved": "bitwise" if bitwise else "tolerance",
        "params_sha256": a.final_params_sha256,
        "rollouts": num_rollout,
        "seed_offset": seed_offset,
    })
