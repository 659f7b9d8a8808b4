"""Mutation testing of the L3 gates: plant one real bug at a time in a copy of the runtime and check
that the gate responsible for it fails.

A `Mutant` is a source patch: in file `file` (relative to the `vime` package) the text `old`, which
must occur exactly once, becomes `new`. `mutated_runtime(m)` copies the package to a temp dir,
applies the patch, and swaps the copy in for `import vime...` (sys.modules, sys.path and PYTHONPATH,
so spawned engine processes import the mutant too); on exit the original modules come back.
`run_mutant(m)` runs the mutant's gate with its (small, fast) knobs: the mutant is *killed* when the
verdict is `fail`. A crash (`error`) is not a kill: a gate must detect the bug, not trip over it.

`python -m vime.mutants [--gates G1,G5] [--ids ID,...] [--json]` prints the kill rate; exit 1 when a
mutant survives. Every mutant's gate, with the same knobs, passes on the unmodified runtime (the
test suite checks this, so a kill always means the bug was seen).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator


class MutantError(RuntimeError):
    """A patch does not apply (its `old` text is missing or not unique): the catalogue is stale."""


@dataclass(frozen=True)
class Mutant:
    id: str
    gate: str
    file: str  # relative to the vime package directory
    old: str
    new: str
    why: str  # the real bug this stands for
    knobs: dict = field(default_factory=dict)
    dtype: str = "float32"


@dataclass
class MutantResult:
    id: str
    gate: str
    verdict: str
    killed: bool
    reason: str
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PACKAGE_DIR = Path(__file__).resolve().parent

# Fast knobs per gate (a mutant may narrow them further).
G4_FAST = {"transports": ("colocated",)}
G5_FAST = {"transports": ("colocated",)}
G6_SAMPLING = {"parts": ("sampling",), "samplers": ("plain",)}
G6_TOPP = {"parts": ("sampling",), "samplers": ("topk_topp",)}
G8_FAST = {"configs": ("dense",)}

M = Mutant
MUTANTS: tuple[Mutant, ...] = (
    # ---------------------------------------------------------------- G1 logprob alignment
    M("g1.trainer_temperature_dropped", "G1", "train.py",
      "global_batch_size=args.global_batch_size, temperature=args.rollout_temperature,",
      "global_batch_size=args.global_batch_size,",
      "the driver builds the trainer without --rollout-temperature: it scores at T=1 while rollout samples at T"),
    M("g1.trainer_ignores_temperature", "G1", "trainer.py",
      "return response_logprobs(logits, response, self.cfg.temperature)",
      "return response_logprobs(logits, response, 1.0)",
      "the trainer forward forgets the temperature"),
    M("g1.engine_double_temperature", "G1", "rollout/sampling.py",
      "scaled = logits.float() / (temperature if temperature > 0 else 1.0)",
      "scaled = logits.float() / (temperature * temperature if temperature > 0 else 1.0)",
      "the engine applies the temperature twice (once in the sampler, once in the logits processor)"),
    M("g1.engine_raw_logprobs", "G1", "rollout/engine.py",
      "chosen = lp.gather(-1, tok[:, None]).squeeze(-1)",
      "chosen = logits.float().log_softmax(-1).gather(-1, tok[:, None]).squeeze(-1)",
      "the engine returns raw (pre-temperature) log-probs instead of processed ones"),
    M("g1.rope_offset_in_decode", "G1", "model.py",
      "start = cache.length if cache is not None else 0",
      "start = max(cache.length - 1, 0) if cache is not None else 0",
      "decode steps use the wrong RoPE position (off by one after the prefill)"),
    # ---------------------------------------------------------------- G2 reproducibility
    M("g2.seed_ignores_rollout_id", "G2", "rollout/sampling.py",
      'f"vime-sample:{rollout_seed}:{rollout_id}:{index}"', 'f"vime-sample:{rollout_seed}:{index}"',
      "every rollout re-samples the same tokens: the per-sample seed ignores the rollout id"),
    M("g2.seed_ignores_index", "G2", "rollout/sampling.py",
      'f"vime-sample:{rollout_seed}:{rollout_id}:{index}"', 'f"vime-sample:{rollout_seed}:{rollout_id}"',
      "the n samples of a prompt are identical (GRPO groups collapse): the seed ignores the sample index"),
    M("g2.seed_ignores_rollout_seed", "G2", "rollout/sampling.py",
      'f"vime-sample:{rollout_seed}:{rollout_id}:{index}"', 'f"vime-sample:{rollout_id}:{index}"',
      "--rollout-seed has no effect on sampling"),
    M("g2.global_rng_sampling", "G2", "rollout/sampling.py",
      "u = torch.stack([torch.rand((), generator=g, dtype=torch.float64) for g in generators])",
      "u = torch.stack([torch.rand((), dtype=torch.float64) for g in generators])",
      "sampling draws from the global RNG: tokens depend on the batch and on everything else that draws"),
    # ---------------------------------------------------------------- G3 resume
    M("g3.rng_not_saved", "G3", "checkpoint.py",
      '(tmp / "rng.pt").write_bytes(_bytes(capture_rng(platform)))',
      '(tmp / "rng.pt").write_bytes(_bytes(capture_rng(None) | {"python": random.Random(0).getstate()}))',
      "the checkpoint stores a fresh python RNG state instead of the live one"),
    M("g3.numpy_rng_not_restored", "G3", "checkpoint.py",
      'np.random.set_state((n["kind"], n["keys"].numpy().astype("uint32"), n["pos"], n["has_gauss"], n["cached_gaussian"]))',
      "pass",
      "resume restores every RNG but numpy's"),
    M("g3.torch_rng_not_restored", "G3", "checkpoint.py",
      'torch.set_rng_state(state["torch_cpu"])', "pass",
      "resume restores every RNG but torch's CPU generator"),
    M("g3.resume_rebuilds_epoch0_order", "G3", "data.py",
      "self._order = self._epoch_order(self.epoch_id)  # reshuffled by the saved epoch",
      "self._order = self._epoch_order(0)",
      "a resumed data source rebuilds epoch 0's order while its cursor is in a later epoch"),
    M("g3.epoch_not_saved", "G3", "data.py",
      'self.epoch_id = int(state["epoch_id"])', "self.epoch_id = 0",
      "the data cursor's epoch is not restored"),
    M("g3.scheduler_not_restored", "G3", "trainer.py",
      'self.scheduler.load_state_dict(state["scheduler"])', "pass",
      "the LR scheduler restarts on resume"),
    M("g3.bf16_masters_not_saved", "G3", "checkpoint.py",
      'model_part = {k: state[k] for k in ("model", "ref_model", "step", "master_params") if k in state}',
      'model_part = {k: state[k] for k in ("model", "ref_model", "step") if k in state}',
      "bf16 checkpoints lose the fp32 master weights: a resumed run restarts them from the rounded weights",
      dtype="bfloat16"),
    M("g3.resume_repeats_iteration", "G3", "train.py",
      "start_rollout_id = loaded.iteration + 1", "start_rollout_id = loaded.iteration",
      "a resumed run repeats the last saved rollout"),
    # ---------------------------------------------------------------- G4 weight sync
    M("g4.qkv_split_order", "G4", "convert.py",
      '[f"{h}.self_attn.q_proj.weight", f"{h}.self_attn.k_proj.weight", f"{h}.self_attn.v_proj.weight"],',
      '[f"{h}.self_attn.k_proj.weight", f"{h}.self_attn.q_proj.weight", f"{h}.self_attn.v_proj.weight"],',
      "the fused qkv rows are handed to the engine as k, q, v (a converter with the wrong row order)",
      knobs=G4_FAST),
    M("g4.version_not_bumped", "G4", "rollout/engine.py",
      "self._version = weight_version if weight_version is not None else (self._version or 0) + 1",
      "self._version = self._version or 0",
      "the engine does not promote the weight version after an update", knobs=G4_FAST),
    M("g4.finish_keeps_old_weights", "G4", "rollout/engine.py",
      "                self._params[name].copy_(t)\n        self._has_weights = True\n        self._version",
      "                pass\n        self._has_weights = True\n        self._version",
      "finish_weight_update promotes the version but never copies the staged tensors", knobs=G4_FAST),
    M("g4.dp_gradients_summed", "G4", "trainer.py",
      "                p.grad /= self.dp_size\n", "                pass\n",
      "data-parallel gradients are summed, not averaged (the step of a batch dp times larger)",
      knobs={"transports": ("dp",)}),
    M("g4.dp_no_allreduce", "G4", "trainer.py",
      "        if self.dp_size > 1:\n            self._average_gradients()", "        if False:\n            self._average_gradients()",
      "data-parallel ranks never all-reduce: each steps on its own shard", knobs={"transports": ("dp",)}),
    # ---------------------------------------------------------------- G5 MXFP8
    M("g5.group_16", "G5", "quant/mxfp8.py", "GROUP_SIZE = 32", "GROUP_SIZE = 16",
      "MX groups of 16 elements instead of the spec's 32", knobs=G5_FAST),
    M("g5.scale_round_half_up", "G5", "quant/mxfp8.py",
      "exp = (e.to(torch.int32) - 1) - E4M3_EMAX",
      "exp = torch.floor(torch.log2(amax.float()) + 0.5).to(torch.int32) - E4M3_EMAX",
      "the shared exponent rounds log2(amax) half up instead of taking the floor", knobs=G5_FAST),
    M("g5.scale_ceil", "G5", "quant/mxfp8.py",
      "exp = (e.to(torch.int32) - 1) - E4M3_EMAX",
      "exp = torch.ceil(torch.log2(amax.float())).to(torch.int32) - E4M3_EMAX",
      "ceil(log2(amax)) for the E8M0 scale", knobs=G5_FAST),
    M("g5.emax_7", "G5", "quant/mxfp8.py", "E4M3_EMAX = 8  # floor(log2(448))", "E4M3_EMAX = 7",
      "E4M3's largest exponent taken as 7", knobs=G5_FAST),
    M("g5.activations_off", "G5", "quant/mxfp8.py",
      "        activations: bool = True,\n    ) -> \"MXFP8RolloutExtension\":",
      "        activations: bool = False,\n    ) -> \"MXFP8RolloutExtension\":",
      "W8A8 without the A8: activation quantisation switched off", knobs=G5_FAST),
    M("g5.element_round_half_up", "G5", "quant/mxfp8.py",
      "q = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)",
      "q = (scaled * (1 + 2.0**-6)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)",
      "elements nudged up before rounding: ties (and near-ties) go away from zero, not to even", knobs=G5_FAST),
    M("g5.nan_block_scale", "G5", "quant/mxfp8.py",
      "exp = torch.where(amax.isfinite(), exp, torch.full_like(exp, NAN_EXPONENT))",
      "exp = torch.where(amax.isfinite(), exp, torch.full_like(exp, -SCALE_BIAS))",
      "a block holding NaN/Inf gets the minimum scale instead of the spec's NaN scale 0xFF", knobs=G5_FAST),
    # ---------------------------------------------------------------- G6 speculative decoding
    M("g6.accept_third_draft", "G6", "spec_decode.py",
      "ok = (uniforms[:, :k].double() * q_d < p_d) & (idx < n_draft.unsqueeze(1))",
      "ok = ((uniforms[:, :k].double() * q_d < p_d) | (idx == 2)) & (idx < n_draft.unsqueeze(1))",
      "sampled verification always accepts the 3rd draft token", knobs=G6_SAMPLING),
    M("g6.top_p_before_temperature", "G6", "rollout/sampling.py",
      "scaled = logits.float() / (temperature if temperature > 0 else 1.0)\n    if temperature > 0 and 0 < top_k",
      "scaled = logits.float()\n    if temperature > 0 and 0 < top_k",
      "top-k/top-p applied to the unscaled logits, temperature afterwards", knobs=G6_TOPP),
    M("g6.residual_without_clamp", "G6", "spec_decode.py",
      "residual = p_j if fault == \"no_residual\" else (p_j - q_j).clamp(min=0)",
      "residual = p_j if fault == \"no_residual\" else (p_j - 0.5 * q_j).clamp(min=0)",
      "the rejection residual subtracts only half the draft mass", knobs=G6_SAMPLING),
    M("g6.bonus_from_draft", "G6", "spec_decode.py",
      "q_j = torch.where(rejected.unsqueeze(1), q_pad[rows, n_acc], torch.zeros_like(p_j))",
      "q_j = torch.where(rejected.unsqueeze(1), q_pad[rows, n_acc], q_pad[rows, n_acc - 1])",
      "the bonus token after a fully accepted round comes from a residual against the last draft, not from p",
      knobs=G6_SAMPLING),
    M("g6.top_p_keeps_boundary", "G6", "rollout/sampling.py",
      "drop_sorted = (probs.cumsum(-1) - probs) >= top_p",
      "drop_sorted = probs.cumsum(-1) > top_p",
      "top-p drops the token that crosses the threshold (nucleus one token too small)", knobs=G6_TOPP),
    M("g6.greedy_accepts_mismatch", "G6", "spec_decode.py",
      "agree = torch.ones_like(draft, dtype=torch.bool) if fault == \"accept_all\" else draft == best[:, :k]",
      "agree = torch.ones_like(draft, dtype=torch.bool) if fault == \"accept_all\" else (draft == best[:, :k]) | (idx == 0)",
      "greedy verification keeps the first draft token unchecked", knobs={"parts": ("greedy",)}),
    # ---------------------------------------------------------------- G7 R3
    M("g7.trainer_never_replays", "G7", "trainer.py",
      "if not (self.cfg.use_rollout_routing_replay and batch.routing):",
      "if True:",
      "the trainer never replays the recorded routing"),
    M("g7.replay_rows_misaligned", "G7", "trainer.py",
      'return RoutingReplay("replay", {layer: ids[rows] for layer, ids in batch.routing.items()})',
      'return RoutingReplay("replay", {layer: ids[rows].roll(1, dims=0) for layer, ids in batch.routing.items()})',
      "the trainer replays another sample's routing"),
    M("g7.replay_weights_detached", "G7", "model.py",
      "weights = probs.gather(-1, ids)",
      "weights = probs.gather(-1, ids).detach()",
      "replayed routing weights are detached: the router stops learning"),
    # ---------------------------------------------------------------- G8 HF parity
    M("g8.rope_theta_top_level_only", "G8", "convert.py",
      "rope_theta=_rope_theta(data, family),", "rope_theta=float(data.get(\"rope_theta\", 10000.0)),",
      "transformers 5 writes theta under rope_parameters; reading only the top-level key loads it wrong",
      knobs={"configs": ("hf_qwen3",)}),
    M("g8.rope_scaling_ignored", "G8", "model.py",
      "inv_freq = _scaled_inv_freq(config, inv_freq)", "pass",
      "rope_scaling (linear / llama3) is ignored", knobs={"configs": ("hf_llama3_rope", "hf_qwen2_linear_rope")}),
    M("g8.llama3_interpolation_reversed", "G8", "model.py",
      "smoothed = (1 - smooth) * scaled / factor + smooth * scaled",
      "smoothed = (1 - smooth) * scaled + smooth * scaled / factor",
      "llama3 rope: the medium band interpolates the wrong way", knobs={"configs": ("hf_llama3_rope",)}),
    M("g8.hidden_act_ignored", "G8", "model.py",
      "return ACTIVATIONS[config.hidden_act](x)", "return F.silu(x)",
      "hidden_act is ignored: every model runs SiLU", knobs={"configs": ("hf_qwen3",)}),
    M("g8.qkv_bias_dropped_in_forward", "G8", "model.py",
      "return a.q_proj(x), a.k_proj(x), a.v_proj(x)",
      "return F.linear(x, a.q_proj.weight), F.linear(x, a.k_proj.weight), F.linear(x, a.v_proj.weight)",
      "Qwen2's q/k/v bias is loaded but not applied by the rollout forward", knobs={"configs": ("hf_qwen2_linear_rope",)}),
    M("g8.qk_norm_skipped", "G8", "model.py",
      "q, k = self.q_norm(q), self.k_norm(k)", "pass",
      "Qwen3's per-head q/k RMSNorm is skipped", knobs={"configs": ("hf_qwen3",)}),
    M("g8.norm_eps_ignored", "G8", "convert.py",
      "rms_norm_eps=float(data[\"rms_norm_eps\"]),", "rms_norm_eps=1e-6,",
      "rms_norm_eps from the config is ignored", knobs={"configs": ("hf_qwen3",)}),
    M("g8.qk_norm_after_rope", "G8", "model.py",
      "        if cfg.qk_norm:\n            q, k = self.q_norm(q), self.k_norm(k)\n        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)",
      "        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)\n        if cfg.qk_norm:\n            q, k = self.q_norm(q), self.k_norm(k)",
      "Qwen3's q/k norm applied after RoPE instead of before", knobs={"configs": ("hf_qwen3",)}),
    # ---------------------------------------------------------------- G9 policy objective
    M("g9.negated_advantages", "G9", "trainer.py",
      "centred = grouped - grouped.mean(-1, keepdim=True)",
      "centred = grouped.mean(-1, keepdim=True) - grouped",
      "GRPO advantages with the wrong sign"),
    M("g9.no_clipping", "G9", "trainer.py",
      "return torch.maximum(loss1, loss2), (loss2 > loss1).float(), old_logp - logp",
      "return loss1, (loss2 > loss1).float(), old_logp - logp",
      "the PPO clip is removed (plain importance-weighted policy gradient)"),
    M("g9.clip_high_ignored", "G9", "trainer.py",
      "pg, clipped, kl_old = policy_loss(logp, old, adv, cfg.eps_clip, cfg.eps_clip if cfg.eps_clip_high is None else cfg.eps_clip_high)",
      "pg, clipped, kl_old = policy_loss(logp, old, adv, cfg.eps_clip, cfg.eps_clip)",
      "--eps-clip-high is ignored"),
    M("g9.std_not_normalised", "G9", "trainer.py",
      "if std_normalization and n_samples > 1:", "if False:",
      "GRPO advantages are not divided by the group std"),
    M("g9.ratio_detached", "G9", "trainer.py",
      "ratio = (logp - old_logp).exp()", "ratio = (logp - old_logp).exp().detach() + 0 * logp",
      "the importance ratio is detached: no policy gradient flows"),
    M("g9.bf16_without_fp32_masters", "G9", "trainer.py",
      "        if self.param_dtype in LOW_PRECISION:\n            self.masters",
      "        if False:\n            self.masters",
      "bf16 training steps the bf16 weights directly (no fp32 masters, bf16 Adam moments)", dtype="bfloat16"),
    M("g9.fp16_without_loss_scaling", "G9", "trainer.py",
      "self.scaler = LossScaler() if self.param_dtype == torch.float16 else None", "self.scaler = None",
      "fp16 training without loss scaling (gradients underflow)", dtype="float16"),
    M("g9.token_mean_not_sample_mean", "G9", "trainer.py",
      "pg_loss = sample_mean(pg, mask).mean()", "pg_loss = (pg * mask).sum() / mask.sum()",
      "the loss is a token mean over the step instead of vime's per-response mean"),
)


def by_id(ids: list[str] | None = None, gates: list[str] | None = None) -> list[Mutant]:
    chosen = [m for m in MUTANTS if (not ids or m.id in ids) and (not gates or m.gate in gates)]
    unknown = sorted(set(ids or []) - {m.id for m in MUTANTS})
    if unknown:
        raise ValueError(f"unknown mutants {unknown}")
    return chosen


def patch_text(text: str, m: Mutant) -> str:
    count = text.count(m.old)
    if count != 1:
        raise MutantError(f"mutant {m.id}: the text to replace occurs {count} times in {m.file} (expected once)")
    return text.replace(m.old, m.new)


def _vime_modules() -> dict[str, Any]:
    return {name: mod for name, mod in sys.modules.items() if name == "vime" or name.startswith("vime.")}


@contextmanager
def mutated_runtime(m: Mutant, package_dir: Path = PACKAGE_DIR) -> Iterator[Path]:
    """A patched copy of the runtime, imported as `vime` inside the block (and by spawned children)."""
    with tempfile.TemporaryDirectory(prefix=f"vime-mutant-{m.id}-") as tmp:
        root = Path(tmp)
        shutil.copytree(package_dir, root / "vime", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        target = root / "vime" / m.file
        target.write_text(patch_text(target.read_text(encoding="utf-8"), m), encoding="utf-8")
        saved = _vime_modules()
        for name in saved:
            del sys.modules[name]
        old_path, old_env = list(sys.path), os.environ.get("PYTHONPATH")
        sys.path.insert(0, str(root))
        os.environ["PYTHONPATH"] = str(root) + (os.pathsep + old_env if old_env else "")
        importlib.invalidate_caches()
        try:
            yield root
        finally:
            for name in list(_vime_modules()):
                del sys.modules[name]
            sys.modules.update(saved)
            sys.path[:] = old_path
            if old_env is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = old_env
            importlib.invalidate_caches()


def run_mutant(m: Mutant, device: str = "cpu") -> MutantResult:
    start = time.perf_counter()
    with mutated_runtime(m):
        gates = importlib.import_module("vime.gates")
        assert Path(gates.__file__).resolve().parents[1] != PACKAGE_DIR, "mutant copy not imported"
        r = gates.run_gate(m.gate, device=device, dtype=m.dtype, **m.knobs)
    return MutantResult(m.id, m.gate, r.verdict, r.verdict == "fail", r.reason[:300], round(time.perf_counter() - start, 2))


def kill_rate(results: list[MutantResult]) -> dict[str, Any]:
    killed = [r for r in results if r.killed]
    return {
        "planted": len(results), "killed": len(killed),
        "rate": round(len(killed) / len(results), 4) if results else 0.0,
        "survivors": [r.id for r in results if not r.killed],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vime.mutants", description=__doc__.splitlines()[0])
    parser.add_argument("--gates", default="", help="comma-separated gate ids")
    parser.add_argument("--ids", default="", help="comma-separated mutant ids")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    try:
        chosen = by_id(split(args.ids) or None, split(args.gates) or None)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = []
    for m in chosen:
        r = run_mutant(m, args.device)
        results.append(r)
        sys.stderr.write(f"{'killed ' if r.killed else 'SURVIVED'} {r.id:40} {r.gate} {r.verdict} {r.duration_s:.1f}s {r.reason[:120]}\n")
    summary = kill_rate(results)
    if args.json:
        print(json.dumps({"schema": "vime.mutants/1", **summary, "results": [r.to_dict() for r in results]}))
    else:
        print(f"kill rate {summary['killed']}/{summary['planted']} = {summary['rate']:.1%}; survivors: {summary['survivors'] or 'none'}")
    return 0 if not summary["survivors"] else 1


if __name__ == "__main__":
    sys.exit(main())
