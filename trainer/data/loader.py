"""The prompt loader: seeded per-epoch shuffling, fixed-size batches, a resumable position.

`PromptLoader.next_batch()` returns `(epoch, [PromptItem])` with a fresh uid per prompt (GRPO groups
samples by uid, so it is new at every draw) and the row's stable identity beside it: its split
("train") and dataset row `index`; with `trainer.types.prompt_hash` of its prompt ids that is what a
sample event reports to follow one prompt across training. Its state `{epoch, position, seed, size}` goes into every checkpoint.

Epoch boundaries (the verl pitfall, verl #7401): the loader never stores an "exhausted" state. A state
saved after the last batch of an epoch has `position == batches_per_epoch`; the next call rolls over to
epoch+1, position 0, so a resumed run trains on instead of silently doing zero steps.
"""
from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from trainer.data.dataset import PromptDataset
from trainer.types import PromptItem


class PromptLoader:
    """Batches of `batch_size` prompts (drop_last), reshuffled each epoch with `seed + epoch`."""

    def __init__(self, dataset: PromptDataset, *, batch_size: int, shuffle: bool = True, seed: int = 1,
                 batch_key: str = "data.train_batch_size"):
        """`batch_key`: the config key that set `batch_size` (named when the dataset is too small)."""
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if len(dataset) < batch_size:
            raise ValueError(f"the dataset has {len(dataset)} usable prompts, fewer than one batch of "
                             f"{batch_size} ({batch_key})")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.epoch = 0
        self.position = 0  # batches already taken in `self.epoch`

    @property
    def batches_per_epoch(self) -> int:
        return len(self.dataset) // self.batch_size

    def _order(self, epoch: int) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng(self.seed + epoch).permutation(n)

    def next_batch(self) -> tuple[int, list[PromptItem]]:
        """The next batch and the epoch it belongs to (rolls over at the end of an epoch)."""
        if self.position >= self.batches_per_epoch:
            self.epoch += 1
            self.position = 0
        order = self._order(self.epoch)
        start = self.position * self.batch_size
        picked = order[start:start + self.batch_size]
        self.position += 1
        items = []
        for i in picked:
            r = self.dataset.records[int(i)]
            items.append(PromptItem(uid=uuid.uuid4().hex, index=r.index, messages=r.messages,
                                    prompt_ids=list(r.prompt_ids), data_source=r.data_source,
                                    ground_truth=r.ground_truth, tools=r.tools, tools_kwargs=r.tools_kwargs,
                                    extra_info=r.extra_info, split="train"))
        return self.epoch, items

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed,
                "size": len(self.dataset), "batch_size": self.batch_size, "shuffle": self.shuffle}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state.get("size", len(self.dataset))) != len(self.dataset):
            raise ValueError(f"checkpointed loader saw {state['size']} prompts, this dataset has "
                             f"{len(self.dataset)}: the data changed since the checkpoint")
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self.seed = int(state.get("seed", self.seed))


def all_items(dataset: PromptDataset, *, split: str = "val") -> list[PromptItem]:
    """Every record as a PromptItem (validation: the whole set, in order, fresh uids; `split` says which
    data the rows are from)."""
    return [PromptItem(uid=uuid.uuid4().hex, index=r.index, messages=r.messages, prompt_ids=list(r.prompt_ids),
                       data_source=r.data_source, ground_truth=r.ground_truth, tools=r.tools,
                       tools_kwargs=r.tools_kwargs, extra_info=r.extra_info, split=split)
            for r in dataset.records]


def chunks(items: list[PromptItem], size: int | None) -> list[list[PromptItem]]:
    """`items` in consecutive batches of `size` (data.val_batch_size; None: one batch of all)."""
    if not items:
        return []
    step = size or len(items)
    return [items[i:i + step] for i in range(0, len(items), step)]
