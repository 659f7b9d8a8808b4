"""Checkpoint round trip (model, optimizer moments + step, scheduler, RNG, data cursor, version),
layout, flags, and atomicity."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import vime.checkpoint as ckpt
from vime.checkpoint import CheckpointError, latest_iteration, load_checkpoint, save_checkpoint
from vime.data import RolloutDataSource, SyntheticPrompts
from vime.model import TrainLM, tiny_config
from vime.trainer import TrainBatch, Trainer, TrainerConfig


def _trained(seed=0):
    model = TrainLM(tiny_config())
    trainer = Trainer(model, TrainerConfig(lr=1e-3, global_batch_size=4, lr_decay_style="linear"), total_steps=10)
    g = torch.Generator().manual_seed(seed)
    batch = TrainBatch(torch.randint(0, 256, (4, 3), generator=g), torch.randint(0, 256, (4, 5), generator=g),
                       torch.ones(4, 5), torch.full((4, 5), -5.5), torch.rand(4, generator=g), 2)
    trainer.train_rollout(batch)
    return trainer


def _data():
    src = RolloutDataSource(SyntheticPrompts(8, 2, 256), rollout_seed=3)
    src.get_prompts(3, 2)
    return src


def test_round_trip_restores_everything(tmp_path):
    trainer, data = _trained(), _data()
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    path = save_checkpoint(tmp_path, 4, trainer, data, weight_version=5)
    assert path.name == "iter_0000004" and latest_iteration(tmp_path) == 4
    assert sorted(p.name for p in path.iterdir()) == ["meta.json", "model.pt", "optim.pt", "rng.pt"]
    assert (tmp_path / "rollout" / "global_dataset_state_dict_4.pt").is_file()
    expected_rng = (random.random(), np.random.rand(), torch.rand(1))

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    fresh = Trainer(TrainLM(tiny_config(seed=77)), TrainerConfig(lr=1e-3, global_batch_size=4, lr_decay_style="linear"), total_steps=10)
    fresh_data = RolloutDataSource(SyntheticPrompts(8, 2, 256), rollout_seed=3)
    loaded = load_checkpoint(tmp_path, fresh, fresh_data)
    assert (loaded.iteration, loaded.weight_version, loaded.loaded_optim, loaded.loaded_rng) == (4, 5, True, True)
    assert loaded.data_restored and fresh_data.state_dict() == data.state_dict()
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected_rng
    assert all(torch.equal(a, b) for a, b in zip(fresh.model.parameters(), trainer.model.parameters()))
    o1, o2 = fresh.optimizer.state_dict(), trainer.optimizer.state_dict()
    for i in o2["state"]:
        assert torch.equal(o1["state"][i]["exp_avg"], o2["state"][i]["exp_avg"])
        assert int(o1["state"][i]["step"]) == int(o2["state"][i]["step"]) == 1
    assert fresh.scheduler.state_dict() == trainer.scheduler.state_dict()
    assert fresh.optimizer.param_groups[0]["lr"] == trainer.optimizer.param_groups[0]["lr"]


def test_load_flags(tmp_path):
    trainer = _trained()
    save_checkpoint(tmp_path, 1, trainer, _data())
    fresh = Trainer(TrainLM(tiny_config()), TrainerConfig(lr=1e-3, global_batch_size=4))
    got = load_checkpoint(tmp_path, fresh, no_load_optim=True, no_load_rng=True)
    assert (got.loaded_optim, got.loaded_rng) == (False, False)
    assert fresh.optimizer.state_dict()["state"] == {}
    ft = Trainer(TrainLM(tiny_config()), TrainerConfig(lr=1e-3, global_batch_size=4))
    got = load_checkpoint(tmp_path, ft, _data(), finetune=True)
    assert (got.iteration, got.finetune, got.loaded_optim, got.data_restored, ft.step) == (0, True, False, False, 0)
    assert load_checkpoint(tmp_path / "empty", fresh) is None


def test_no_save_optim_needs_no_load_optim(tmp_path):
    save_checkpoint(tmp_path, 2, _trained(), save_optim=False)
    fresh = Trainer(TrainLM(tiny_config()), TrainerConfig(global_batch_size=4))
    with pytest.raises(CheckpointError, match="--no-load-optim"):
        load_checkpoint(tmp_path, fresh)
    assert load_checkpoint(tmp_path, fresh, no_load_optim=True).iteration == 2


def test_interrupted_save_leaves_previous_checkpoint_and_latest(tmp_path, monkeypatch):
    trainer = _trained()
    save_checkpoint(tmp_path, 1, trainer)

    def crash(obj):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "capture_rng", lambda platform=None: crash(None))
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, trainer)
    assert latest_iteration(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iter_0000001", "latest_checkpointed_iteration.txt"]


def test_ckpt_step_and_corrupt_latest(tmp_path):
    trainer = _trained()
    save_checkpoint(tmp_path, 1, trainer)
    save_checkpoint(tmp_path, 3, trainer)
    fresh = Trainer(TrainLM(tiny_config()), TrainerConfig(global_batch_size=4))
    assert load_checkpoint(tmp_path, fresh, ckpt_step=1).iteration == 1
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        load_checkpoint(tmp_path, fresh, ckpt_step=2)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("three")
    with pytest.raises(CheckpointError, match="not an iteration number"):
        load_checkpoint(tmp_path, fresh)
