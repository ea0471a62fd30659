"""Validation metrics as verl names and computes them (its `process_validation_metrics` and the
metric sections of `RayPPOTrainer._validate`), as pure functions.

Every validation sample carries variables: `reward` (its sequence reward) and the numbers of its
reward function's dict (`reward_extra`: `acc`, `score` parts, ...; a string `pred` is the answer that
majority votes count). Per data source, per prompt (a group: its val_kwargs.n samples) and per numeric
variable:
  mean@N, std@N        over the prompt's N samples (std only when N > 1; numpy's population std)
  best@k/mean, best@k/std, worst@k/mean, worst@k/std
                       the max (min) of k samples drawn with replacement, its mean and std over
                       N_BOOTSTRAP draws, for k = 2, 4, 8, ... below N and k = N (only when N > 1)
  maj@k/mean, maj@k/std
                       with `pred`: the variable's value of the first sample of the most-voted `pred`
                       in each draw (ties: the answer seen first in the draw)
each then averaged over the data source's prompts. Section: `val-core` for the core variable (`acc`
when the reward function gives it, else `reward`) and its mean / maj / best figures at the largest N;
`val-aux` for everything else. Keys: `<section>/<data source>/<variable>/<figure>`.

The draws use their own `numpy.random.RandomState(seed)` (the training's RNG streams are untouched),
all draws of one figure at once; verl seeds the global RNG and draws one subset at a time, so the
bootstrap figures agree with verl's within their own noise, not to the digit.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

N_BOOTSTRAP = 1000
SEED = 42
VOTE_KEY = "pred"


def subset_sizes(n: int) -> list[int]:
    """The k of best@k / worst@k / maj@k for N samples: 2, 4, 8, ... below N, then N (none for N <= 1)."""
    if n <= 1:
        return []
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return [*sizes, n]


@lru_cache(maxsize=256)
def _draws(n: int, k: int, seed: int) -> np.ndarray:
    """N_BOOTSTRAP draws of k sample indices out of n (the same for every prompt and variable)."""
    idx = np.random.RandomState(seed).choice(n, size=(N_BOOTSTRAP, k), replace=True)
    idx.setflags(write=False)
    return idx


def majority_index(votes: Sequence[Any]) -> int:
    """The position of the first sample whose vote is the most common (ties: the vote seen first)."""
    counts = Counter(votes)
    top = max(counts.values())
    return next(i for i, v in enumerate(votes) if counts[v] == top)


def majority_value(values: Sequence[float], votes: Sequence[Any]) -> float:
    """The value of the first sample whose vote is the most common (ties: the vote seen first)."""
    return float(values[majority_index(votes)])


def vote_winners(votes: Sequence[Any], *, seed: int = SEED) -> dict[int, np.ndarray]:
    """Per k of maj@k, per draw, the sample whose value the draw's majority vote takes: it depends on
    the votes alone, so one prompt's variables share it."""
    out = {}
    for k in subset_sizes(len(votes)):
        idx = _draws(len(votes), k, seed)
        out[k] = np.array([row[majority_index([votes[i] for i in row])] for row in idx])
    return out


def group_figures(values: Sequence[float], votes: Sequence[Any] | None = None, *, seed: int = SEED,
                  winners: dict[int, np.ndarray] | None = None) -> dict[str, float]:
    """The figures of one prompt's N samples of one variable (`votes`: their `pred`, for maj@k;
    `winners`: `vote_winners(votes)`, when already worked out for the prompt)."""
    arr = np.asarray(values, dtype=np.float64)
    n = len(arr)
    out = {f"mean@{n}": float(arr.mean())}
    if n <= 1:
        return out
    out[f"std@{n}"] = float(arr.std())
    if votes is not None and winners is None:
        winners = vote_winners(votes, seed=seed)
    for k in subset_sizes(n):
        idx = _draws(n, k, seed)
        best, worst = arr[idx].max(axis=1), arr[idx].min(axis=1)
        out[f"best@{k}/mean"], out[f"best@{k}/std"] = float(best.mean()), float(best.std())
        out[f"worst@{k}/mean"], out[f"worst@{k}/std"] = float(worst.mean()), float(worst.std())
        if winners is not None:
            maj = arr[winners[k]]
            out[f"maj@{k}/mean"], out[f"maj@{k}/std"] = float(maj.mean()), float(maj.std())
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not (isinstance(v, float) and not math.isfinite(v))


def sample_variables(reward: float, reward_extra: Mapping[str, Any]) -> dict[str, Any]:
    """A sample's variables: `reward`, then its reward function's numbers (bools as 0 / 1) and `pred`."""
    out: dict[str, Any] = {"reward": float(reward)}
    for key, value in reward_extra.items():
        if key == VOTE_KEY and isinstance(value, (str, int, float)):
            out[key] = value if isinstance(value, str) else float(value)
        elif key != "reward" and _is_number(value):
            out[key] = float(value)
    return out


def validation_metrics(sources: Sequence[str], uids: Sequence[str],
                       variables: Sequence[Mapping[str, Any]], *, seed: int = SEED) -> dict[str, float]:
    """verl's val-core / val-aux metrics of one validation: sample i is from data source `sources[i]`,
    prompt `uids[i]`, with `variables[i]` (`sample_variables`). A variable counts for a prompt when
    every one of its samples has it as a number."""
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for src, uid, var in zip(sources, uids, variables, strict=True):
        groups[src][uid].append(var)
    metrics: dict[str, float] = {}
    for src, prompts in groups.items():
        per_var: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        n_max: dict[str, int] = defaultdict(int)  # per variable, its largest group
        for samples in prompts.values():
            votes = [s.get(VOTE_KEY) for s in samples]
            votes = votes if all(v is not None for v in votes) else None
            winners = vote_winners(votes, seed=seed) if votes is not None else None
            names = {k for s in samples for k in s if k != VOTE_KEY}
            for name in sorted(names):
                values = [s.get(name) for s in samples]
                if all(isinstance(v, float) for v in values):
                    n_max[name] = max(n_max[name], len(values))
                    for fig, value in group_figures(values, votes, seed=seed, winners=winners).items():
                        per_var[name][fig].append(value)
        core = "acc" if "acc" in per_var else "reward"
        for name, figures in per_var.items():
            for fig, values in figures.items():
                is_core = (name == core and fig.startswith(("mean", "maj", "best"))
                           and f"@{n_max[name]}" in fig)
                metrics[f"{'val-core' if is_core else 'val-aux'}/{src}/{name}/{fig}"] = float(np.mean(values))
    return metrics
