"""G6 speculative decoding: the JSON config is validated precisely, greedy output is unchanged by
speculation, sampled output keeps the target distribution, and --draft-save-hf exports atomically.

1. Config: every malformed --vllm-speculative-config of a fixed list is refused with a message that
   names the problem; the valid ones parse.
2. Greedy (temperature 0): the engine's tokens with speculation (n-gram drafts, and a draft model
   loaded from an HF checkpoint through the JSON config) equal its tokens without, for every
   sequence; the reported log-probs agree within the G1 tolerance.
3. Sampling, twice (temperature 0.9; temperature 1.2 with top-k 6 and top-p 0.9): first the
   engine's processing (temperature -> top-k -> top-p) must equal `reference_processed`, written
   here from the definitions. Then on a small vocabulary (V = 8) N = 6000 speculative samples of
   k + 2 = 5 tokens (k = 3 drafts per round; draft = a perturbed copy of the target, so acceptance
   and rejection both happen at every draft slot) are compared with the exact processed target
   (enumerating every prefix): the marginal of each of the 5 positions (so every draft slot, the
   bonus token and the next round's first token are tested) and the joint of the first two, by
   chi-square tests (cells with expected count < 5 merged), fixed seeds, significance 1e-3 each.
   Stated power: each test detects any deviation of Cohen's effect size w >= 0.1 (marginals, 7
   degrees of freedom) or w >= 0.15 (joint, up to 63) with probability >= 0.99 (noncentral
   chi-square, computed in the gate and reported as `power_w*`). The acceptance bookkeeping must add
   up (accepted <= proposed, emitted = generated tokens, every slot's acceptance in (0, 1)).
4. --draft-save-hf: template validation rules hold and an export writes config.json +
   model.safetensors that load back unchanged.

Knobs: `parts` selects sub-checks (default all); `samplers` selects the sampling configurations
("plain", "topk_topp"); `fault="no_residual"` (after a rejection, sample
from p instead of norm(max(0, p - q)): biased; the chi-square must catch it) and
`fault="accept_all"` (greedy verification keeps every draft: greedy output changes).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import torch

from vime.gates.common import Check, GateOutcome, outcome, tolerance

ALPHA = 1e-3
N_SAMPLES = 6000
SMALL_VOCAB = 8
SPEC_K = 3
MIN_POWER = 0.99
MARGINAL_W, JOINT_W = 0.1, 0.15  # Cohen's effect sizes the design must detect with MIN_POWER
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
        values[f"greedy.{label}"] = {"identical": same, **{k: stats[k] for k in ("acceptance_rate", "mean_accepted_length")}}
        if torch_dtype == torch.float32:
            gap = float((out.logprobs - plain.logprobs).abs().max())
            checks.append(Check(f"greedy.{label}.identical", same, detail="speculative greedy tokens differ from plain greedy"))
            checks.append(Check(f"greedy.{label}.logprobs", gap <= tol.logprob_max, gap, tol.logprob_max))
        else:
            # Low precision: verifying k+1 tokens in one forward rounds differently from one-token decode
            # steps, so a near tie may flip and the sequences part. Exact greedy then means: every emitted
            # token is the argmax of the target's logits on its own prefix, up to the rounding of the
            # logits (ULPS ulp of the largest |logit|).
            slack = _argmax_slack(engine, out)
            bound = GREEDY_ULPS * float(torch.finfo(torch_dtype).eps)
            values[f"greedy.{label}"]["argmax_slack_rel"] = slack
            checks.append(Check(f"greedy.{label}.argmax_of_target", slack <= bound, slack, bound,
                                "a speculative greedy token is not the target's argmax"))
        checks.append(Check(f"greedy.{label}.speculated", stats["proposed"] > 0 and stats["accepted"] > 0, stats["accepted"], "> 0",
                            detail="no draft was accepted: the comparison did not exercise speculation"))
    return checks


GREEDY_ULPS = 4


@torch.no_grad()
def _argmax_slack(engine: Any, out: Any) -> float:
    """max over emitted tokens of (max logit - logit of the token) / max|logit|, teacher forced."""
    full = torch.cat([out.prompt_tokens, out.response_tokens], dim=1)[:, :-1]
    logits = engine.model(full)[:, out.prompt_tokens.shape[1] - 1 :].float()
    chosen = logits.gather(-1, out.response_tokens.unsqueeze(-1)).squeeze(-1)
    slack = (logits.max(-1).values - chosen) / logits.abs().amax(-1).clamp(min=1e-6)
    return float((slack * out.loss_mask).max())


def _chi_square(observed: torch.Tensor, expected: torch.Tensor) -> tuple[float, int, float]:
    """Pearson's statistic with cells of expected count < 5 merged; returns (stat, dof, p-value)."""
    keep = expected >= 5
    obs = torch.cat([observed[keep], observed[~keep].sum().reshape(1)])
    exp = torch.cat([expected[keep], expected[~keep].sum().reshape(1)])
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = int(obs.numel()) - 1
    return stat, dof, chi2_sf(stat, dof)


def chi2_sf(x: float, dof: int) -> float:
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(x / 2, dtype=torch.float64)))


def chi2_critical(dof: int, alpha: float) -> float:
    lo, hi = 0.0, 10.0 * dof + 100.0
    for _ in range(200):  # bisection on the survival function
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if chi2_sf(mid, dof) > alpha else (lo, mid)
    return hi


def chi2_power(dof: int, n: int, w: float, alpha: float) -> float:
    """Power of the chi-square test at level alpha against any alternative of Cohen's effect size w
    (noncentrality n * w^2): P(noncentral chi2(dof, n w^2) > critical), by the Poisson mixture."""
    crit, lam = chi2_critical(dof, alpha), n * w * w
    total, j, weight = 0.0, 0, math.exp(-lam / 2)
    while j < 2000 and (j < lam or weight > 1e-16):
        total += weight * chi2_sf(crit, dof + 2 * j)
        j += 1
        weight *= (lam / 2) / j
    return total


def reference_processed(logits: list[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    """The processed sampling distribution, written from the definitions (float64, plain Python):
    divide by the temperature; keep the top_k largest (ties at the k-th value stay); softmax; keep the
    smallest prefix of tokens by descending probability whose mass reaches top_p (the token that
    crosses the threshold stays); renormalise."""
    scaled = [x / temperature for x in logits]
    v = len(scaled)
    keep = list(range(v))
    if 0 < top_k < v:
        kth = sorted(scaled, reverse=True)[top_k - 1]
        keep = [i for i in keep if scaled[i] >= kth]
    m = max(scaled[i] for i in keep)
    weights = {i: math.exp(scaled[i] - m) for i in keep}
    z = sum(weights.values())
    probs = {i: w / z for i, w in weights.items()}
    if top_p < 1.0:
        order = sorted(probs, key=lambda i: -probs[i])
        kept, mass = [], 0.0
        for i in order:
            if mass >= top_p:
                break
            kept.append(i)
            mass += probs[i]
        probs = {i: probs[i] / mass for i in kept}
    return [probs.get(i, 0.0) for i in range(v)]


def _processing_check(values: dict) -> Check:
    """The engine's processing (vime.rollout.sampling via Sampler) equals the reference on random logits."""
    from vime.spec_decode import Sampler

    gen = torch.Generator().manual_seed(21)
    logits = torch.randn(16, 12, generator=gen, dtype=torch.float64) * 3
    worst = 0.0
    for t, k, p in ((0.7, 0, 1.0), (1.3, 5, 1.0), (0.9, 0, 0.8), (1.2, 6, 0.9), (0.5, 3, 0.6)):
        got = Sampler(t, k, p).logprobs(logits.float()).exp().double()
        want = torch.tensor([reference_processed(row.tolist(), t, k, p) for row in logits], dtype=torch.float64)
        worst = max(worst, float((got - want).abs().max()))
    values["processing.max_abs_diff"] = worst
    return Check("sampling.processing_equals_reference", worst <= 1e-5, worst, 1e-5,
                 "temperature/top-k/top-p processing differs from the reference definition")


def _exact_marginals(model, prompt: list[int], sampler, positions: int, v: int, device) -> list[torch.Tensor]:
    """Exact marginal distribution of each generated position (1..positions) under the processed
    target, by enumerating every prefix of non-zero probability (V**(t-1) for position t)."""
    prefixes = [([], 1.0)]
    marginals = []
    for _ in range(positions):
        rows = torch.tensor([prompt + list(p) for p, _ in prefixes], device=device)
        with torch.no_grad():
            logits = model(rows)[:, -1].double().cpu()
        marginal = torch.zeros(v, dtype=torch.float64)
        nxt = []
        for (prefix, weight), row in zip(prefixes, logits):
            probs = reference_processed(row.tolist(), sampler.temperature, sampler.top_k, sampler.top_p)
            for tok, pr in enumerate(probs):
                if pr > 0:
                    marginal[tok] += weight * pr
                    nxt.append((prefix + [tok], weight * pr))
        marginals.append(marginal)
        prefixes = nxt
    return marginals


SAMPLERS = ("plain", "topk_topp")


def _distribution_checks(device: str, fault: str | None, values: dict, samplers: tuple[str, ...] = SAMPLERS) -> list[Check]:
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
        parse_speculative_config({"method": "draft_model", "model": "<in-memory>", "num_speculative_tokens": SPEC_K}),
        DraftModelProposer(draft.model),
        fault=fault,
    )
    prompt = [1, 2, 3, 4]
    positions = SPEC_K + 2  # every draft slot, the bonus token, and the first token of the next round
    checks: list[Check] = [_processing_check(values)]
    # Plain temperature, then temperature + top-k + top-p: the processed distribution must survive too.
    chosen = {"plain": ("sampling", Sampler(0.9), 7), "topk_topp": ("sampling.topk_topp", Sampler(1.2, 6, 0.9), 8)}
    for label, sampler, seed in (chosen[name] for name in samplers):
        marginals = _exact_marginals(target.model, prompt, sampler, positions, v, device)
        with torch.no_grad():
            nxt = torch.tensor([prompt + [t] for t in range(v)], device=device)
            p2 = torch.stack([torch.tensor(reference_processed(r.tolist(), sampler.temperature, sampler.top_k, sampler.top_p))
                              for r in target.model(nxt)[:, -1].double().cpu()])
        joint = (marginals[0][:, None] * p2).reshape(-1)
        out = target.generate(torch.tensor([prompt] * N_SAMPLES), max_new_tokens=positions, temperature=sampler.temperature,
                              top_k=sampler.top_k, top_p=sampler.top_p, rollout_seed=seed, speculative=setup)
        toks = out.response_tokens.cpu()
        tests = {"joint_1_2": (torch.bincount(toks[:, 0] * v + toks[:, 1], minlength=v * v).double(), joint, JOINT_W)}
        for i in range(positions):
            tests[f"position_{i + 1}"] = (torch.bincount(toks[:, i], minlength=v).double(), marginals[i], MARGINAL_W)
        stats = out.stats["spec_decode"]
        record = {"samples": N_SAMPLES, "vocab": v, "temperature": sampler.temperature, "top_k": sampler.top_k,
                  "top_p": sampler.top_p, **stats}
        for name, (observed, expected, w) in tests.items():
            stat, dof, p = _chi_square(observed, expected * N_SAMPLES)
            power = chi2_power(dof, N_SAMPLES, w, ALPHA)
            record[name] = {"chi_square": round(stat, 3), "dof": dof, "p_value": p, f"power_w{w}": round(power, 4)}
            checks.append(Check(f"{label}.{name}.chi_square_p", p >= ALPHA, p, f">= {ALPHA}", detail=f"chi2={stat:.1f} dof={dof} p={p:.2e}"))
            checks.append(Check(f"{label}.{name}.power", power >= MIN_POWER, round(power, 4), f">= {MIN_POWER} at w={w}"))
        # schema compatibility (vime.smoke consumers): the joint test's figures at the top level
        record.update({k: record["joint_1_2"][k] for k in ("chi_square", "dof", "p_value")})
        record["min_p_value"] = min(v["p_value"] for v in record.values() if isinstance(v, dict) and "p_value" in v)
        values[label] = record
        bookkeeping = (
            0 <= stats["accepted"] <= stats["proposed"]
            and stats["emitted"] == int(out.loss_mask.sum())
            and 0 < stats["acceptance_rate"] < 1
            and all(a is not None and 0 < a < 1 for a in stats["per_position_acceptance"])
        )
        checks.append(Check(f"{label}.acceptance_bookkeeping", bookkeeping, stats["acceptance_rate"], "(0, 1) at every draft slot"))
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


def run(device: str, dtype: str, *, fault: str | None = None, parts: tuple[str, ...] = PARTS,
        samplers: tuple[str, ...] = SAMPLERS) -> GateOutcome:
    from vime.spec_decode import FAULTS

    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown G6 fault {fault!r}; use one of {FAULTS}")
    if set(samplers) - set(SAMPLERS):
        raise ValueError(f"unknown G6 samplers {sorted(set(samplers) - set(SAMPLERS))}; use {SAMPLERS}")
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
            checks += _distribution_checks(device, fault, values, samplers)
        if "export" in parts:
            checks += _export_checks(Path(tmp), values)
    return outcome(checks, values, {"chi_square_alpha": ALPHA, "greedy": "identical tokens"})
