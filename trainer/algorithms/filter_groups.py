"""DAPO's dynamic sampling (verl's `algorithm.filter_groups`): which groups carry a learning signal,
and the bookkeeping of a step that generates until it has enough of them. Pure Python, no torch.

A group is the rollout.n samples of one prompt (one uid). When the chosen metric is the same for every
sample of a group, GRPO's advantages are all zero there: the group teaches nothing and only dilutes
the batch. `kept_group_uids` keeps a group whose values are not all equal, and a group of one (as
verl). verl tests `np.std(values) > 0`; we compare the values themselves, because the float std of
identical values is not always 0 (`np.std([0.1] * 3)` is 1.4e-17, so verl keeps that flat group).

`GroupPool` collects one step's generation batches: `add` files each group as kept or dropped,
`full` says when `target` groups (data.train_batch_size) are kept, `limit_reached` when
`max_num_gen_batches` batches were generated (0 or less: no limit), and `batch` returns the rows to
train on: the first `target` kept groups, topped up (only at the limit) with dropped groups in the
order they were generated. verl raises at the limit; topping up keeps the step's batch at its full
size, so the mini-batch layout and the split over workers are those of every other step, and the
step is the plain GRPO step with every informative group that was found: the added groups are ones
GRPO would have trained on, with zero advantage when the metric is the reward itself (seq_reward),
and only the overlong penalty's spread when it is acc or score (docs/design.md §4.5).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Sequence, TypeVar

FILTER_METRICS = ("acc", "score", "seq_reward", "seq_final_reward")

T = TypeVar("T")


def metric_values(metric: str, trajectories: Sequence[Any]) -> list[float]:
    """Each trajectory's value of a filter metric (scored Trajectories: `score`, `reward`, `reward_extra`).

    acc: the reward function's `acc` field when it returns one (verl's math scorers do), else its
    score; score: the reward function's score; seq_reward: the score after overlong shaping (the sum
    of the token-level scores); seq_final_reward: the same, since KL in the reward cannot be combined
    with the filter here (the config check refuses it).
    """
    if metric not in FILTER_METRICS:
        raise ValueError(f"unknown filter_groups.metric {metric!r}; known: {', '.join(FILTER_METRICS)}")
    if metric == "acc":
        return [float(tr.reward_extra.get("acc", tr.score)) for tr in trajectories]
    if metric == "score":
        return [float(tr.score) for tr in trajectories]
    return [float(tr.reward) for tr in trajectories]


def group_rows(uids: Sequence[str]) -> dict[str, list[int]]:
    """Row indices per uid, uids in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    return groups


def kept_group_uids(uids: Sequence[str], values: Sequence[float]) -> list[str]:
    """The uids (first-seen order) whose group has a signal: values not all equal, or one sample."""
    if len(uids) != len(values):
        raise ValueError(f"{len(uids)} uids for {len(values)} values")
    kept = []
    for uid, rows in group_rows(uids).items():
        vals = [values[i] for i in rows]
        if len(vals) == 1 or max(vals) > min(vals):
            kept.append(uid)
    return kept


@dataclass
class GroupPool(Generic[T]):
    """One step's groups so far: kept (metric varies) and dropped, and the batches generated."""

    target: int  # groups a step trains on (data.train_batch_size)
    kept: list[list[T]] = field(default_factory=list)
    dropped: list[list[T]] = field(default_factory=list)
    num_gen_batches: int = 0
    num_groups: int = 0
    num_filled: int = 0  # dropped groups added by `batch` to reach `target`

    def add(self, rows: Sequence[T], uids: Sequence[str], values: Sequence[float]) -> None:
        """File one generation batch (rows with their group uids and metric values)."""
        keep = set(kept_group_uids(uids, values))
        self.num_gen_batches += 1
        for uid, idx in group_rows(uids).items():
            (self.kept if uid in keep else self.dropped).append([rows[i] for i in idx])
            self.num_groups += 1

    @property
    def full(self) -> bool:
        return len(self.kept) >= self.target

    def limit_reached(self, max_num_gen_batches: int) -> bool:
        return 0 < max_num_gen_batches <= self.num_gen_batches

    def batch(self) -> list[T]:
        """The rows to train on: `target` groups, kept ones first, dropped ones only to fill up."""
        groups = self.kept[: self.target]
        self.num_filled = max(0, min(self.target - len(groups), len(self.dropped)))
        groups = groups + self.dropped[: self.num_filled]
        return [row for g in groups for row in g]

    def metrics(self) -> dict[str, float]:
        """verl's train/num_gen_batches, and how many groups were generated, kept and filled in."""
        return {"train/num_gen_batches": float(self.num_gen_batches),
                "train/num_groups_generated": float(self.num_groups),
                "train/num_groups_kept": float(len(self.kept)),
                "train/kept_group_ratio": len(self.kept) / max(1, self.num_groups),
                "train/num_groups_filled": float(self.num_filled)}
