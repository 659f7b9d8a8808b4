"""In-process rollout engine: its own model copy in rollout (HF) layout, batched sampling with a KV
cache, and the control plane of a vLLM server as used by vime.

Data plane
  `generate(prompts, max_new_tokens=..., temperature=, top_p=, top_k=, rollout_seed=, rollout_id=,
  sample_indices=None, eos_token_id=None, record_routing=False, speculative=None) -> RolloutOutput`
  Prompts are a (B, P) LongTensor (or equal-length lists), one row per sample (repeat a prompt for
  n samples). Sample i draws from its own generator seeded by (rollout_seed, rollout_id,
  sample_indices[i]). Returned logprobs are processed (post temperature/top-k/top-p).
  `speculative=<config>` delegates to `vime.spec_decode.generate(engine, prompts, speculative=..., **kw)`.
  `compute_logprobs(prompt_tokens, response_tokens, temperature)` scores given responses (probe batch).

Control plane (names follow vime's VLLMEngine / vLLM endpoints)
  pause_generation / continue_generation, flush_cache, sleep(level) / wake_up(tags),
  init_weight_transfer_engine(init_info), start_weight_update(is_checkpoint_format=True),
  update_weights(chunk: Mapping[name, Tensor] | iterable of pairs), finish_weight_update(weight_version=None),
  abort_weight_update(), get_weight_version(), check_weights(action="snapshot"|"compare"|"reset").

Weight updates are staged: received tensors are cloned (the receiver owns its storage - the Ascend IPC
fix) into a pending set; `finish_weight_update` fails if any parameter was not updated and then keeps
the old weights and version; only a complete update is copied in and promotes the version.
`events` records every control verb in order so callers (gates) can check the sync protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import torch

from vime.convert import load_hf
from vime.model import KVCache, ModelConfig, RolloutLM, RoutingReplay, response_logprobs
from vime.rollout.output import RolloutOutput  # noqa: F401 - re-exported
from vime.rollout.sampling import make_generators, process_logits, sample


class EngineStateError(RuntimeError):
    """A control verb or generate() was called in a state that does not allow it."""


class WeightUpdateError(RuntimeError):
    """A weight update was rejected (unknown name, bad shape, missing parameters)."""


class WeightCheckError(AssertionError):
    """check_weights("compare") found parameters that differ from the snapshot."""


def fingerprint(t: torch.Tensor) -> tuple:
    """vime's weight fingerprint: shape, dtype, byte count, byte sum, position-weighted hash of up to
    4096 strided bytes. Equal tensors give equal fingerprints; it is a cheap exactness probe."""
    raw = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    n = raw.numel()
    stride = max(1, n // 4096)
    sampled = raw[::stride][:4096].to(torch.int64)
    weights = torch.arange(1, sampled.numel() + 1, dtype=torch.int64)
    return (tuple(t.shape), str(t.dtype), n, int(raw.to(torch.int64).sum()), int((sampled * weights).sum()))


class RolloutEngine:
    def __init__(
        self,
        config: ModelConfig,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        hf_weights: Mapping[str, torch.Tensor] | None = None,
        weight_version: int | None = None,
    ):
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        self.model = RolloutLM(config).to(device=self.device, dtype=dtype).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self._params: dict[str, torch.nn.Parameter] = dict(self.model.named_parameters())
        self.events: list[str] = []
        self.paused = False
        self.sleep_level = 0  # 0 awake; 1 weights on host; 2 weights discarded
        self.kv_awake = True
        self.flush_count = 0
        self._has_weights = False
        self._version: int | None = weight_version  # a resumed run's engine continues the count
        self._transfer_info: dict | None = None
        self._pending: dict[str, torch.Tensor] | None = None
        self._snapshot: dict[str, tuple] | None = None
        if hf_weights is not None:
            self.load_hf_weights(hf_weights)

    @classmethod
    def from_hf(cls, path, device="cpu", dtype=torch.float32) -> "RolloutEngine":
        config, weights = load_hf(path)
        return cls(config, device=device, dtype=dtype, hf_weights=weights)

    def generate_cpu(self, prompts, **kwargs) -> RolloutOutput:
        """generate() with the result on the host (what a remote caller receives)."""
        return self.generate(prompts, **kwargs).cpu()

    # ----------------------------------------------------------------------------- weights

    def load_hf_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Initial load from a checkpoint (not a transfer: the weight version stays unset)."""
        self._check_names(set(weights), complete=True)
        with torch.no_grad():
            for name, t in weights.items():
                self._params[name].copy_(self._received(name, t))
        self._has_weights = True
        self.events.append("load_hf_weights")

    def _check_names(self, names: set[str], complete: bool) -> None:
        unknown = sorted(names - set(self._params))
        missing = sorted(set(self._params) - names) if complete else []
        if unknown or missing:
            raise WeightUpdateError(f"weights do not fit the engine model: unknown {unknown[:3]}, missing {missing[:3]}")

    def _received(self, name: str, t: torch.Tensor) -> torch.Tensor:
        param = self._params[name]
        if tuple(t.shape) != tuple(param.shape):
            raise WeightUpdateError(f"{name}: shape {tuple(t.shape)} != engine {tuple(param.shape)}")
        # copy=True: the receiver owns its storage even when device and dtype already match
        return t.detach().to(device=self.device, dtype=param.dtype, copy=True)

    def named_weights(self) -> dict[str, torch.Tensor]:
        return {n: p.detach() for n, p in self._params.items()}

    # ----------------------------------------------------------------------------- control plane

    def pause_generation(self, mode: str = "keep") -> None:
        self.paused = True
        self.events.append(f"pause:{mode}")

    def continue_generation(self) -> None:
        self.paused = False
        self.events.append("continue")

    def flush_cache(self) -> None:
        """The engine keeps no prefix cache between calls; flushes are counted so callers can verify
        the sync protocol (vime flushes on the first publication and then by policy)."""
        self.flush_count += 1
        self.events.append("flush_cache")

    def sleep(self, level: int = 1) -> None:
        """level 1: weights to host memory, same Parameter objects (what RL updates need);
        level 2: weights discarded - the next complete weight update restores them."""
        if level not in (1, 2):
            raise EngineStateError(f"sleep level must be 1 or 2, not {level}")
        with torch.no_grad():
            for p in self._params.values():
                p.data = p.data.to("cpu") if level == 1 else torch.zeros(p.shape, dtype=p.dtype, device="cpu")
        if level == 2:
            self._has_weights = False
        self.sleep_level = level
        self.kv_awake = False
        self.events.append(f"sleep:{level}")

    def wake_up(self, tags: Iterable[str] = ("weights", "kv_cache")) -> None:
        tags = tuple(tags)
        unknown = set(tags) - {"weights", "kv_cache"}
        if unknown:
            raise EngineStateError(f"wake_up tags must be 'weights' and/or 'kv_cache', not {sorted(unknown)}")
        if "weights" in tags and self.sleep_level:
            with torch.no_grad():
                for p in self._params.values():
                    p.data = p.data.to(self.device)
            self.sleep_level = 0
        if "kv_cache" in tags:
            self.kv_awake = True
        self.events.append("wake_up:" + ",".join(tags))

    def init_weight_transfer_engine(self, init_info: dict | None = None) -> None:
        self._transfer_info = dict(init_info or {})
        self.events.append("init_weight_transfer_engine")

    def start_weight_update(self, is_checkpoint_format: bool = True) -> None:
        if self._transfer_info is None:
            raise EngineStateError("start_weight_update before init_weight_transfer_engine")
        if self._pending is not None:
            raise EngineStateError("start_weight_update while another update is open; finish or abort it first")
        if not is_checkpoint_format:
            raise WeightUpdateError("only checkpoint-format (HF-named) updates are supported")
        self._pending = {}
        self.events.append("start_weight_update")

    def update_weights(self, chunk: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> int:
        """Stage one chunk; returns how many tensors it held."""
        if self._pending is None:
            raise EngineStateError("update_weights outside start_weight_update/finish_weight_update")
        items = chunk.items() if isinstance(chunk, Mapping) else chunk
        n = 0
        for name, t in items:
            if name not in self._params:
                self._pending = None  # a bad chunk poisons the update; old weights stay
                raise WeightUpdateError(f"unknown parameter {name!r} in weight update")
            self._pending[name] = self._received(name, t)
            n += 1
        self.events.append(f"update_weights:{n}")
        return n

    def finish_weight_update(self, weight_version: int | None = None) -> int:
        if self._pending is None:
            raise EngineStateError("finish_weight_update without start_weight_update")
        pending, self._pending = self._pending, None
        missing = sorted(set(self._params) - set(pending))
        if missing:
            self.events.append("finish_weight_update:failed")
            raise WeightUpdateError(
                f"weight update incomplete: {len(missing)} of {len(self._params)} parameters not updated "
                f"(e.g. {missing[:3]}); engine keeps version {self._version}"
            )
        with torch.no_grad():
            for name, t in pending.items():
                self._params[name].copy_(t)
        self._has_weights = True
        self._version = weight_version if weight_version is not None else (self._version or 0) + 1
        self.events.append(f"finish_weight_update:{self._version}")
        return self._version

    def abort_weight_update(self) -> None:
        self._pending = None
        self.events.append("abort_weight_update")

    def get_weight_version(self) -> int:
        if self._version is None:
            raise EngineStateError("no weight update has completed yet; the engine holds checkpoint weights only")
        return self._version

    @property
    def weight_version(self) -> int | None:
        return self._version

    def check_weights(self, action: str = "compare") -> dict[str, Any]:
        """snapshot: remember fingerprints; compare: raise WeightCheckError on any difference; reset."""
        if action == "reset":
            self._snapshot = None
            return {}
        current = {n: fingerprint(p) for n, p in self._params.items()}
        if action == "snapshot":
            self._snapshot = current
            return {"snapshot": len(current)}
        if action != "compare":
            raise ValueError(f"check_weights action must be snapshot, compare or reset, not {action!r}")
        if self._snapshot is None:
            raise EngineStateError("check_weights('compare') without a snapshot")
        missing = sorted(set(self._snapshot) - set(current))
        unexpected = sorted(set(current) - set(self._snapshot))
        changed = sorted(n for n in set(current) & set(self._snapshot) if current[n] != self._snapshot[n])
        report = {"compared": len(current), "missing": len(missing), "unexpected": len(unexpected), "changed": len(changed)}
        if missing or unexpected or changed:
            raise WeightCheckError(f"weights differ from snapshot: {report}; changed e.g. {changed[:3]}")
        return report

    # ----------------------------------------------------------------------------- data plane

    def _check_ready(self) -> None:
        if self.paused:
            raise EngineStateError("engine is paused; call continue_generation() first")
        if self.sleep_level or not self.kv_awake:
            raise EngineStateError("engine is asleep; call wake_up() first")
        if not self._has_weights:
            raise EngineStateError("engine has no weights; load a checkpoint or complete a weight update")

    def _as_batch(self, prompts) -> torch.Tensor:
        if isinstance(prompts, torch.Tensor):
            batch = prompts
        else:
            lengths = {len(p) for p in prompts}
            if len(lengths) != 1:
                raise ValueError(f"prompts in one generate() call must share a length, got {sorted(lengths)}")
            batch = torch.tensor([list(p) for p in prompts], dtype=torch.long)
        if batch.dim() != 2 or batch.shape[1] == 0:
            raise ValueError(f"prompts must be (batch, prompt_len) with prompt_len > 0, got {tuple(batch.shape)}")
        return batch.to(self.device)

    @torch.no_grad()
    def generate(
        self,
        prompts,
        *,
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
        speculative: Any = None,
    ) -> RolloutOutput:
        if speculative is not None:
            from vime import spec_decode  # provided by the speculative-decoding module

            return spec_decode.generate(
                self, prompts, speculative=speculative, max_new_tokens=max_new_tokens, temperature=temperature,
                top_p=top_p, top_k=top_k, rollout_seed=rollout_seed, rollout_id=rollout_id,
                sample_indices=sample_indices, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                record_routing=record_routing,
            )
        self._check_ready()
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        batch = self._as_batch(prompts)
        b, p = batch.shape
        indices = list(range(b)) if sample_indices is None else [int(i) for i in sample_indices]
        if len(indices) != b:
            raise ValueError(f"{len(indices)} sample indices for {b} prompts")
        started = time.perf_counter()
        gens = make_generators(rollout_seed, rollout_id, indices)
        routing = RoutingReplay("record") if record_routing and self.config.is_moe else None
        cache = KVCache(self.config, b, p + max_new_tokens, self.device, self.dtype)
        greedy = temperature <= 0

        tokens = torch.full((b, max_new_tokens), pad_token_id, dtype=torch.long, device=self.device)
        logprobs = torch.zeros((b, max_new_tokens), dtype=torch.float32, device=self.device)
        mask = torch.zeros((b, max_new_tokens), dtype=torch.float32, device=self.device)
        alive = torch.ones(b, dtype=torch.bool, device=self.device)
        logits = self.model(batch, cache=cache, routing=routing)[:, -1]
        for step in range(max_new_tokens):
            lp = process_logits(logits, temperature, top_k, top_p)
            tok = sample(lp, gens, greedy=greedy)
            chosen = lp.gather(-1, tok[:, None]).squeeze(-1)
            tokens[:, step] = torch.where(alive, tok, torch.full_like(tok, pad_token_id))
            logprobs[:, step] = torch.where(alive, chosen, torch.zeros_like(chosen))
            mask[:, step] = alive.float()
            if eos_token_id is not None:
                alive = alive & (tok != eos_token_id)
                if not bool(alive.any()):
                    break  # every sample ended; the rest stays padded and masked
            if step + 1 < max_new_tokens:
                logits = self.model(tokens[:, step : step + 1], cache=cache, routing=routing)[:, -1]
        return RolloutOutput(
            prompt_tokens=batch,
            response_tokens=tokens,
            logprobs=logprobs,
            loss_mask=mask,
            sample_indices=indices,
            weight_version=self._version,
            routing=routing.recorded() if routing is not None else None,
            stats={"seconds": time.perf_counter() - started, "new_tokens": int(mask.sum().item())},
        )

    @torch.no_grad()
    def compute_logprobs(
        self, prompt_tokens: torch.Tensor, response_tokens: torch.Tensor, temperature: float = 1.0,
        routing: RoutingReplay | None = None,
    ) -> torch.Tensor:
        """Engine-side log-probs of given responses (one full forward, no sampling)."""
        self._check_ready()
        full = torch.cat([prompt_tokens, response_tokens], dim=1).to(self.device)
        logits = self.model(full[:, :-1], routing=routing)[:, prompt_tokens.shape[1] - 1 :]
        return response_logprobs(logits, response_tokens.to(self.device), temperature)[0]


def build_engine(
    config: dict, device: str = "cpu", dtype: str = "float32", hf_dir: str | None = None,
    hf_weights: Mapping[str, torch.Tensor] | None = None, weight_version: int | None = None,
) -> RolloutEngine:
    """Picklable factory (plain arguments) for engines built in another process."""
    if hf_dir is not None:
        cfg, hf_weights = load_hf(hf_dir)
    else:
        cfg = ModelConfig.from_dict(config)
    return RolloutEngine(cfg, device=device, dtype=getattr(torch, dtype), hf_weights=hf_weights, weight_version=weight_version)
