"""Real process groups: data-parallel trainer ranks and a weight broadcast from the trainer group to
a rollout engine rank.

`run_dp_sync(world)` spawns `dp` trainer ranks and one engine rank with torch.multiprocessing
(spawn) in one torch.distributed world (gloo on CPU, nccl on CUDA, hccl on Ascend - the platform's
`comm_backend`), rendezvous through a TCPStore on 127.0.0.1 on an OS-assigned port:
  * ranks 0..dp-1 train: each holds the same seeded model and takes one GRPO step on its shard of
    the rollout batch (rows r::dp); the Trainer all-reduces the gradients over the data-parallel
    group and divides by its size (`Trainer(dp_group=...)`), so every rank takes the step the full
    batch would give;
  * rank 0 then pushes its weights to the engine rank (rank dp) over a two-rank sync group with the
    production state machine (pause, flush, start, one `broadcast` per bucket of packed bytes,
    finish, continue), metadata first (`broadcast_object_list`);
  * every rank reports back (digests, the engine's fingerprints and probe log-probs) through a file.
The launcher (not a rank) compares: the ranks agree, the step equals one taken in a single process
on the whole batch, and the engine holds rank 0's weights exactly (gate G4, transport "dp").
"""

from __future__ import annotations

import datetime as _dt
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class DPWorld:
    """What every rank rebuilds: the model config (dict), the rollout batch (tensors on CPU), the
    trainer settings, the probe batch and the number of trainer ranks."""

    config: dict
    batch: dict  # prompt_tokens, response_tokens, loss_mask, rollout_logprobs, rewards, n_samples_per_prompt
    lr: float
    dp: int
    probe_prompt: torch.Tensor
    probe_response: torch.Tensor
    device_kind: str = "cpu"
    dtype: str = "float32"
    buffer_size: int = 96 * 1024
    timeout_s: float = 120.0


def shard(batch: dict, rank: int, dp: int) -> dict:
    """Rows rank::dp of every per-sample tensor; whole prompt groups stay together when dp divides n."""
    n = batch["n_samples_per_prompt"]
    rows = torch.arange(batch["prompt_tokens"].shape[0])
    groups = rows.view(-1, n)[rank::dp].reshape(-1)  # whole GRPO groups per rank
    out = {k: v[groups] for k, v in batch.items() if torch.is_tensor(v)}
    out["n_samples_per_prompt"] = n
    return out


def _train_batch(b: dict):
    from vime.trainer import TrainBatch

    return TrainBatch(b["prompt_tokens"], b["response_tokens"], b["loss_mask"], b["rollout_logprobs"], b["rewards"],
                      b["n_samples_per_prompt"])


def build_trainer(world: DPWorld, batch_rows: int, dp_group: Any = None, dp_size: int = 1):
    from vime.model import ModelConfig, TrainLM
    from vime.platform import get_platform
    from vime.trainer import Trainer, TrainerConfig

    dev = get_platform(world.device_kind).device()
    model = TrainLM(ModelConfig.from_dict(world.config)).to(device=dev, dtype=getattr(torch, world.dtype))
    cfg = TrainerConfig(lr=world.lr, global_batch_size=batch_rows)
    return Trainer(model, cfg, dp_group=dp_group, dp_size=dp_size)


def _rank_main(rank: int, world: DPWorld, port: int, out_dir: str) -> None:
    import torch.distributed as dist

    from vime import weight_sync as ws
    from vime.convert import iter_hf_weights
    from vime.digest import params_digest
    from vime.platform import get_platform

    torch.set_num_threads(1)
    platform = get_platform(world.device_kind)
    size = world.dp + 1
    timeout = _dt.timedelta(seconds=world.timeout_s)
    store = dist.TCPStore("127.0.0.1", port, size, False, timeout=timeout)
    dist.init_process_group(platform.comm_backend, store=store, rank=rank, world_size=size, timeout=timeout)
    try:
        dp_group = dist.new_group(list(range(world.dp)))  # every rank must create every group
        sync_group = dist.new_group([0, world.dp])
        report: dict[str, Any] = {"rank": rank, "backend": platform.comm_backend}
        if rank < world.dp:
            local = shard(world.batch, rank, world.dp)
            trainer = build_trainer(world, local["prompt_tokens"].shape[0], dp_group, world.dp)
            _, steps = trainer.train_rollout(_train_batch(local))
            report.update({"params": params_digest(trainer.model), "grad_norm": steps[-1]["train/grad_norm"],
                           "rows": int(local["prompt_tokens"].shape[0])})
            if rank == 0:
                torch.save({"params": {n: p.detach().cpu() for n, p in trainer.model.named_parameters()},
                            "grads": {n: g.cpu() for n, g in trainer.last_grads.items()}}, Path(out_dir, "params0.pt"))
                report["push"] = _push(list(iter_hf_weights(trainer.model)), sync_group, world.buffer_size)
                report["trainer_fingerprints"] = _fingerprints(dict(iter_hf_weights(trainer.model)))
        else:
            from vime.rollout.engine import RolloutEngine

            engine = RolloutEngine(__import__("vime.model", fromlist=["ModelConfig"]).ModelConfig.from_dict(world.config),
                                   device=platform.device(), dtype=getattr(torch, world.dtype))
            engine.init_weight_transfer_engine({"world_size": size, "rank": rank, "backend": platform.comm_backend})
            ws_result = _receive(engine, sync_group)
            report.update(ws_result)
            report["engine_fingerprints"] = _fingerprints(engine.named_weights())
            report["probe_logprobs"] = engine.compute_logprobs(world.probe_prompt, world.probe_response).cpu().tolist()
            report["events"] = list(engine.events)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))


def _fingerprints(named: dict) -> dict:
    from vime.rollout.engine import fingerprint

    return {n: list(map(str, fingerprint(t))) for n, t in named.items()}


def _push(named: list, group: Any, buffer_size: int) -> dict:
    """Rank 0 -> engine rank: metadata, then one broadcast of packed bytes per bucket."""
    import torch.distributed as dist

    from vime import weight_sync as ws

    buckets = list(ws.bucketize(named, buffer_size))
    metas = [ws.bucket_metadata(b) for b in buckets]
    dist.broadcast_object_list([{"buckets": metas}], src=0, group=group)
    t0 = time.perf_counter()
    staging = None
    for bucket in buckets:
        staging, _ = ws.pack_into(bucket, staging)
        dist.broadcast(staging, src=0, group=group)
    box = [None]
    dist.broadcast_object_list(box, src=_engine_rank(group), group=group)
    return {**box[0], "buckets": len(buckets), "seconds": time.perf_counter() - t0,
            "names": [n for b in buckets for n, _ in b]}


def _engine_rank(group: Any) -> int:
    import torch.distributed as dist

    return max(dist.get_process_group_ranks(group))


def _receive(engine: Any, group: Any) -> dict:
    import torch.distributed as dist

    from vime import weight_sync as ws

    box = [None]
    dist.broadcast_object_list(box, src=0, group=group)
    error, version = "", None
    try:
        ws._begin(engine, True)
    except Exception as exc:  # keep draining so the sender is not left blocked
        error = f"{type(exc).__name__}: {exc}"
    for metas in box[0]["buckets"]:
        flat = torch.empty(sum(m.nbytes for m in metas), dtype=torch.uint8)
        dist.broadcast(flat, src=0, group=group)
        if not error:
            try:
                engine.update_weights({n: t.clone() for n, t in ws.unpack(flat, metas)})
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
    if not error:
        try:
            version = ws._end(engine, 1)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    reply = {"ok": not error, "version": version, "error": error}
    dist.broadcast_object_list([reply], src=dist.get_rank(), group=group)
    return reply


def run_dp_sync(world: DPWorld) -> list[dict]:
    """Spawn the dp trainer ranks and the engine rank; return every rank's report (rank order)."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    size = world.dp + 1
    with tempfile.TemporaryDirectory(prefix="vime-dp-") as out:
        # the launcher hosts the rendezvous store on a port the OS picks, and is not a rank
        store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=_dt.timedelta(seconds=world.timeout_s),
                              wait_for_workers=False)
        ctx = mp.start_processes(_rank_main, args=(world, store.port, out), nprocs=size, join=False, start_method="spawn")
        deadline = time.monotonic() + world.timeout_s
        try:
            while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"data-parallel ranks did not finish within {world.timeout_s} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        del store
        reports = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(size)]
        reports[0]["state"] = torch.load(Path(out, "params0.pt"), weights_only=True)
        return reports


