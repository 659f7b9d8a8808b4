"""Speculative decoding: the `--vllm-speculative-config` JSON, draft proposers, exact verification.

Verification is standard speculative sampling (Leviathan et al. 2023, Chen et al. 2023): draft token
d_i drawn from q_i is kept with probability min(1, p_i(d)/q_i(d)); at the first rejection one token is
drawn from norm(max(0, p_i - q_i)); if every draft survives, a bonus token is drawn from p_{k+1}.
The emitted sequence then has exactly the target's distribution, whatever the draft proposes.
With temperature 0 the rule degenerates to "keep while the draft equals the target argmax", so
greedy output is token-for-token the same as without speculation.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import tempfile
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

    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(dict(config), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        back = load_file(str(tmp / "model.safetensors"))
        if set(back) != set(tensors) or any(back[k].shape != tensors[k].shape for k in tensors):
            raise SpeculativeConfigError(f"draft export to {out} is incomplete: saved tensors do not match")
        json.loads((tmp / "config.json").read_text(encoding="utf-8"))
        if out.exists():
            # Replace an earlier export of the same rollout id without a window where neither exists.
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


# --------------------------------------------------------------------------- verification


@dataclass
class SpecStats:
    """Acceptance bookkeeping (the numbers a serving stack reports for speculative decoding)."""

    rounds: int = 0
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


def verify_greedy(draft: torch.Tensor, n_draft: torch.Tensor, target_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Temperature 0. draft [B,k], n_draft [B], target_logits [B,k+1,V].

    Returns (tokens [B,k+1], n_accepted [B], n_emitted [B]); row b emits tokens[b, :n_emitted[b]].
    """
    best = target_logits.argmax(dim=-1)  # [B, k+1]
    k = draft.shape[1]
    idx = torch.arange(k, device=draft.device)
    ok = (draft == best[:, :k]) & (idx < n_draft.unsqueeze(1))
    n_acc = _leading_true(ok)
    tokens = best.clone()
    tokens[:, :k] = torch.where(idx < n_acc.unsqueeze(1), draft, best[:, :k])
    return tokens, n_acc, n_acc + 1


def verify_sampled(
    draft: torch.Tensor,
    n_draft: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Exact rejection sampling. draft [B,k]; draft_probs [B,k,V] (None = a deterministic proposal,
    i.e. one-hot q, as for n-gram drafts); target_probs [B,k+1,V] (already temperature/top-k/top-p processed).
    """
    bsz, k = draft.shape
    vocab = target_probs.shape[-1]
    device = target_probs.device
    idx = torch.arange(k, device=device)
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(draft, vocab).to(target_probs.dtype)
    p_d = target_probs[:, :k].gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    q_d = draft_probs.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    u = torch.rand((bsz, k), generator=generator, device=device, dtype=target_probs.dtype)
    ok = (u * q_d < p_d) & (idx < n_draft.unsqueeze(1))
    n_acc = _leading_true(ok)
    # The distribution of the token after the accepted prefix: residual if a draft was rejected there,
    # the plain target distribution if we ran out of drafts (bonus token).
    rows = torch.arange(bsz, device=device)
    p_j = target_probs[rows, n_acc]
    q_j = torch.zeros_like(p_j)
    rejected = n_acc < n_draft
    if k:
        q_pad = torch.cat([draft_probs, torch.zeros_like(draft_probs[:, :1])], dim=1)
        q_j = torch.where(rejected.unsqueeze(1), q_pad[rows, n_acc], q_j)
    residual = (p_j - q_j).clamp(min=0)
    mass = residual.sum(-1, keepdim=True)
    # p == q on the support leaves no residual mass; then p itself is the right distribution.
    residual = torch.where(mass > 0, residual / mass.clamp(min=torch.finfo(mass.dtype).tiny), p_j)
    last = torch.multinomial(residual, 1, generator=generator).squeeze(-1)
    tokens = torch.zeros((bsz, k + 1), dtype=torch.long, device=device)
    tokens[:, :k] = draft
    tokens[rows, n_acc] = last
    return tokens, n_acc, n_acc + 1


def _leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Number of leading True values per row."""
    if mask.shape[1] == 0:
        return torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device)
    return mask.long().cumprod(dim=1).sum(dim=1)


# --------------------------------------------------------------------------- proposers


class Proposer(Protocol):
    def propose(
        self, tokens: torch.Tensor, lengths: torch.Tensor, k: int, sampler: "Sampler", generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Return (draft [B,k], n_draft [B], draft_probs [B,k,V] or None for deterministic drafts)."""
        ...


class Sampler(Protocol):
    greedy: bool

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Processed (temperature/top-k/top-p) distribution over the last axis."""
        ...


@dataclass
class NgramProposer:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens and copy what followed."""

    max_n: int = 3
    min_n: int = 1

    def propose(self, tokens, lengths, k, sampler, generator):
        bsz = tokens.shape[0]
        draft = torch.zeros((bsz, k), dtype=torch.long, device=tokens.device)
        n_draft = torch.zeros(bsz, dtype=torch.long, device=tokens.device)
        rows = tokens.tolist()
        for b in range(bsz):
            seq = rows[b][: int(lengths[b])]
            found = self._lookup(seq, k)
            if found:
                draft[b, : len(found)] = torch.tensor(found, dtype=torch.long)
                n_draft[b] = len(found)
        return draft, n_draft, None

    def _lookup(self, seq: list[int], k: int) -> list[int]:
        for n in range(min(self.max_n, len(seq) - 1), self.min_n - 1, -1):
            tail = seq[-n:]
            for start in range(len(seq) - n - 1, -1, -1):
                if seq[start : start + n] == tail:
                    return seq[start + n : start + n + k]
        return []


@dataclass
class DraftModelProposer:
    """A small causal LM drafts k tokens autoregressively, sampling from its own processed distribution."""

    logits_fn: Callable[[torch.Tensor], torch.Tensor]  # tokens [B,T] -> logits [B,T,V]

    def propose(self, tokens, lengths, k, sampler, generator):
        bsz = tokens.shape[0]
        rows = torch.arange(bsz, device=tokens.device)
        work = torch.cat([tokens, torch.zeros((bsz, k), dtype=tokens.dtype, device=tokens.device)], dim=1)
        draft = torch.zeros((bsz, k), dtype=torch.long, device=tokens.device)
        probs_out = []
        for i in range(k):
            pos = lengths + i
            logits = self.logits_fn(work[:, : int(pos.max())])[rows, pos - 1].float()
            if sampler.greedy:
                nxt = logits.argmax(-1)
                probs_out.append(torch.nn.functional.one_hot(nxt, logits.shape[-1]).float())
            else:
                probs = sampler.probs(logits)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                probs_out.append(probs)
            draft[:, i] = nxt
            work[rows, pos] = nxt
        n_draft = torch.full((bsz,), k, dtype=torch.long, device=tokens.device)
        return draft, n_draft, torch.stack(probs_out, dim=1) if k else None


# --------------------------------------------------------------------------- decoding loop


@dataclass
class SpecOutput:
    tokens: list[list[int]]  # generated tokens per sequence (without the prompt)
    stats: SpecStats


def speculative_generate(
    target_logits_fn: Callable[[torch.Tensor], torch.Tensor],
    proposer: Proposer,
    prompts: list[list[int]],
    *,
    k: int,
    max_new_tokens: int,
    sampler: Sampler,
    generator: torch.Generator | None = None,
    pad_id: int = 0,
    device: torch.device | str = "cpu",
) -> SpecOutput:
    """Generate with draft-then-verify rounds. `target_logits_fn(tokens [B,T]) -> logits [B,T,V]` is
    the target model's causal forward; right padding is harmless because attention is causal.
    """
    if k < 1:
        raise SpeculativeConfigError(f"num_speculative_tokens must be >= 1, got {k}")
    bsz = len(prompts)
    lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device)
    start = lengths.clone()
    cap = int(lengths.max()) + max_new_tokens + k + 1
    tokens = torch.full((bsz, cap), pad_id, dtype=torch.long, device=device)
    for b, p in enumerate(prompts):
        tokens[b, : len(p)] = torch.tensor(p, dtype=torch.long)
    stats = SpecStats()
    rows = torch.arange(bsz, device=device)
    active = torch.ones(bsz, dtype=torch.bool, device=device)
    while bool(active.any()):
        act = active.nonzero().squeeze(-1)
        sub_tokens, sub_len = tokens[act], lengths[act]
        draft, n_draft, q = proposer.propose(sub_tokens, sub_len, k, sampler, generator)
        draft = draft[:, :k]
        # Write the drafts after each row's prefix and score prefix + drafts in one target forward.
        probe = sub_tokens.clone()
        sub_rows = torch.arange(len(act), device=device)
        for i in range(k):
            probe[sub_rows, sub_len + i] = draft[:, i]
        width = int((sub_len + k).max())
        logits = target_logits_fn(probe[:, :width]).float()
        pos = (sub_len - 1).unsqueeze(1) + torch.arange(k + 1, device=device)
        tgt = logits[sub_rows.unsqueeze(1), pos]  # [B, k+1, V]
        if sampler.greedy:
            out, n_acc, n_emit = verify_greedy(draft, n_draft, tgt)
        else:
            out, n_acc, n_emit = verify_sampled(draft, n_draft, q, sampler.probs(tgt), generator)
        remaining = max_new_tokens - (sub_len - start[act])
        n_emit = torch.minimum(n_emit, remaining)
        stats.add(n_draft, torch.minimum(n_acc, n_emit), n_emit, k)
        for i in range(k + 1):
            keep = i < n_emit
            tokens[act[keep], (sub_len + i)[keep]] = out[keep, i]
        lengths[act] = sub_len + n_emit
        active = (lengths - start) < max_new_tokens
    del rows
    out_tokens = [tokens[b, int(start[b]) : int(lengths[b])].tolist() for b in range(bsz)]
    return SpecOutput(tokens=out_tokens, stats=stats)
