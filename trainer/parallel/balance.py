"""Splitting a batch across data-parallel ranks: equal row counts, balanced token counts.

verl's balance_batch idea: every rank gets the same number of trajectories (FSDP needs the same
number of forward/backward calls everywhere) and about the same number of tokens (the slowest rank
sets the step time). Greedy LPT with a capacity: rows by length, longest first, each to the least
loaded rank that still has room. Pure functions on lists of ints.
"""
from __future__ import annotations


def contiguous_chunks(count: int, parts: int) -> list[list[int]]:
    """[0..count) cut into `parts` contiguous runs whose sizes differ by at most one (earlier runs larger)."""
    if parts <= 0:
        raise ValueError(f"parts must be >= 1, got {parts}")
    base, extra = divmod(count, parts)
    out, start = [], 0
    for r in range(parts):
        size = base + (1 if r < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def balanced_partition(lengths: list[int], parts: int) -> list[list[int]]:
    """Indices of `lengths` in `parts` groups of equal size with near-equal sums.

    len(lengths) must be divisible by `parts`. Each group's indices are returned in ascending order
    (so a rank's rows keep the batch order: GRPO groups stay adjacent where they were).
    """
    n = len(lengths)
    if parts <= 0 or n % parts:
        raise ValueError(f"{n} rows cannot be split into {parts} equal parts")
    cap = n // parts
    loads = [0] * parts
    groups: list[list[int]] = [[] for _ in range(parts)]
    for i in sorted(range(n), key=lambda j: (-lengths[j], j)):
        r = min((r for r in range(parts) if len(groups[r]) < cap), key=lambda r: (loads[r], r))
        groups[r].append(i)
        loads[r] += lengths[i]
    return [sorted(g) for g in groups]


def imbalance(lengths: list[int], groups: list[list[int]]) -> dict[str, float]:
    """verl's global_seqlen/* metrics of a step whose rows (token counts `lengths`) were split into
    `groups`, one per data-parallel rank (verl's `_balance_batch`, every step with trainer.balance_batch,
    whatever the number of ranks, one included):

    - min, max, minmax_diff: the per-rank token sums had the batch been cut in batch order (what the
      ranks would get without balancing: `contiguous_chunks`);
    - balanced_min, balanced_max: the per-rank sums of `groups`, the split the step used;
    - mean: the step's tokens per rank.

    With one rank every figure but minmax_diff (0) is the step's token count.
    """
    if not groups or not lengths:
        return {}
    before = [sum(lengths[i] for i in chunk) for chunk in contiguous_chunks(len(lengths), len(groups))]
    after = [sum(lengths[i] for i in g) for g in groups]
    return {"global_seqlen/min": float(min(before)), "global_seqlen/max": float(max(before)),
            "global_seqlen/minmax_diff": float(max(before) - min(before)),
            "global_seqlen/balanced_min": float(min(after)), "global_seqlen/balanced_max": float(max(after)),
            "global_seqlen/mean": float(sum(lengths) / len(groups))}
