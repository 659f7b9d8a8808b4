"""Speculative decoding: the `--vllm-speculative-config` JSON, draft proposers, exact verification.

Verification is standard speculative sampling (Leviathan et al. 2023, Chen et al. 2023): draft token
d_i drawn from q_i is kept with probability min(1, p_i(d)/q_i(d)); at the first rejection one token is
drawn from norm(max(0, p_i - q_i)); if every draft survives, a bonus token is drawn from p_{k+1}.
The emitted sequence then has exactly the target's distribution, whatever the draft proposes.
With temperature 0 the rule degenerates to "keep while the draft equals the target argmax", so
greedy output is token-for-token the same as without speculation.

API: `parse_speculative_config(json)` -> SpeculativeConfig; `generate(engine, prompts, speculative=...,
**engine.generate kwargs)` (the engine's seam) -> RolloutOutput with `stats["spec_decode"]`;
`decode(...)` (the loop), `verify_greedy` / `verify_sampled` (one round's rule), `NgramProposer`,
`DraftModelProposer`, `SpecStats`; `validate_draft_save_hf`, `export_draft_hf`,
`export_draft_for_rollout` (--draft-save-hf). `FAULTS` are test knobs for gate G6.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import torch

METHODS = ("dspark", "eagle", "mtp", "draft_model", "ngram")
NEEDS_MODEL = ("dspark", "eagle", "draft_model")
_KEYS = {
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "prompt_lookup_max",
    "prompt_lookup_min",
}


class SpeculativeConfigError(ValueError):
    """The speculative config (or a --draft-save-hf setting) is invalid; the message says where."""


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class SpeculativeConfig:
    method: str
    num_speculative_tokens: int
    model: str | None = None
    draft_tensor_parallel_size: int = 1
    prompt_lookup_max: int = 3
    prompt_lookup_min: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _positive_int(raw: Mapping[str, Any], key: str, default: int | None, minimum: int = 1) -> int:
    if key not in raw:
        if default is None:
            raise SpeculativeConfigError(f"speculative config: '{key}' is required (an integer >= {minimum})")
        return default
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpeculativeConfigError(
            f"speculative config: '{key}' must be an integer >= {minimum}, got {json.dumps(value)} ({type(value).__name__})"
        )
    if value < minimum:
        raise SpeculativeConfigError(f"speculative config: '{key}' must be >= {minimum}, got {value}")
    return value


def parse_speculative_config(text: str | Mapping[str, Any]) -> SpeculativeConfig:
    """Parse and validate the JSON given to --vllm-speculative-config, with precise errors."""
    if isinstance(text, Mapping):
        raw: Any = dict(text)
    else:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpeculativeConfigError(
                f"--vllm-speculative-config is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from exc
    if not isinstance(raw, dict):
        raise SpeculativeConfigError(f"--vllm-speculative-config must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_KEYS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(sorted(_KEYS))}"
        raise SpeculativeConfigError(f"speculative config: unknown key '{unknown[0]}'{hint}")
    method = raw.get("method")
    if method is None:
        raise SpeculativeConfigError(f"speculative config: 'method' is required, one of {', '.join(METHODS)}")
    if method not in METHODS:
        raise SpeculativeConfigError(f"speculative config: method {json.dumps(method)} is not one of {', '.join(METHODS)}")
    model = raw.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise SpeculativeConfigError("speculative config: 'model' must be a non-empty path string")
    if method in NEEDS_MODEL and not model:
        raise SpeculativeConfigError(f"speculative config: method '{method}' needs 'model' (the draft checkpoint path)")
    if method == "ngram" and model:
        raise SpeculativeConfigError("speculative config: method 'ngram' takes no 'model' (it drafts from the prompt)")
    cfg = SpeculativeConfig(
        method=method,
        num_speculative_tokens=_positive_int(raw, "num_speculative_tokens", None),
        model=model,
        draft_tensor_parallel_size=_positive_int(raw, "draft_tensor_parallel_size", 1),
        prompt_lookup_max=_positive_int(raw, "prompt_lookup_max", 3),
        prompt_lookup_min=_positive_int(raw, "prompt_lookup_min", 1),
    )
    if cfg.prompt_lookup_min > cfg.prompt_lookup_max:
        raise SpeculativeConfigError(
            f"speculative config: prompt_lookup_min ({cfg.prompt_lookup_min}) > prompt_lookup_max ({cfg.prompt_lookup_max})"
        )
    if cfg.draft_tensor_parallel_size != 1:
        raise SpeculativeConfigError(
            f"speculative config: draft_tensor_parallel_size {cfg.draft_tensor_parallel_size} is not supported "
            "by the compact runtime (one device per engine); use 1"
        )
    return cfg


# --------------------------------------------------------------------------- --draft-save-hf


def validate_draft_save_hf(
    template: str,
    *,
    spec: SpeculativeConfig | None,
    draft_model_path: str | None = None,
    save_hf: str | None = None,
    enable_external_draft_training: bool = False,
) -> None:
    """The production rules: dspark only (or explicit draft training), formattable with rollout_id, and
    never the same directory as the draft model or the actor's --save-hf."""
    if spec is None or (spec.method != "dspark" and not enable_external_draft_training):
        got = "no speculative config" if spec is None else f"method '{spec.method}'"
        raise SpeculativeConfigError(
            f"--draft-save-hf needs --vllm-speculative-config with method 'dspark' "
            f"(or --enable-external-draft-training); got {got}"
        )
    try:
        sample = template.format(rollout_id=0)
        other = template.format(rollout_id=1)
    except (KeyError, IndexError, ValueError) as exc:
        raise SpeculativeConfigError(
            f"--draft-save-hf {template!r} cannot be formatted with rollout_id: {exc!r}; the only placeholder is {{rollout_id}}"
        ) from exc
    if sample == other:
        raise SpeculativeConfigError(
            f"--draft-save-hf {template!r} has no {{rollout_id}}: every export would overwrite the previous one"
        )
    draft = draft_model_path or (spec.model if spec else None)
    targets = {"the draft model path": draft}
    if save_hf:
        targets["the actor's --save-hf"] = save_hf.format(rollout_id=0) if "{rollout_id}" in save_hf else save_hf
    for what, path in targets.items():
        if path and os.path.realpath(sample) == os.path.realpath(path):
            raise SpeculativeConfigError(f"--draft-save-hf must not equal {what} ({path})")


def export_draft_hf(
    out_dir: str | Path, config: Mapping[str, Any], state_dict: Mapping[str, torch.Tensor]
) -> Path:
    """Atomic export: contiguous CPU tensors -> temp dir -> completeness check -> rename into place."""
    from safetensors.torch import load_file, save_file

    from vime.fsio import write_dir_atomically

    out = Path(out_dir)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
    if not tensors:
        raise SpeculativeConfigError(f"refusing to export an empty draft model to {out}")

    def fill(tmp: Path) -> None:
        (tmp / "config.json").write_text(json.dumps(dict(config), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        back = load_file(str(tmp / "model.safetensors"))
        if set(back) != set(tensors) or any(back[k].shape != tensors[k].shape for k in tensors):
            raise SpeculativeConfigError(f"draft export to {out} is incomplete: saved tensors do not match")
        json.loads((tmp / "config.json").read_text(encoding="utf-8"))

    return write_dir_atomically(out, fill)


def export_draft_for_rollout(template: str, rollout_id: int, spec: SpeculativeConfig) -> Path:
    """--draft-save-hf at a save step: publish the draft the engine speculates with as an HF checkpoint
    (config.json + model.safetensors) at `template.format(rollout_id=...)`. The compact runtime does
    not train the draft, so this republishes the `model` checkpoint's current weights."""
    import json as _json

    from safetensors.torch import load_file

    if not spec.model:
        raise SpeculativeConfigError(f"--draft-save-hf: method '{spec.method}' has no draft 'model' to export")
    src = Path(spec.model)
    config_file, weights_file = src / "config.json", src / "model.safetensors"
    for f in (config_file, weights_file):
        if not f.is_file():
            raise SpeculativeConfigError(f"--draft-save-hf: draft checkpoint {src} lacks {f.name}")
    config = _json.loads(config_file.read_text(encoding="utf-8"))
    return export_draft_hf(template.format(rollout_id=rollout_id), config, load_file(str(weights_file)))


# --------------------------------------------------------------------------- verification

FAULTS = ("no_residual", "accept_all")  # test knobs: break the sampler's exactness / greedy equality


@dataclass
class SpecStats:
    """Acceptance bookkeeping (the numbers a serving stack reports for speculative decoding)."""

    rounds: int = 0  # target forwards, per sequence
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    per_position_accepted: list[int] = field(default_factory=list)
    per_position_proposed: list[int] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target forward per sequence (1.0 = no gain)."""
        return self.emitted / self.rounds if self.rounds else 0.0

    def add(self, n_draft: torch.Tensor, n_accepted: torch.Tensor, n_emitted: torch.Tensor, k: int) -> None:
        self.rounds += int(n_draft.numel())
        self.proposed += int(n_draft.sum())
        self.accepted += int(n_accepted.sum())
        self.emitted += int(n_emitted.sum())
        while len(self.per_position_accepted) < k:
            self.per_position_accepted.append(0)
            self.per_position_proposed.append(0)
        for i in range(k):
            self.per_position_proposed[i] += int((n_draft > i).sum())
            self.per_position_accepted[i] += int((n_accepted > i).sum())

    def to_dict(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "proposed": self.proposed,
            "accepted": self.accepted,
            "emitted": self.emitted,
            "acceptance_rate": round(self.acceptance_rate, 6),
            "mean_accepted_length": round(self.mean_accepted_length, 6),
            "per_position_acceptance": [
                round(a / p, 6) if p else None for a, p in zip(self.per_position_accepted, self.per_position_proposed)
            ],
        }


def _leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Number of leading True values per row."""
    if mask.shape[1] == 0:
        return torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device)
    return mask.long().cumprod(dim=1).sum(dim=1)


def verify_greedy(
    draft: torch.Tensor, n_draft: torch.Tensor, target_logits: torch.Tensor, fault: str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature 0. draft [B,k], n_draft [B], target_logits [B,k+1,V].

    Returns (tokens [B,k+1], n_accepted [B]); row b emits tokens[b, :n_accepted[b] + 1].
    """
    best = target_logits.argmax(dim=-1)
    k = draft.shape[1]
    idx = torch.arange(k, device=draft.device)
    agree = torch.ones_like(draft, dtype=torch.bool) if fault == "accept_all" else draft == best[:, :k]
    n_acc = _leading_true(agree & (idx < n_draft.unsqueeze(1)))
    tokens = best.clone()
    tokens[:, :k] = torch.where(idx < n_acc.unsqueeze(1), draft, best[:, :k])
    return tokens, n_acc


def _draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw, one uniform per row (the engine's sampling rule)."""
    cdf = probs.double().cumsum(-1)
    idx = torch.searchsorted(cdf, (u.double() * cdf[:, -1]).unsqueeze(-1), right=True).squeeze(-1)
    return idx.clamp_(max=probs.shape[-1] - 1)


def verify_sampled(
    draft: torch.Tensor,
    n_draft: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    uniforms: torch.Tensor,
    fault: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact rejection sampling.

    draft [B,k]; draft_probs [B,k,V] (None = deterministic proposal, i.e. one-hot q, as for n-gram
    drafts); target_probs [B,k+1,V] (processed: temperature/top-k/top-p); uniforms [B,k+1] in [0,1):
    the first k decide acceptance, the last draws the correction or bonus token.
    Returns (tokens [B,k+1], n_accepted [B]).
    """
    bsz, k = draft.shape
    vocab = target_probs.shape[-1]
    device = target_probs.device
    idx = torch.arange(k, device=device)
    target_probs = target_probs.double()
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(draft, vocab).double()
    draft_probs = draft_probs.double()
    p_d = target_probs[:, :k].gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    q_d = draft_probs.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    ok = (uniforms[:, :k].double() * q_d < p_d) & (idx < n_draft.unsqueeze(1))
    n_acc = _leading_true(ok)
    rows = torch.arange(bsz, device=device)
    p_j = target_probs[rows, n_acc]
    rejected = n_acc < n_draft  # else we ran out of drafts: a bonus token from p itself
    q_pad = torch.cat([draft_probs, torch.zeros_like(draft_probs[:, :1])], dim=1)
    q_j = torch.where(rejected.unsqueeze(1), q_pad[rows, n_acc], torch.zeros_like(p_j))
    residual = p_j if fault == "no_residual" else (p_j - q_j).clamp(min=0)
    # p == q on the support leaves no residual mass; then p itself is the right distribution.
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_j)
    tokens = torch.zeros((bsz, k + 1), dtype=torch.long, device=device)
    tokens[:, :k] = draft
    tokens[rows, n_acc] = _draw(residual, uniforms[:, k])
    return tokens, n_acc


# --------------------------------------------------------------------------- proposers


@dataclass
class Sampler:
    """The engine's processing (temperature -> top-k -> top-p) as a distribution."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        from vime.rollout.sampling import process_logits

        shape = logits.shape
        flat = process_logits(logits.reshape(-1, shape[-1]), self.temperature, self.top_k, self.top_p)
        return flat.reshape(shape)


class Proposer(Protocol):
    def propose(
        self, tokens: torch.Tensor, lengths: torch.Tensor, k: int, sampler: Sampler, generators: list[torch.Generator]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Return (draft [B,k], n_draft [B], draft_probs [B,k,V] or None for deterministic drafts)."""
        ...


@dataclass
class NgramProposer:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and copy what followed."""

    max_n: int = 3
    min_n: int = 1

    def propose(self, tokens, lengths, k, sampler, generators):
        bsz = tokens.shape[0]
        draft = torch.zeros((bsz, k), dtype=torch.long, device=tokens.device)
        n_draft = torch.zeros(bsz, dtype=torch.long, device=tokens.device)
        rows = tokens.tolist()
        for b in range(bsz):
            found = self.lookup(rows[b][: int(lengths[b])], k)
            if found:
                draft[b, : len(found)] = torch.tensor(found, dtype=torch.long)
                n_draft[b] = len(found)
        return draft, n_draft, None

    def lookup(self, seq: list[int], k: int) -> list[int]:
        for n in range(min(self.max_n, len(seq) - 1), self.min_n - 1, -1):
            tail = seq[-n:]
            for start in range(len(seq) - n - 1, -1, -1):
                if seq[start : start + n] == tail:
                    return seq[start + n : start + n + k]
        return []


class DraftModelProposer:
    """A small causal LM drafts k tokens autoregressively from its own processed distribution.

    Given an nn.Module with a `config` (a vime model), it keeps its own ragged KV cache: each round
    it re-feeds the last two tokens (which may have been rejected or not yet seen) and then one token
    per draft, so a round costs k one-token forwards. Given any other callable (tokens [B,T] ->
    logits [B,T,V]) it recomputes the whole prefix for every draft token (the reference path)."""

    def __init__(self, model: Callable[[torch.Tensor], torch.Tensor]):
        self.model = model
        self.cached = isinstance(model, torch.nn.Module) and hasattr(model, "config")
        self._cache = None

    @property
    def logits_fn(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return self.model

    def begin(self, prompts: torch.Tensor, capacity: int, dtype: torch.dtype) -> None:
        if not self.cached:
            return
        from vime.model import KVCache

        bsz, plen = prompts.shape
        self._cache = KVCache(self.model.config, bsz, capacity, prompts.device, dtype, ragged=True)
        head = plen - min(2, plen)
        if head:
            self.model(prompts[:, :head], cache=self._cache)

    def select(self, keep: torch.Tensor) -> None:
        if self._cache is not None:
            self._cache.select(keep)

    def propose(self, tokens, lengths, k, sampler, generators):
        if self.cached:
            return self._propose_cached(tokens, lengths, k, sampler, generators)
        bsz = tokens.shape[0]
        rows = torch.arange(bsz, device=tokens.device)
        work = torch.cat([tokens, torch.zeros((bsz, k), dtype=tokens.dtype, device=tokens.device)], dim=1)
        draft = torch.zeros((bsz, k), dtype=torch.long, device=tokens.device)
        probs_out = []
        for i in range(k):
            pos = lengths + i
            logits = self.model(work[:, : int(pos.max())])[rows, pos - 1].float()
            nxt, probs = _draft_token(logits, sampler, generators)
            probs_out.append(probs)
            draft[:, i] = nxt
            work[rows, pos] = nxt
        n_draft = torch.full((bsz,), k, dtype=torch.long, device=tokens.device)
        return draft, n_draft, torch.stack(probs_out, dim=1)

    def _propose_cached(self, tokens, lengths, k, sampler, generators):
        if self._cache is None or self._cache.lengths.shape[0] != tokens.shape[0]:
            raise RuntimeError("DraftModelProposer: begin() was not called for this batch")
        bsz = tokens.shape[0]
        w = 2 if int(lengths.min()) >= 2 else 1
        self._cache.set_lengths(lengths - w)
        idx = (lengths - w).unsqueeze(1) + torch.arange(w, device=tokens.device)
        logits = self.model(tokens.gather(1, idx), cache=self._cache)[:, -1].float()
        draft = torch.zeros((bsz, k), dtype=torch.long, device=tokens.device)
        probs_out = []
        # the k draft uniforms of each row in one draw (the same stream as k single draws)
        u = None if sampler.greedy else torch.stack([torch.rand(k, generator=g, dtype=torch.float64) for g in generators])
        for i in range(k):
            nxt, probs = _draft_token(logits, sampler, generators, None if u is None else u[:, i])
            probs_out.append(probs)
            draft[:, i] = nxt
            if i + 1 < k:
                logits = self.model(nxt.unsqueeze(1), cache=self._cache)[:, -1].float()
        n_draft = torch.full((bsz,), k, dtype=torch.long, device=tokens.device)
        return draft, n_draft, torch.stack(probs_out, dim=1)


def _draft_token(logits: torch.Tensor, sampler: "Sampler", generators, u: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    probs = sampler.logprobs(logits).exp()
    if sampler.greedy:
        return logits.argmax(-1), probs
    if u is None:
        u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])
    return _draw(probs, u.to(probs.device)), probs


# --------------------------------------------------------------------------- decoding loop


@dataclass
class SpecResult:
    tokens: torch.Tensor  # [B, max_new] emitted tokens, pad after the end
    logprobs: torch.Tensor  # [B, max_new] processed target logprobs of the emitted tokens
    mask: torch.Tensor  # [B, max_new] float, 1 where a token was emitted
    stats: SpecStats


def decode(
    target_logits_fn: Callable[[torch.Tensor], torch.Tensor],
    proposer: Proposer,
    prompts: torch.Tensor,
    *,
    k: int,
    max_new_tokens: int,
    sampler: Sampler,
    generators: list[torch.Generator],
    eos_token_id: int | None = None,
    pad_token_id: int = 0,
    fault: str | None = None,
) -> SpecResult:
    """Draft-then-verify rounds over a batch whose rows advance at different speeds.

    `target_logits_fn` is the target: a vime model (nn.Module with `config`) is run with a ragged KV
    cache - each round feeds only the pending token and the k drafts, and rejected drafts are rolled
    back by resetting the row's cache length; any other callable (tokens [B,T] -> logits [B,T,V]) is
    re-run on the whole prefix every round (the reference path). Each row consumes exactly k+1
    uniforms from its own generator per round (plus the draft's own), so a row's output does not
    depend on the batch.
    """
    if isinstance(target_logits_fn, torch.nn.Module) and hasattr(target_logits_fn, "config"):
        return _decode_cached(target_logits_fn, proposer, prompts, k=k, max_new_tokens=max_new_tokens, sampler=sampler,
                              generators=generators, eos_token_id=eos_token_id, pad_token_id=pad_token_id, fault=fault)
    if k < 1:
        raise SpeculativeConfigError(f"num_speculative_tokens must be >= 1, got {k}")
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown speculative-decoding fault {fault!r}; use one of {FAULTS}")
    device = prompts.device
    bsz, plen = prompts.shape
    cap = plen + max_new_tokens + k + 1
    seq = torch.full((bsz, cap), pad_token_id, dtype=torch.long, device=device)
    seq[:, :plen] = prompts
    lengths = torch.full((bsz,), plen, dtype=torch.long, device=device)
    out_lp = torch.zeros((bsz, cap), dtype=torch.float32, device=device)
    done = torch.zeros(bsz, dtype=torch.bool, device=device)
    stats = SpecStats()
    while not bool(done.all()):
        act = (~done).nonzero().squeeze(-1)
        sub, sub_len = seq[act], lengths[act]
        gens = [generators[int(i)] for i in act]
        draft, n_draft, q = proposer.propose(sub, sub_len, k, sampler, gens)
        draft = draft[:, :k]
        n_draft = torch.minimum(n_draft, max_new_tokens - (sub_len - plen))  # no drafts past the end
        r = torch.arange(len(act), device=device)
        probe = sub.clone()
        for i in range(k):
            probe[r, sub_len + i] = draft[:, i]
        logits = target_logits_fn(probe[:, : int((sub_len + k).max())]).float()
        pos = (sub_len - 1).unsqueeze(1) + torch.arange(k + 1, device=device)
        tgt_logits = logits[r.unsqueeze(1), pos]  # [b, k+1, V]
        tgt_lp = sampler.logprobs(tgt_logits)
        if sampler.greedy:
            emitted, n_acc = verify_greedy(draft, n_draft, tgt_logits, fault)
        else:
            u = torch.stack([torch.rand(k + 1, generator=g, dtype=torch.float64) for g in gens]).to(device)
            emitted, n_acc = verify_sampled(draft, n_draft, q, tgt_lp.exp(), u, fault)
        n_emit = torch.minimum(n_acc + 1, max_new_tokens - (sub_len - plen))
        if eos_token_id is not None:
            is_eos = (emitted == eos_token_id) & (torch.arange(k + 1, device=device) < n_emit.unsqueeze(1))
            first = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, n_emit)
            n_emit = torch.minimum(n_emit, first)
            hit_eos = is_eos.any(1)
        else:
            hit_eos = torch.zeros_like(n_emit, dtype=torch.bool)
        stats.add(n_draft, torch.minimum(n_acc, n_emit), n_emit, k)
        chosen_lp = tgt_lp.gather(-1, emitted.unsqueeze(-1)).squeeze(-1)
        for i in range(k + 1):
            keep = i < n_emit
            seq[act[keep], (sub_len + i)[keep]] = emitted[keep, i]
            out_lp[act[keep], (sub_len + i)[keep]] = chosen_lp[keep, i]
        lengths[act] = sub_len + n_emit
        done[act] = hit_eos | ((lengths[act] - plen) >= max_new_tokens)
    resp = seq[:, plen : plen + max_new_tokens]
    width = torch.arange(max_new_tokens, device=device)
    mask = (width < (lengths - plen).unsqueeze(1)).float()
    tokens = torch.where(mask.bool(), resp, torch.full_like(resp, pad_token_id))
    logprobs = out_lp[:, plen : plen + max_new_tokens] * mask
    return SpecResult(tokens=tokens, logprobs=logprobs, mask=mask, stats=stats)


def _check_decode_args(k: int, fault: str | None) -> None:
    if k < 1:
        raise SpeculativeConfigError(f"num_speculative_tokens must be >= 1, got {k}")
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown speculative-decoding fault {fault!r}; use one of {FAULTS}")


def _decode_cached(
    model: torch.nn.Module, proposer: Proposer, prompts: torch.Tensor, *, k: int, max_new_tokens: int, sampler: Sampler,
    generators: list[torch.Generator], eos_token_id: int | None, pad_token_id: int, fault: str | None,
) -> SpecResult:
    from vime.model import KVCache

    _check_decode_args(k, fault)
    device = prompts.device
    bsz, plen = prompts.shape
    cap = plen + max_new_tokens + k + 1
    dtype = next(model.parameters()).dtype
    seq = torch.full((bsz, cap), pad_token_id, dtype=torch.long, device=device)
    seq[:, :plen] = prompts
    lengths = torch.full((bsz,), plen, dtype=torch.long, device=device)
    out_lp = torch.zeros((bsz, cap), dtype=torch.float32, device=device)
    done = torch.zeros(bsz, dtype=torch.bool, device=device)
    stats = SpecStats()
    # the target cache holds every token but the pending (last emitted) one
    cache = KVCache(model.config, bsz, cap, device, dtype, ragged=True)
    if plen > 1:
        model(prompts[:, :-1], cache=cache)
    begin = getattr(proposer, "begin", None)
    if begin is not None:
        begin(prompts, cap, dtype)
    act = torch.arange(bsz, device=device)  # global rows held by the caches, in cache order
    steps = torch.arange(k + 1, device=device)
    while act.numel():
        sub, sub_len = seq[act], lengths[act]
        gens = [generators[int(i)] for i in act]
        draft, n_draft, q = proposer.propose(sub, sub_len, k, sampler, gens)
        draft = draft[:, :k]
        n_draft = torch.minimum(n_draft, max_new_tokens - (sub_len - plen))
        r = torch.arange(len(act), device=device)
        pending = sub[r, sub_len - 1]
        cache.set_lengths(sub_len - 1)
        tgt_logits = model(torch.cat([pending.unsqueeze(1), draft], dim=1), cache=cache).float()  # [b, k+1, V]
        tgt_lp = sampler.logprobs(tgt_logits)
        if sampler.greedy:
            emitted, n_acc = verify_greedy(draft, n_draft, tgt_logits, fault)
        else:
            u = torch.stack([torch.rand(k + 1, generator=g, dtype=torch.float64) for g in gens]).to(device)
            emitted, n_acc = verify_sampled(draft, n_draft, q, tgt_lp.exp(), u, fault)
        n_emit = torch.minimum(n_acc + 1, max_new_tokens - (sub_len - plen))
        if eos_token_id is not None:
            is_eos = (emitted == eos_token_id) & (steps < n_emit.unsqueeze(1))
            first = torch.where(is_eos.any(1), is_eos.long().argmax(1) + 1, n_emit)
            n_emit = torch.minimum(n_emit, first)
            hit_eos = is_eos.any(1)
        else:
            hit_eos = torch.zeros_like(n_emit, dtype=torch.bool)
        stats.add(n_draft, torch.minimum(n_acc, n_emit), n_emit, k)
        chosen_lp = tgt_lp.gather(-1, emitted.unsqueeze(-1)).squeeze(-1)
        keep = steps < n_emit.unsqueeze(1)
        pos = sub_len.unsqueeze(1) + steps
        rows2 = act.unsqueeze(1).expand_as(pos)
        seq[rows2[keep], pos[keep]] = emitted[keep]
        out_lp[rows2[keep], pos[keep]] = chosen_lp[keep]
        lengths[act] = sub_len + n_emit
        done[act] = hit_eos | ((lengths[act] - plen) >= max_new_tokens)
        alive = ~done[act]
        if not bool(alive.all()):
            idx = alive.nonzero().squeeze(-1)
            act = act[idx]
            if act.numel():
                cache.select(idx)
                select = getattr(proposer, "select", None)
                if select is not None:
                    select(idx)
    resp = seq[:, plen : plen + max_new_tokens]
    width = torch.arange(max_new_tokens, device=device)
    mask = (width < (lengths - plen).unsqueeze(1)).float()
    tokens = torch.where(mask.bool(), resp, torch.full_like(resp, pad_token_id))
    logprobs = out_lp[:, plen : plen + max_new_tokens] * mask
    return SpecResult(tokens=tokens, logprobs=logprobs, mask=mask, stats=stats)


# --------------------------------------------------------------------------- engine seam


@dataclass
class SpeculativeSetup:
    """A parsed config plus a ready proposer (tests and gates build one with an in-memory draft)."""

    config: SpeculativeConfig
    proposer: Proposer
    fault: str | None = None


def _draft_from_checkpoint(engine: Any, cfg: SpeculativeConfig) -> DraftModelProposer:
    from vime.convert import load_hf
    from vime.model import RolloutLM

    if not cfg.model:
        raise SpeculativeConfigError(
            f"method '{cfg.method}' needs 'model': the compact runtime has no MTP layers, so give a draft checkpoint"
        )
    path = Path(cfg.model)
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise SpeculativeConfigError(f"speculative config: draft model {path} has no model.safetensors")
    cache = engine.__dict__.setdefault("_spec_drafts", {})
    key = (str(path.resolve()), weights.stat().st_mtime_ns)
    if key not in cache:
        config, weights = load_hf(path)
        if config.vocab_size != engine.config.vocab_size:
            raise SpeculativeConfigError(
                f"draft model {path} has vocab {config.vocab_size}, the target has {engine.config.vocab_size}"
            )
        draft = RolloutLM(config)
        draft.load_state_dict(weights)
        cache[key] = draft.to(device=engine.device, dtype=engine.dtype).eval().requires_grad_(False)
    return DraftModelProposer(cache[key])


def resolve(speculative: Any, engine: Any) -> SpeculativeSetup:
    """Accept a JSON string, a dict, a SpeculativeConfig or a ready SpeculativeSetup."""
    if isinstance(speculative, SpeculativeSetup):
        return speculative
    cfg = speculative if isinstance(speculative, SpeculativeConfig) else parse_speculative_config(speculative)
    if cfg.method == "ngram":
        return SpeculativeSetup(cfg, NgramProposer(cfg.prompt_lookup_max, cfg.prompt_lookup_min))
    return SpeculativeSetup(cfg, _draft_from_checkpoint(engine, cfg))


def generate(
    engine: Any,
    prompts: Any,
    *,
    speculative: Any,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    rollout_seed: int = 42,
    rollout_id: int = 0,
    sample_indices: list[int] | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int = 0,
    record_routing: bool = False,
) -> Any:
    """The engine's `generate(..., speculative=...)`: same arguments, same RolloutOutput, plus
    `stats["spec_decode"]` with the acceptance metrics."""
    from vime.model import RoutingReplay
    from vime.rollout.output import RolloutOutput
    from vime.rollout.sampling import make_generators

    setup = resolve(speculative, engine)
    engine._check_ready()
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    batch = engine._as_batch(prompts)
    indices = list(range(batch.shape[0])) if sample_indices is None else [int(i) for i in sample_indices]
    if len(indices) != batch.shape[0]:
        raise ValueError(f"{len(indices)} sample indices for {batch.shape[0]} prompts")
    with torch.no_grad():
        result = decode(
            engine.model,
            setup.proposer,
            batch,
            k=setup.config.num_speculative_tokens,
            max_new_tokens=max_new_tokens,
            sampler=Sampler(temperature, top_k, top_p),
            generators=make_generators(rollout_seed, rollout_id, indices),
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            fault=setup.fault,
        )
        routing = None
        if record_routing and engine.config.is_moe:
            # Routing of every token the target consumed, as one forward records it (drafts that were
            # rejected never count): the same tensor layout as the plain engine's record.
            recorder = RoutingReplay("record")
            full = torch.cat([batch, result.tokens], dim=1)[:, :-1]
            engine.model(full, routing=recorder)
            routing = recorder.recorded()
    return RolloutOutput(
        prompt_tokens=batch,
        response_tokens=result.tokens,
        logprobs=result.logprobs,
        loss_mask=result.mask,
        sample_indices=indices,
        weight_version=engine.weight_version,
        routing=routing,
        stats={"spec_decode": {"method": setup.config.method, "k": setup.config.num_speculative_tokens, **result.stats.to_dict()}},
    )
