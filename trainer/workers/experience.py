"""The batch the workers compute on: trajectories as token lists plus (B, R) per-token tensors.

`ExperienceBatch` is what the driver hands an actor/reference worker (and, later, what a Ray worker
group splits across ranks: every field is a list or a tensor with dim 0 = B, so `select(idx)` is the
whole split/gather story). `R` is the longest response in the batch; per-token tensors are right-padded
to it with zeros.

`pack_micro_batch` builds the model input for a micro-batch with padding kept local to it: prompts
left-padded to the micro-batch's longest prompt, responses right-padded to its longest response, so the
response window is one column slice and only `R_mb + 1` logit rows are materialised
(`logits_to_keep`). Together with length-sorted micro-batches (`length_sorted_chunks`) this is our
padding policy on every device: padding never costs more than the spread of lengths inside one
micro-batch. Rows repeating a prompt go through trainer.workers.prefix instead, which runs each
distinct prompt once. (Full packing into one row would need a varlen attention kernel to pay off; with SDPA a
packed row's block mask costs O(total_tokens^2).)
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import torch


@dataclass
class ExperienceBatch:
    """B trajectories. Per-token tensors are (B, R) float32 unless noted; None when not computed yet."""

    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    loss_mask: torch.Tensor  # (B, R) 1 on engine-generated tokens (multi-turn: tool/template tokens 0)
    response_mask: torch.Tensor  # (B, R) 1 on every real response token (lengths)
    uids: list[str] = field(default_factory=list)
    old_log_probs: torch.Tensor | None = None
    ref_log_probs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    token_level_scores: torch.Tensor | None = None
    token_level_rewards: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    values: torch.Tensor | None = None  # (B, R) the critic's V_t before the update (gae only)
    # Rollout correction (algorithm.rollout_correction): the engine's log-probs of the sampled tokens (0
    # where the loss mask is 0) and the importance weights pi_old / pi_rollout the policy loss multiplies.
    rollout_log_probs: torch.Tensor | None = None
    rollout_is_weights: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.response_ids)

    @property
    def response_width(self) -> int:
        return int(self.loss_mask.shape[1])

    def lengths(self) -> list[int]:
        """Total tokens (prompt + response) per trajectory."""
        return [len(p) + len(r) for p, r in zip(self.prompt_ids, self.response_ids)]

    def select(self, idx: list[int]) -> "ExperienceBatch":
        """Rows `idx` (any order) as a new batch; tensors keep the full width R."""
        t = torch.as_tensor(idx, dtype=torch.long)
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                out[f.name] = None
            elif isinstance(v, torch.Tensor):
                out[f.name] = v.index_select(0, t)
            elif isinstance(v, list) and len(v) == len(self):
                out[f.name] = [v[i] for i in idx]
            else:
                out[f.name] = v
        return ExperienceBatch(**out)


def make_batch(prompt_ids: list[list[int]], response_ids: list[list[int]], loss_masks: list[list[int]],
               uids: list[str] | None = None) -> ExperienceBatch:
    """Right-pad per-token lists into (B, R) masks. Empty responses get an all-zero row."""
    if not (len(prompt_ids) == len(response_ids) == len(loss_masks)):
        raise ValueError("prompt_ids, response_ids and loss_masks must have the same length")
    width = max((len(r) for r in response_ids), default=0)
    width = max(width, 1)
    loss = torch.zeros(len(response_ids), width, dtype=torch.float32)
    resp = torch.zeros(len(response_ids), width, dtype=torch.float32)
    for i, (r, m) in enumerate(zip(response_ids, loss_masks)):
        if len(m) != len(r):
            raise ValueError(f"trajectory {i}: loss_mask has {len(m)} entries for {len(r)} response tokens")
        if r:
            resp[i, : len(r)] = 1.0
            loss[i, : len(m)] = torch.as_tensor(m, dtype=torch.float32)
    return ExperienceBatch(prompt_ids=[list(p) for p in prompt_ids], response_ids=[list(r) for r in response_ids],
                           loss_mask=loss, response_mask=resp, uids=list(uids or []))


@dataclass
class MicroInput:
    input_ids: torch.Tensor  # (b, P_mb + R_mb) long
    attention_mask: torch.Tensor  # (b, P_mb + R_mb) long
    position_ids: torch.Tensor  # (b, P_mb + R_mb) long, 0 at each row's first real token
    responses: torch.Tensor  # (b, R_mb) long, the labels of the response window (pad where absent)
    response_width: int  # R_mb


def pack_micro_batch(prompt_ids: list[list[int]], response_ids: list[list[int]], *, pad_id: int,
                     device: torch.device | str = "cpu") -> MicroInput:
    """Left-pad prompts and right-pad responses to this micro-batch's own maxima."""
    b = len(prompt_ids)
    p_max = max(len(p) for p in prompt_ids)
    r_max = max(max((len(r) for r in response_ids), default=0), 1)
    ids = torch.full((b, p_max + r_max), pad_id, dtype=torch.long)
    mask = torch.zeros((b, p_max + r_max), dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[i, p_max - len(p): p_max] = torch.as_tensor(p, dtype=torch.long)
        mask[i, p_max - len(p): p_max] = 1
        if r:
            ids[i, p_max: p_max + len(r)] = torch.as_tensor(r, dtype=torch.long)
            mask[i, p_max: p_max + len(r)] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return MicroInput(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                      responses=ids[:, p_max:].to(device), response_width=r_max)


def length_sorted_chunks(lengths: list[int], chunk_size: int | None) -> list[list[int]]:
    """Indices sorted by length (stable), cut into chunks of `chunk_size` (None: one chunk)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    if not chunk_size or chunk_size >= len(order):
        return [order] if order else []
    return [order[i:i + chunk_size] for i in range(0, len(order), chunk_size)]


def token_budget_chunks(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Dynamic batch size: length-sorted micro-batches whose padded size (b * max_len) fits `max_tokens`.

    A single trajectory longer than the budget gets a micro-batch of its own (never dropped).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    chunks: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        # Sorted ascending, so lengths[i] is the new max of `cur + [i]`.
        if cur and (len(cur) + 1) * lengths[i] > max_tokens:
            chunks.append(cur)
            cur = []
        cur.append(i)
    if cur:
        chunks.append(cur)
    return chunks
