"""Deterministic synthetic prompts, a rule reward, and a data source with a resumable cursor.

* `SyntheticPrompts(num_prompts, prompt_len, vocab_size, seed)`: prompt i is fixed token ids drawn from
  a generator seeded by (seed, i); its label is the residue of its last token, `tokens[-1] % 4`, so
  the policy can read the task off the prompt.
* `rule_reward(response_tokens, loss_mask, label)`: fraction of response tokens t with t % 4 == label -
  a dense signal even for a random-init model (mean ~0.25 at the start).
* `RolloutDataSource`: hands out `rollout_batch_size` prompts per rollout, shuffled by
  (rollout_seed, epoch); cursor fields follow vime (`sample_offset`, `epoch_id`, `sample_group_index`,
  `sample_index`); `save(dir, rollout_id)` / `load(dir, rollout_id)` use
  `rollout/global_dataset_state_dict_<id>.pt` under the checkpoint dir.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path

import torch

REWARD_MODULUS = 4


@dataclass(frozen=True)
class Prompt:
    index: int  # position in the dataset
    tokens: tuple[int, ...]
    label: int


class SyntheticPrompts:
    def __init__(self, num_prompts: int = 64, prompt_len: int = 8, vocab_size: int = 256, seed: int = 0):
        if num_prompts < 1 or prompt_len < 1:
            raise ValueError("num_prompts and prompt_len must be >= 1")
        self.prompt_len = prompt_len
        self.prompts = []
        for i in range(num_prompts):
            gen = torch.Generator().manual_seed(seed * 1_000_003 + i)
            tokens = tuple(int(x) for x in torch.randint(0, vocab_size, (prompt_len,), generator=gen))
            self.prompts.append(Prompt(i, tokens, tokens[-1] % REWARD_MODULUS))

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i: int) -> Prompt:
        return self.prompts[i]


def rule_reward(response_tokens: torch.Tensor, loss_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B, R) tokens, (B, R) mask, (B,) labels -> (B,) rewards in [0, 1]."""
    hits = ((response_tokens % REWARD_MODULUS) == labels[:, None].to(response_tokens.device)).float() * loss_mask
    return hits.sum(-1) / loss_mask.sum(-1).clamp(min=1.0)


class RolloutDataSource:
    def __init__(self, dataset: SyntheticPrompts, rollout_seed: int = 42, shuffle: bool = True):
        self.dataset = dataset
        self.rollout_seed = rollout_seed
        self.shuffle = shuffle
        self.sample_offset = 0  # position within the current epoch's order
        self.epoch_id = 0
        self.sample_group_index = 0  # prompts handed out so far (all epochs)
        self.sample_index = 0  # samples handed out so far (prompts x n_samples)
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(f"{self.rollout_seed}:{epoch}").shuffle(order)
        return order

    def get_prompts(self, num_prompts: int, n_samples_per_prompt: int = 1) -> list[Prompt]:
        out = []
        for _ in range(num_prompts):
            if self.sample_offset >= len(self._order):
                self.epoch_id += 1
                self.sample_offset = 0
                self._order = self._epoch_order(self.epoch_id)
            out.append(self.dataset[self._order[self.sample_offset]])
            self.sample_offset += 1
            self.sample_group_index += 1
            self.sample_index += n_samples_per_prompt
        return out

    def state_dict(self) -> dict:
        return {
            "sample_offset": self.sample_offset,
            "epoch_id": self.epoch_id,
            "sample_group_index": self.sample_group_index,
            "sample_index": self.sample_index,
            "metadata": {"rollout_seed": self.rollout_seed, "num_prompts": len(self.dataset), "shuffle": self.shuffle},
        }

    def load_state_dict(self, state: dict) -> None:
        meta = state.get("metadata", {})
        if meta.get("num_prompts", len(self.dataset)) != len(self.dataset):
            raise ValueError(
                f"data cursor was saved for {meta['num_prompts']} prompts, this dataset has {len(self.dataset)}"
            )
        self.sample_offset = int(state["sample_offset"])
        self.epoch_id = int(state["epoch_id"])
        self.sample_group_index = int(state["sample_group_index"])
        self.sample_index = int(state["sample_index"])
        self._order = self._epoch_order(self.epoch_id)  # reshuffled by the saved epoch

    @staticmethod
    def state_path(save_dir: str | Path, rollout_id: int) -> Path:
        return Path(save_dir) / "rollout" / f"global_dataset_state_dict_{rollout_id}.pt"

    def state_bytes(self) -> bytes:
        buf = io.BytesIO()
        torch.save(self.state_dict(), buf)
        return buf.getvalue()

    def load(self, save_dir: str | Path, rollout_id: int) -> bool:
        """Restore the cursor saved after `rollout_id`; False (cursor untouched) when there is none."""
        path = self.state_path(save_dir, rollout_id)
        if not path.is_file():
            return False
        self.load_state_dict(torch.load(path, weights_only=True))
        return True
