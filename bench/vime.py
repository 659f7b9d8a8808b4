"""Benchmark the vime runtime: rollout decode speed against transformers, training step time, and
weight-sync cost per MB for each transport.

Side by side, on the same weights:
  * rollout: vime's engine `generate` vs transformers' `generate()` (LlamaForCausalLM loaded from the
    checkpoint vime saved): same batch, same prompt, same number of new tokens, greedy, KV cache on
    both, same torch thread count; tokens/s = batch x new tokens / wall time (prefill included),
    median of --repeats after a warm-up, the two timed in turns so machine load hits both alike.
    Target: vime >= 1.0x. The greedy outputs are compared as a sanity check.
  * training: one GRPO optimizer step (forward-only log-probs + forward/backward + AdamW) on a
    rollout of the same batch, median over --repeats.
  * training against transformers: the same GRPO step (forward-only log-probs, forward/backward of
    the PPO clipped loss, AdamW) written on transformers' LlamaForCausalLM with the same weights and
    batch; ratio = transformers step time / vime step time (target >= 1.0x).
  * speculative decoding vs plain decoding on the engine (same prompts, greedy and T = 1, k = 4):
    the target's layers 1.. have zero output projections (so they are identity residual blocks)
    and the draft is the target's first layer alone, so the draft agrees with the target (high
    acceptance, reported) at a quarter of its depth; tokens/s of both, and whether the greedy tokens
    are identical.
  * weight sync: colocated hand-over and decoupled broadcast (gloo, two processes), packed and per
    tensor, ms per MB of weights, median over --repeats.

  .venv/bin/python bench/vime.py [--size small|tiny] [--batch 8] [--new-tokens 64] [--repeats 5]
                                [--threads 1] [--json]
Writes bench/results/vime.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

SIZES = {
    "tiny": {},
    "small": {"vocab_size": 2048, "hidden_size": 256, "num_layers": 4, "num_heads": 8, "num_kv_heads": 8,
              "intermediate_size": 688},
}


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _alternating_medians(fns: dict, repeats: int) -> dict:
    """Time several callables in turns (warm-up first), so machine load hits them alike."""
    for fn in fns.values():
        fn()
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def bench_rollout(model, hf_dir: Path, batch: int, prompt_len: int, new_tokens: int, repeats: int) -> dict:
    from vime.hf_parity import load_transformers_model, transformers_status
    from vime.rollout.engine import RolloutEngine

    engine = RolloutEngine.from_hf(hf_dir)
    prompts = torch.randint(0, model.config.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(0))

    def vime_generate():
        return engine.generate(prompts, max_new_tokens=new_tokens, temperature=0)

    tokens = batch * new_tokens
    out = {"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens}
    ok, why = transformers_status()
    if not ok:
        vime_s = _median_time(vime_generate, repeats)
        out.update({"vime_tokens_per_s": tokens / vime_s, "vime_s": vime_s, "transformers": f"skipped: {why}"})
        return out
    hf = load_transformers_model(hf_dir, torch.float32)

    def hf_generate():
        with torch.no_grad():
            return hf.generate(
                prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None,
            )

    medians = _alternating_medians({"vime": vime_generate, "transformers": hf_generate}, repeats)
    vime_s, hf_s = medians["vime"], medians["transformers"]
    out.update({"vime_tokens_per_s": tokens / vime_s, "vime_s": vime_s})
    ours = vime_generate().response_tokens
    theirs = hf_generate()[:, prompt_len:]
    out.update({
        "transformers_tokens_per_s": tokens / hf_s, "transformers_s": hf_s, "speedup": hf_s / vime_s,
        "greedy_tokens_identical": float((ours == theirs).float().mean()),
        "transformers_version": __import__("transformers").__version__,
    })
    return out


def bench_train(model, hf_dir: Path, batch: int, prompt_len: int, new_tokens: int, repeats: int) -> dict:
    from vime.rollout.engine import RolloutEngine
    from vime.trainer import TrainBatch, Trainer, TrainerConfig

    engine = RolloutEngine.from_hf(hf_dir)
    prompts = torch.randint(0, model.config.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(1))
    out = engine.generate(prompts, max_new_tokens=new_tokens, temperature=1.0)
    tb = TrainBatch(out.prompt_tokens, out.response_tokens, out.loss_mask, out.logprobs,
                    torch.linspace(0, 1, batch), n_samples_per_prompt=min(4, batch))
    trainer = Trainer(model, TrainerConfig(lr=1e-5, global_batch_size=batch))
    step_s = _median_time(lambda: trainer.train_rollout(tb), repeats)
    return {"samples_per_step": batch, "tokens_per_sample": prompt_len + new_tokens, "step_s": step_s}


def bench_train_vs_transformers(model, hf_dir: Path, batch: int, prompt_len: int, new_tokens: int, repeats: int) -> dict:
    """The same GRPO step on vime's TrainLM and on transformers' model (same weights, batch, loss)."""
    import copy

    from vime.hf_parity import load_transformers_model, transformers_status
    from vime.model import response_logprobs
    from vime.rollout.engine import RolloutEngine
    from vime.trainer import TrainBatch, Trainer, TrainerConfig, grpo_advantages, policy_loss, sample_mean

    ok, why = transformers_status()
    if not ok:
        return {"transformers": f"skipped: {why}"}
    engine = RolloutEngine.from_hf(hf_dir)
    prompts = torch.randint(0, model.config.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(1))
    out = engine.generate(prompts, max_new_tokens=new_tokens, temperature=1.0)
    rewards = torch.linspace(0, 1, batch)
    tb = TrainBatch(out.prompt_tokens, out.response_tokens, out.loss_mask, out.logprobs, rewards, n_samples_per_prompt=min(4, batch))
    trainer = Trainer(copy.deepcopy(model), TrainerConfig(lr=1e-5, global_batch_size=batch))
    hf = load_transformers_model(hf_dir, torch.float32).train()
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-5, foreach=False)
    full = torch.cat([out.prompt_tokens, out.response_tokens], dim=1)[:, :-1]
    adv = grpo_advantages(rewards, tb.n_samples_per_prompt)

    def hf_step():
        with torch.no_grad():
            old, _ = response_logprobs(hf(input_ids=full).logits[:, prompt_len - 1 :], out.response_tokens)
        opt.zero_grad(set_to_none=True)
        logp, _ = response_logprobs(hf(input_ids=full).logits[:, prompt_len - 1 :], out.response_tokens)
        pg, _, _ = policy_loss(logp, old, adv, 0.2, 0.2)
        sample_mean(pg, out.loss_mask).mean().backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        opt.step()

    medians = _alternating_medians({"vime": lambda: trainer.train_rollout(tb), "transformers": hf_step}, repeats)
    return {"vime_step_s": medians["vime"], "transformers_step_s": medians["transformers"],
            "ratio": medians["transformers"] / medians["vime"]}


def bench_spec_decode(config, batch: int, prompt_len: int, new_tokens: int, repeats: int, k: int = 4) -> dict:
    from dataclasses import replace

    from vime.convert import iter_hf_weights
    from vime.model import RolloutLM, TrainLM
    from vime.rollout.engine import RolloutEngine
    from vime.spec_decode import DraftModelProposer, SpeculativeSetup, parse_speculative_config

    target = TrainLM(config)
    with torch.no_grad():
        for layer in target.decoder.layers[1:]:  # identity residual blocks: the first layer decides
            layer.self_attention.linear_proj.weight.zero_()
            layer.mlp.linear_fc2.weight.zero_()
    weights = {n: t.detach().clone() for n, t in iter_hf_weights(target)}
    engine = RolloutEngine(config, hf_weights=weights)
    draft_cfg = replace(config, num_layers=1)
    draft = RolloutLM(draft_cfg)
    draft.load_state_dict({n: t for n, t in weights.items() if not n.startswith("model.layers.") or n.startswith("model.layers.0.")})
    draft.eval().requires_grad_(False)
    setup = SpeculativeSetup(parse_speculative_config({"method": "draft_model", "model": "<in-memory>", "num_speculative_tokens": k}),
                             DraftModelProposer(draft))
    prompts = torch.randint(0, config.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(2))
    tokens = batch * new_tokens
    result = {"k": k, "target_layers": config.num_layers, "draft_layers": 1}
    for label, temperature in (("greedy", 0.0), ("sampled_t1", 1.0)):
        def plain():
            return engine.generate(prompts, max_new_tokens=new_tokens, temperature=temperature)

        def spec():
            return engine.generate(prompts, max_new_tokens=new_tokens, temperature=temperature, speculative=setup)

        medians = _alternating_medians({"plain": plain, "spec": spec}, repeats)
        sp = spec()
        result[label] = {
            "plain_tokens_per_s": tokens / medians["plain"], "spec_tokens_per_s": tokens / medians["spec"],
            "speedup": medians["plain"] / medians["spec"], "acceptance_rate": sp.stats["spec_decode"]["acceptance_rate"],
            "mean_accepted_length": sp.stats["spec_decode"]["mean_accepted_length"],
        }
        if temperature == 0:
            result[label]["tokens_identical"] = bool(torch.equal(sp.response_tokens, plain().response_tokens))
    return result


def bench_sync(model, hf_dir: Path, repeats: int) -> dict:
    from vime.convert import iter_hf_weights
    from vime.rollout.engine import RolloutEngine, build_engine
    from vime.weight_sync import BroadcastSync, ColocatedSync, EngineSpec

    mb = sum(t.numel() * t.element_size() for _, t in iter_hf_weights(model)) / 1e6
    rows = {}
    engine = RolloutEngine.from_hf(hf_dir)
    for packed in (True, False):
        sync = ColocatedSync(engine, packed=packed)
        rows[f"colocated {'packed' if packed else 'per tensor'}"] = _median_time(
            lambda: _ok(sync.push(iter_hf_weights(model))), repeats
        )
    spec = EngineSpec(build_engine, (), {"config": {}, "hf_dir": str(hf_dir)})
    t0 = time.perf_counter()
    with BroadcastSync(spec, device_kind="cpu", timeout_s=120) as remote:
        start_s = time.perf_counter() - t0
        for packed in (True, False):
            remote.packed = packed
            rows[f"broadcast {'packed' if packed else 'per tensor'}"] = _median_time(
                lambda: _ok(remote.push(iter_hf_weights(model))), repeats
            )
    return {"mb": mb, "broadcast_process_start_s": start_s,
            "transports": {k: {"s": v, "ms_per_mb": 1e3 * v / mb, "mb_per_s": mb / v} for k, v in rows.items()}}


def _ok(report):
    if not report.ok:
        raise RuntimeError(f"sync failed: {report.error}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads for both frameworks (default 1, like vime.train's --cpu-threads)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(max(1, args.threads))

    from vime.convert import save_train_model_hf
    from vime.model import TrainLM, tiny_config

    config = tiny_config(**SIZES[args.size])
    model = TrainLM(config)
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory(prefix="vime-bench-") as tmp:
        hf_dir = save_train_model_hf(Path(tmp) / "hf", model)
        result = {
            "size": args.size, "params": params, "threads": torch.get_num_threads(), "torch": torch.__version__,
            "load_average": os.getloadavg()[0],
            "rollout": bench_rollout(model, hf_dir, args.batch, args.prompt_len, args.new_tokens, args.repeats),
            "train": bench_train(model, hf_dir, args.batch, args.prompt_len, args.new_tokens, args.repeats),
            "train_vs_transformers": bench_train_vs_transformers(model, hf_dir, args.batch, args.prompt_len,
                                                                 args.new_tokens, args.repeats),
            "spec_decode": bench_spec_decode(config, args.batch, args.prompt_len, args.new_tokens, args.repeats),
            "sync": bench_sync(model, hf_dir, args.repeats),
        }
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vime.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    _print_tables(result)
    return 0


def _print_tables(r: dict) -> None:
    ro, tr, sy = r["rollout"], r["train"], r["sync"]
    print(f"vime bench: {r['size']} model, {r['params'] / 1e6:.2f} M params, torch {r['torch']}, "
          f"{r['threads']} threads, load average {r['load_average']:.2f}")
    print(f"\nrollout decode (batch {ro['batch']}, prompt {ro['prompt_len']}, {ro['new_tokens']} new tokens, greedy, KV cache)")
    print(f"  {'':24}{'vime engine':>16}{'transformers':>16}")
    hf_tps = ro.get("transformers_tokens_per_s")
    hf_rate = f"{hf_tps:.1f}" if hf_tps else ro.get("transformers", "-")
    hf_wall = f"{ro['transformers_s']:.4f}" if hf_tps else "-"
    print(f"  {'tokens/s':24}{ro['vime_tokens_per_s']:>16.1f}{hf_rate:>16}")
    print(f"  {'wall s (median)':24}{ro['vime_s']:>16.4f}{hf_wall:>16}")
    if hf_tps:
        print(f"  speedup vime / transformers: {ro['speedup']:.2f}x (target >= 1.0x); "
              f"greedy tokens identical: {100 * ro['greedy_tokens_identical']:.1f}%")
    print(f"\ntraining: {tr['step_s'] * 1e3:.1f} ms per optimizer step ({tr['samples_per_step']} samples x {tr['tokens_per_sample']} tokens)")
    tv = r["train_vs_transformers"]
    if "ratio" in tv:
        print(f"  same GRPO step on transformers: {tv['transformers_step_s'] * 1e3:.1f} ms vs vime {tv['vime_step_s'] * 1e3:.1f} ms "
              f"-> ratio {tv['ratio']:.2f}x (target >= 1.0x)")
    sd = r["spec_decode"]
    print(f"\nspeculative decoding (k={sd['k']}, draft {sd['draft_layers']} of {sd['target_layers']} layers)")
    print(f"  {'':14}{'plain tok/s':>12}{'spec tok/s':>12}{'speedup':>9}{'accept':>8}{'len/round':>10}")
    for label in ("greedy", "sampled_t1"):
        row = sd[label]
        print(f"  {label:14}{row['plain_tokens_per_s']:>12.1f}{row['spec_tokens_per_s']:>12.1f}{row['speedup']:>8.2f}x"
              f"{row['acceptance_rate']:>8.2f}{row['mean_accepted_length']:>10.2f}"
              + (f"  identical: {row['tokens_identical']}" if "tokens_identical" in row else ""))
    print(f"\nweight sync ({sy['mb']:.2f} MB of weights; broadcast engine process start {sy['broadcast_process_start_s']:.2f} s)")
    print(f"  {'transport':24}{'ms/MB':>10}{'MB/s':>10}{'s/sync':>10}")
    for name, row in sy["transports"].items():
        print(f"  {name:24}{row['ms_per_mb']:>10.2f}{row['mb_per_s']:>10.1f}{row['s']:>10.4f}")


if __name__ == "__main__":
    raise SystemExit(main())
