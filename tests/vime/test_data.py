"""Synthetic prompts, rule reward, shuffled data source with a resumable cursor."""

from __future__ import annotations

import pytest
import torch

from vime.data import RolloutDataSource, SyntheticPrompts, rule_reward


def test_prompts_are_deterministic_and_labelled():
    a, b = SyntheticPrompts(10, 6, 256, seed=3), SyntheticPrompts(10, 6, 256, seed=3)
    assert a.prompts == b.prompts
    assert a[5].label == a[5].tokens[-1] % 4 and len(a[5].tokens) == 6
    assert SyntheticPrompts(10, 6, 256, seed=4)[0].tokens != a[0].tokens


def test_rule_reward_hand_example():
    tokens = torch.tensor([[4, 8, 5, 0], [1, 5, 9, 2]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    labels = torch.tensor([0, 1])
    # row 0: 4, 8 match residue 0 of 3 unmasked tokens (0 is masked); row 1: 1, 5, 9 match of 4
    assert rule_reward(tokens, mask, labels).tolist() == pytest.approx([2 / 3, 0.75])


def test_shuffle_by_seed_and_epoch_and_wraparound():
    ds = SyntheticPrompts(5, 2, 256)
    src = RolloutDataSource(ds, rollout_seed=1, shuffle=True)
    epoch0 = [p.index for p in src.get_prompts(5, n_samples_per_prompt=2)]
    epoch1 = [p.index for p in src.get_prompts(5, n_samples_per_prompt=2)]
    assert sorted(epoch0) == sorted(epoch1) == list(range(5))
    assert epoch0 != epoch1  # reshuffled per epoch
    state = src.state_dict()
    assert (state["epoch_id"], state["sample_offset"], state["sample_group_index"], state["sample_index"]) == (1, 5, 10, 20)
    assert [p.index for p in RolloutDataSource(ds, rollout_seed=1).get_prompts(5)] == epoch0
    assert [p.index for p in RolloutDataSource(ds, shuffle=False).get_prompts(3)] == [0, 1, 2]


def test_cursor_save_load_continues_the_same_sequence(tmp_path):
    ds = SyntheticPrompts(7, 2, 256)
    a = RolloutDataSource(ds, rollout_seed=9)
    a.get_prompts(4)
    path = a.state_path(tmp_path, 3)
    path.parent.mkdir(parents=True)
    path.write_bytes(a.state_bytes())
    b = RolloutDataSource(ds, rollout_seed=9)
    assert b.load(tmp_path, 3) and not b.load(tmp_path, 4)
    assert [p.index for p in a.get_prompts(9)] == [p.index for p in b.get_prompts(9)]
