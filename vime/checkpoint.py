"""Save / load / resume: model, optimizer (moments + step), scheduler, RNG states, data cursor, weight
version - Megatron's layout scaled down.

  <save>/iter_0000003/{model.pt, optim.pt, rng.pt, meta.json}
  <save>/rollout/global_dataset_state_dict_3.pt
  <save>/latest_checkpointed_iteration.txt          ("3")

The iteration is the rollout id just finished; a resumed run starts at iteration + 1 (unless
--start-rollout-id says otherwise). Every directory and file is written to a temp name and renamed,
and the `latest` file is written last, so it only ever names a complete checkpoint.
Load flags follow Megatron: no_load_optim (fresh optimizer/scheduler), no_load_rng, finetune
(weights only, iteration treated as 0).
"""

from __future__ import annotations

import io
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from vime.fsio import atomic_write_bytes, write_dir_atomically

LATEST_FILE = "latest_checkpointed_iteration.txt"


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, incomplete or inconsistent."""


def iter_dir(root: str | Path, iteration: int) -> Path:
    return Path(root) / f"iter_{iteration:07d}"


def _bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


# --------------------------------------------------------------------------------------- RNG


def capture_rng(platform=None) -> dict:
    """Python, numpy, torch CPU and device RNG states in a weights_only-loadable form."""
    import numpy as np

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype("int64")), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch_cpu": torch.get_rng_state(),
        "device": platform.get_rng_state() if platform is not None else [],
    }


def restore_rng(state: dict, platform=None) -> None:
    import numpy as np

    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype("uint32"), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch_cpu"])
    if platform is not None and state.get("device"):
        platform.set_rng_state(state["device"])


# --------------------------------------------------------------------------------------- save


def save_checkpoint(
    root: str | Path,
    iteration: int,
    trainer,
    data_source=None,
    weight_version: int | None = None,
    platform=None,
    meta: dict | None = None,
    save_optim: bool = True,
) -> Path:
    root = Path(root)
    state = trainer.state_dict()
    model_part = {k: state[k] for k in ("model", "ref_model", "step", "master_params") if k in state}
    info = {
        "iteration": iteration,
        "weight_version": weight_version,
        "step": trainer.step,
        "has_optim": save_optim,
        "model_config": trainer.model.config.to_dict(),
        **(meta or {}),
    }

    def fill(tmp: Path) -> None:
        (tmp / "model.pt").write_bytes(_bytes(model_part))
        if save_optim:
            (tmp / "optim.pt").write_bytes(_bytes({k: state[k] for k in ("optimizer", "scheduler", "loss_scaler") if k in state}))
        (tmp / "rng.pt").write_bytes(_bytes(capture_rng(platform)))
        (tmp / "meta.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")

    path = write_dir_atomically(iter_dir(root, iteration), fill)
    if data_source is not None:
        atomic_write_bytes(data_source.state_path(root, iteration), data_source.state_bytes())
    atomic_write_bytes(root / LATEST_FILE, f"{iteration}\n".encode())  # last: names a complete checkpoint
    return path


# --------------------------------------------------------------------------------------- load


@dataclass
class LoadedCheckpoint:
    path: Path
    iteration: int  # 0 when finetune
    weight_version: int | None
    loaded_optim: bool
    loaded_rng: bool
    finetune: bool
    data_restored: bool


def latest_iteration(root: str | Path) -> int | None:
    f = Path(root) / LATEST_FILE
    if not f.is_file():
        return None
    text = f.read_text().strip()
    if not text.isdigit():
        raise CheckpointError(f"{f} holds {text!r}, not an iteration number")
    return int(text)


def load_checkpoint(
    root: str | Path,
    trainer,
    data_source=None,
    *,
    ckpt_step: int | None = None,
    no_load_optim: bool = False,
    no_load_rng: bool = False,
    finetune: bool = False,
    platform=None,
) -> LoadedCheckpoint | None:
    """Restore into `trainer` (and `data_source`). None when `root` holds no checkpoint yet."""
    iteration = ckpt_step if ckpt_step is not None else latest_iteration(root)
    if iteration is None:
        return None
    path = iter_dir(root, iteration)
    if not (path / "meta.json").is_file():
        raise CheckpointError(f"{path} is not a complete checkpoint (no meta.json); pick another --ckpt-step")
    info = json.loads((path / "meta.json").read_text())
    model_part = torch.load(path / "model.pt", weights_only=True, map_location="cpu")
    load_optim = not (no_load_optim or finetune)
    state = dict(model_part)
    if load_optim:
        if not (path / "optim.pt").is_file():
            raise CheckpointError(f"{path} was saved without optimizer state; resume with --no-load-optim")
        state.update(torch.load(path / "optim.pt", weights_only=True, map_location="cpu"))
    trainer.load_state_dict(state, load_optim=load_optim)
    if finetune:
        trainer.step = 0
    load_rng = not (no_load_rng or finetune)
    if load_rng:
        restore_rng(torch.load(path / "rng.pt", weights_only=True), platform)
    restored = False
    if data_source is not None and not finetune:
        restored = data_source.load(root, iteration)
    return LoadedCheckpoint(
        path=path,
        iteration=0 if finetune else iteration,
        weight_version=info.get("weight_version"),
        loaded_optim=load_optim,
        loaded_rng=load_rng,
        finetune=finetune,
        data_restored=restored,
    )
