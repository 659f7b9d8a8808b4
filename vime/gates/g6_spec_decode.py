"""G6 speculative decoding: the JSON config is validated precisely, greedy output is unchanged by
speculation, sampled output keeps the target distribution, and --draft-save-hf exports atomically.

1. Config: every malformed --vllm-speculative-config of a fixed list is refused with a message that
   names the problem; the valid ones parse.
2. Greedy (temperature 0): the engine's tokens with speculation (n-gram drafts, and a draft model
   loaded from an HF checkpoint through the JSON config) equal its tokens without, for every
   sequence; the reported log-probs agree within the G1 tolerance.
3. Sampling, twice (temperature 0.9; temperature 1.2 with top-k 6 and top-p 0.9): on a small
   vocabulary (V = 8) the joint distribution of the first two generated tokens from N = 3000
   speculative samples (draft = a perturbed copy of the target, so both acceptance and rejection
   happen) is compared with the exact processed target distribution by a chi-square test (cells
   with expected count < 5 merged), fixed seeds, significance 1e-3. The acceptance bookkeeping
   must add up (accepted <= proposed, emitted = generated tokens, rate in (0, 1)).
4. --draft-save-hf: template validation rules hold and an export writes config.json +
   model.safetensors that load back unchanged.

Knobs: `parts` selects sub-checks (default all); `fault="no_residual"` (after a rejection, sample
from p instead of norm(max(0, p - q)): biased; the chi-square must catch it) and
`fault="accept_all"` (greedy verification keeps every draft: greedy output changes).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from vime.gates.common import Check, GateOutcome, outcome, tolerance

ALPHA = 1e-3
N_SAMPLES = 3000
SMALL_VOCAB = 8
BAD_CONFIGS: list[tuple[str, str]] = [
    ('{"method": "ngram", "num_speculative_tokens": 3', "not valid JSON"),
    ('["ngram"]', "must be a JSON object"),
    ('{"num_speculative_tokens": 3}', "'method' is required"),
    ('{"method": "medusa", "num_speculative_tokens": 3}', "is not one of"),
    ('{"method": "eagle", "num_speculative_tokens": 3}', "needs 'model'"),
    ('{"method": "ngram"}', "'num_speculative_tokens' is required"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "must be >= 1"),
    ('{"method": "ngram", "num_speculative_tokens": "3"}', "must be an integer"),
    ('{"method": "ngram", "num_speculative_tokens": true}', "must be an integer"),
    ('{"method": "ngram", "num_speculative_tokens": 3, "num_spec_tokens": 2}', "did you mean"),
    ('{"method": "dspark", "model": "/d", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 0}', "must be >= 1"),
    ('{"method": "ngram", "model": "/d", "num_speculative_tokens": 2}', "takes no 'model'"),
]
GOOD_CONFIGS = [
    '{"method": "ngram", "num_speculative_tokens": 3}',
    '{"method": "mtp", "num_speculative_tokens": 1}',
    '{"method": "dspark", "model": "/ckpt/draft", "num_speculative_tokens": 4, "draft_tensor_parallel_size": 1}',
    '{"method": "eagle", "model": "/ckpt/eagle", "num_speculative_tokens": 2}',
    '{"method": "draft_model", "model": "/ckpt/small", "num_speculative_tokens": 5}',
]


def _config_checks(values: dict) -> list[Check]:
    from vime.spec_decode import SpeculativeConfigError, parse_speculative_config

    wrong = []
    for text, expected in BAD_CONFIGS:
        try:
            parse_speculative_config(text)
            wrong.append(f"accepted {text}")
        except SpeculativeConfigError as exc:
            if expected not in str(exc):
                wrong.append(f"{text}: message {str(exc)!r} lacks {expected!r}")
    for text in GOOD_CONFIGS:
        try:
            parse_speculative_config(text)
        except SpeculativeConfigError as exc:
            wrong.append(f"refused {text}: {exc}")
    values["config.cases"] = len(BAD_CONFIGS) + len(GOOD_CONFIGS)
    return [Check("config.validation", not wrong, len(wrong), 0, detail="; ".join(wrong)[:300])]


def _perturbed(weights: dict[str, torch.Tensor], scale: float, seed: int) -> dict[str, torch.Tensor]:
    """A draft close to the target: matrices get relative Gaussian noise, norms stay."""
    gen = torch.Generator().manual_seed(seed)
    return {n: t + scale * t.std() * torch.randn(t.shape, generator=gen) if t.dim() > 1 else t.clone() for n, t in weights.items()}


def _greedy_checks(tmp: Path, device: str, dtype: str, fault: str | None, values: dict) -> list[Check]:
    from vime.convert import iter_hf_weights, save_hf
    from vime.model import TrainLM, tiny_config
    from vime.rollout.engine import RolloutEngine
    from vime.spec_decode import SpeculativeSetup, resolve

    tol = tolerance(device, dtype)
    config = tiny_config()
    hf = {n: t.detach().clone() for n, t in iter_hf_weights(TrainLM(config))}
    torch_dtype = getattr(torch, dtype)
    engine = RolloutEngine(config, device=device, dtype=torch_dtype, hf_weights=hf)
    draft_dir = save_hf(tmp / "draft", _perturbed(hf, 0.05, seed=11), config)
    gen = torch.Generator().manual_seed(5)
    # Repetitive prompts give the n-gram proposer something to find.
    base = torch.randint(0, config.vocab_size, (6, 4), generator=gen)
    prompts = torch.cat([base, base, base[:, :2]], dim=1)
    plain = engine.generate(prompts, max_new_tokens=24, temperature=0)
    checks: list[Check] = []
    configs = {
        "ngram": json.dumps({"method": "ngram", "num_speculative_tokens": 3}),
        "draft_model": json.dumps({"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": 4}),
    }
    for label, text in configs.items():
        spec: Any = text  # the JSON string, exactly as --vllm-speculative-config passes it
        if fault is not None:
            ready = resolve(text, engine)
            spec = SpeculativeSetup(ready.config, ready.proposer, fault=fault)
        out = engine.generate(prompts, max_new_tokens=24, temperature=0, speculative=spec)
        stats = out.stats["spec_decode"]
        same = torch.equal(out.response_tokens, plain.response_tokens)
        gap = float((out.logprobs - plain.logprobs).abs().max())
        values[f"greedy.{label}"] = {"identical": same, "logprob_max_diff": gap, **{k: stats[k] for k in ("acceptance_rate", "mean_accepted_length")}}
        checks.append(Check(f"greedy.{label}.identical", same, detail="speculative greedy tokens differ from plain greedy"))
        checks.append(Check(f"greedy.{label}.logprobs", gap <= tol.logprob_max, gap, tol.logprob_max))
        checks.append(Check(f"greedy.{label}.speculated", stats["proposed"] > 0 and stats["accepted"] > 0, stats["accepted"], "> 0",
                            detail="no draft was accepted: the comparison did not exercise speculation"))
    return checks


def _chi_square(observed: torch.Tensor, expected: torch.Tensor) -> tuple[float, int, float]:
    """Pearson's statistic with cells of expected count < 5 merged; returns (stat, dof, p-value)."""
    keep = expected >= 5
    obs = torch.cat([observed[keep], observed[~keep].sum().reshape(1)])
    exp = torch.cat([expected[keep], expected[~keep].sum().reshape(1)])
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = int(obs.numel()) - 1
    p = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))
    return stat, dof, p


def _distribution_checks(device: str, fault: str | None, values: dict) -> list[Check]:
    from vime.convert import iter_hf_weights
    from vime.model import TrainLM, tiny_config
    from vime.rollout.engine import RolloutEngine
    from vime.spec_decode import DraftModelProposer, Sampler, SpeculativeSetup, parse_speculative_config

    v = SMALL_VOCAB
    # A peaked target on a small vocabulary (larger init std), so a biased sampler shows.
    config = tiny_config(vocab_size=v, hidden_size=32, num_heads=2, num_kv_heads=2, intermediate_size=64,
                         num_layers=1, init_std=0.3, seed=3)
    hf = {n: t.detach().clone() for n, t in iter_hf_weights(TrainLM(config))}
    target = RolloutEngine(config, device=device, hf_weights=hf)
    draft = RolloutEngine(config, device=device, hf_weights=_perturbed(hf, 0.3, seed=4))
    setup = SpeculativeSetup(
        parse_speculative_config({"method": "draft_model", "model": "<in-memory>", "num_speculative_tokens": 3}),
        DraftModelProposer(lambda toks: draft.model(toks)),
        fault=fault,
    )
    prompt = [1, 2, 3, 4]
    checks: list[Check] = []
    # Plain temperature, then temperature + top-k + top-p: the processed distribution must survive too.
    for label, sampler, seed in (("sampling", Sampler(0.9), 7), ("sampling.topk_topp", Sampler(1.2, 6, 0.9), 8)):
        with torch.no_grad():
            p1 = sampler.logprobs(target.model(torch.tensor([prompt], device=device))[0, -1]).exp().double().cpu()
            nxt = torch.tensor([prompt + [t] for t in range(v)], device=device)
            p2 = sampler.logprobs(target.model(nxt)[:, -1]).exp().double().cpu()
        joint = (p1[:, None] * p2).reshape(-1)
        out = target.generate(torch.tensor([prompt] * N_SAMPLES), max_new_tokens=2, temperature=sampler.temperature,
                              top_k=sampler.top_k, top_p=sampler.top_p, rollout_seed=seed, speculative=setup)
        toks = out.response_tokens.cpu()
        observed = torch.bincount(toks[:, 0] * v + toks[:, 1], minlength=v * v).double()
        stat, dof, p = _chi_square(observed, joint * N_SAMPLES)
        stats = out.stats["spec_decode"]
        values[label] = {"chi_square": round(stat, 3), "dof": dof, "p_value": p, "samples": N_SAMPLES, "vocab": v,
                         "temperature": sampler.temperature, "top_k": sampler.top_k, "top_p": sampler.top_p, **stats}
        bookkeeping = (
            0 <= stats["accepted"] <= stats["proposed"]
            and stats["emitted"] == int(out.loss_mask.sum())
            and 0 < stats["acceptance_rate"] < 1
        )
        checks += [
            Check(f"{label}.chi_square_p", p >= ALPHA, p, f">= {ALPHA}", detail=f"chi2={stat:.1f} dof={dof} p={p:.2e}"),
            Check(f"{label}.acceptance_bookkeeping", bookkeeping, stats["acceptance_rate"], "(0, 1)"),
        ]
    return checks


def _export_checks(tmp: Path, values: dict) -> list[Check]:
    from safetensors.torch import load_file

    from vime.spec_decode import SpeculativeConfigError, export_draft_hf, parse_speculative_config, validate_draft_save_hf

    spec = parse_speculative_config({"method": "dspark", "model": str(tmp / "draft-in"), "num_speculative_tokens": 2})
    problems = []
    rules = [
        (str(tmp / "dspark-{rollout_id}"), {"spec": parse_speculative_config('{"method":"ngram","num_speculative_tokens":2}')}, "needs"),
        (str(tmp / "dspark-fixed"), {"spec": spec}, "no {rollout_id}"),
        (str(tmp / "dspark-{step}"), {"spec": spec}, "cannot be formatted"),
        (str(tmp / "save-{rollout_id}"), {"spec": spec, "save_hf": str(tmp / "save-{rollout_id}")}, "--save-hf"),
    ]
    for template, kwargs, expected in rules:
        try:
            validate_draft_save_hf(template, **kwargs)
            problems.append(f"accepted {template}")
        except SpeculativeConfigError as exc:
            if expected not in str(exc):
                problems.append(f"{template}: {exc}")
    template = str(tmp / "dspark-{rollout_id}")
    validate_draft_save_hf(template, spec=spec, save_hf=str(tmp / "actor-{rollout_id}"))
    state = {"layer.weight": torch.arange(12.0).reshape(3, 4), "norm.weight": torch.ones(4)}
    out = export_draft_hf(template.format(rollout_id=3), {"architectures": ["DSparkDraft"]}, state)
    back = load_file(str(out / "model.safetensors"))
    exported = set(p.name for p in out.iterdir()) == {"config.json", "model.safetensors"} and all(
        torch.equal(back[k], state[k]) for k in state
    )
    leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(".")]
    values["export"] = {"dir": out.name, "files": sorted(p.name for p in out.iterdir())}
    return [
        Check("export.validation_rules", not problems, len(problems), 0, detail="; ".join(problems)[:300]),
        Check("export.complete", exported),
        Check("export.no_temp_left", not leftovers, leftovers, []),
    ]


PARTS = ("config", "greedy", "sampling", "export")


def run(device: str, dtype: str, *, fault: str | None = None, parts: tuple[str, ...] = PARTS) -> GateOutcome:
    from vime.spec_decode import FAULTS

    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown G6 fault {fault!r}; use one of {FAULTS}")
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown G6 parts {sorted(unknown)}; use {PARTS}")
    values: dict[str, Any] = {"fault": fault}
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="vime-g6-") as tmp:
        if "config" in parts:
            checks += _config_checks(values)
        if "greedy" in parts:
            checks += _greedy_checks(Path(tmp), device, dtype, fault, values)
        if "sampling" in parts:
            checks += _distribution_checks(device, fault, values)
        if "export" in parts:
            checks += _export_checks(Path(tmp), values)
    return outcome(checks, values, {"chi_square_alpha": ALPHA, "greedy": "identical tokens"})
