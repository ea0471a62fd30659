"""Shared-prompt forward: the response log-prob logits of a micro-batch whose rows repeat prompts.

GRPO samples every prompt `n` times, so a micro-batch holds groups of trajectories with the SAME
prompt ids. A plain forward runs every prompt token once per trajectory; this one runs each distinct
prompt once (U rows, left-padded), keeps its keys/values, hands each trajectory its prompt's cache
(`DynamicCache.batch_select_indices`, differentiable: gradients of all n trajectories flow back into
the one prompt forward), and runs only the response tokens on top of it. Same maths as the plain
forward, fewer FLOPs: on the GRPO bench (38 prompt + ~31 response tokens, n = 8) about half the
tokens of the step's reference and policy forwards/backwards are prompt tokens computed 8 times.

Logit row j of the result predicts response token j: row 0 comes from the prompt's last position,
rows 1.. from the response tokens 0..R-2 (the last response token is never fed: nothing predicts
from it).

  prompt_sorted_chunks(prompts, lengths, k)  -> micro-batches of k rows that keep a prompt's rows together
  group_prompts(prompt_ids)                  -> (distinct prompts, row -> distinct index) or None
  pack_shared(prompts, responses, ...)       -> SharedInput (tensors of both forwards)
  shared_response_logits(model, inp, call)   -> logits (b, R_mb, V)

The caller (trainer.workers.actor) takes this path only where it is exact in law and cheaper: some
prompt repeats in the micro-batch, the weights are plain tensors (under FSDP2 a second root forward
per micro-batch would all-gather every parameter again) and gradient checkpointing is off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch


def group_prompts(prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[int]] | None:
    """Distinct prompts (first-seen order) and each row's index into them; None when none repeats."""
    seen: dict[tuple[int, ...], int] = {}
    index: list[int] = []
    for p in prompt_ids:
        index.append(seen.setdefault(tuple(p), len(seen)))
    if len(seen) == len(prompt_ids):
        return None
    return [list(p) for p in seen], index


def prompt_sorted_chunks(prompts: list[list[int]], lengths: list[int], chunk_size: int) -> list[list[int]]:
    """Indices sorted by (prompt length, prompt, total length), cut into chunks of `chunk_size`.

    The micro-batching used with shared prompts: a prompt's samples stay adjacent (so a chunk holds
    whole groups where the sizes allow, and computes few distinct prompts), prompts of similar length
    share a chunk (little prompt padding), and rows are stable-sorted by length inside a group.
    """
    order = sorted(range(len(lengths)), key=lambda i: (len(prompts[i]), prompts[i], lengths[i]))
    return [order[i:i + chunk_size] for i in range(0, len(order), chunk_size)]


@dataclass
class SharedInput:
    prompt_ids: torch.Tensor  # (U, P) long, left-padded distinct prompts
    prompt_mask: torch.Tensor  # (U, P) long
    prompt_pos: torch.Tensor  # (U, P) long, 0 at each prompt's first real token
    select: torch.Tensor  # (b,) long, row -> distinct prompt
    feed_ids: torch.Tensor  # (b, R_mb - 1) long, response tokens 0..R_mb-2 (pad where absent)
    full_mask: torch.Tensor  # (b, P + R_mb - 1) long, prompt mask of the row's prompt, then response mask
    feed_pos: torch.Tensor  # (b, R_mb - 1) long, positions continuing each row's prompt
    responses: torch.Tensor  # (b, R_mb) long, the labels (pad where absent)
    response_width: int  # R_mb


def pack_shared(prompts: list[list[int]], index: list[int], responses: list[list[int]], *, pad_id: int,
                device: torch.device | str = "cpu") -> SharedInput:
    """Tensors of the shared-prompt forward: distinct prompts left-padded, responses right-padded."""
    u, b = len(prompts), len(responses)
    p_max = max(len(p) for p in prompts)
    r_max = max(max((len(r) for r in responses), default=0), 1)
    pids = torch.full((u, p_max), pad_id, dtype=torch.long)
    pmask = torch.zeros((u, p_max), dtype=torch.long)
    for i, p in enumerate(prompts):
        pids[i, p_max - len(p):] = torch.as_tensor(p, dtype=torch.long)
        pmask[i, p_max - len(p):] = 1
    labels = torch.full((b, r_max), pad_id, dtype=torch.long)
    rmask = torch.zeros((b, r_max), dtype=torch.long)
    for i, r in enumerate(responses):
        if r:
            labels[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
            rmask[i, : len(r)] = 1
    select = torch.as_tensor(index, dtype=torch.long)
    plen = pmask.sum(-1)[select]  # (b,) real prompt length of each row
    feed_pos = plen.unsqueeze(-1) + torch.arange(r_max - 1, dtype=torch.long).unsqueeze(0)
    full_mask = torch.cat([pmask[select], rmask[:, : r_max - 1]], dim=-1)
    return SharedInput(prompt_ids=pids.to(device), prompt_mask=pmask.to(device),
                       prompt_pos=(pmask.cumsum(-1) - 1).clamp(min=0).to(device), select=select.to(device),
                       feed_ids=labels[:, : r_max - 1].to(device), full_mask=full_mask.to(device),
                       feed_pos=feed_pos.to(device), responses=labels.to(device), response_width=r_max)


def shared_response_logits(model: Any, inp: SharedInput, call: Callable[..., Any] | None = None) -> torch.Tensor:
    """Logits (b, R_mb, V) predicting each response token, from one forward per distinct prompt.

    `call` runs the module's forward (the module itself, or a compiled `model.forward`).
    """
    from transformers import DynamicCache

    call = call or model
    cache = DynamicCache(config=getattr(model, "config", None))
    first = call(input_ids=inp.prompt_ids, attention_mask=inp.prompt_mask, position_ids=inp.prompt_pos,
                 cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1:, :]  # (U, 1, V)
    first = first.index_select(0, inp.select)  # (b, 1, V)
    if inp.response_width == 1:
        return first
    cache.batch_select_indices(inp.select)
    rest = call(input_ids=inp.feed_ids, attention_mask=inp.full_mask, position_ids=inp.feed_pos,
                cache=cache, use_cache=True).logits  # (b, R_mb - 1, V)
    return torch.cat([first, rest], dim=1)
