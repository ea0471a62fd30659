"""Cutting a batch's rows into micro-batches (`micro_chunks`: by token budget, by shared prompt or by
sorted length), with the same number of micro-batches on every rank under FSDP (`equalize_chunks`)."""
from __future__ import annotations

from trainer.workers.collectives import all_reduce, dist_world
from trainer.workers.experience import ExperienceBatch, length_sorted_chunks, token_budget_chunks
from trainer.workers.prefix import prompt_sorted_chunks


def equalize_chunks(chunks: list[list[int]], target: int) -> list[list[int]]:
    """Split the largest chunks until there are `target` (>= len(chunks)) non-empty chunks."""
    out = [list(c) for c in chunks if c]
    while len(out) < target:
        big = max(range(len(out)), key=lambda i: len(out[i]))
        if len(out[big]) < 2:
            raise ValueError(f"cannot make {target} micro-batches from {sum(map(len, out))} rows")
        c = out.pop(big)
        out[big:big] = [c[: len(c) // 2], c[len(c) // 2:]]
    return out


def micro_chunks(batch: ExperienceBatch, idx: list[int], micro: int | None, *, share_prompts: bool,
                 token_budget: int | None = None) -> list[list[int]]:
    """Rows `idx` of `batch` cut into micro-batches (lists of row indices): by token budget when given,
    keeping a prompt's rows together when prompts are shared, else by sorted length; under FSDP every
    rank gets the same number of micro-batches (the same number of forwards)."""
    lengths = [len(batch.prompt_ids[i]) + len(batch.response_ids[i]) for i in idx]
    if token_budget is not None:
        local = token_budget_chunks(lengths, token_budget)
    elif share_prompts and micro and micro < len(idx):
        local = prompt_sorted_chunks([batch.prompt_ids[i] for i in idx], lengths, micro)
    else:
        local = length_sorted_chunks(lengths, micro)
    if dist_world() > 1:
        local = equalize_chunks(local, int(all_reduce([float(len(local))], "max")[0]))
    return [[idx[j] for j in chunk] for chunk in local]
