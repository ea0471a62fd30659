"""The decode steps the `hf` engine runs besides `fast_decode.StaticDecode`: one interface, `step(tokens)
-> logits (B, V)` and `select(rows)` (batch compaction), `kind` naming it in the engine's stats.

- `SlicedFast`: `FastDecoder.step` at the Python position (attention over the positions written so
  far only): the CPU's choice, the least work per step.
- `ModuleStep`: the module's own forward with a growing `DynamicCache`, for models fast_decode does
  not cover (or FSDP-sharded ones).
"""
from __future__ import annotations

from typing import Any

import torch

from trainer.rollout.fast_decode import DecodeState, FastDecoder


def full_mask(prompt_mask: torch.Tensor | None, extra: int) -> torch.Tensor | None:
    """The attention mask for the whole generation, preallocated: the prompts' (B, W), then ones."""
    if prompt_mask is None:
        return None
    b, width = prompt_mask.shape
    full = torch.ones((b, width + extra), dtype=torch.long, device=prompt_mask.device)
    full[:, :width] = prompt_mask
    return full


def cache_kwarg(model: Any) -> str:
    """The name transformers' forward takes the KV cache under (`cache` from 5.2x, before it
    `past_key_values`), so the engine runs on either."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin forward
        return "cache"
    return "cache" if "cache" in params else "past_key_values"


class SlicedFast:
    """The fast step at the Python position: attention over the positions written so far only."""

    kind = "fast"

    def __init__(self, fast: FastDecoder, state: DecodeState, next_pos: torch.Tensor,
                 mask: torch.Tensor | None) -> None:
        self.fast, self.state, self.pos, self.mask = fast, state, next_pos, mask

    def step(self, tok: torch.Tensor) -> torch.Tensor:
        logits = self.fast.step(self.state, tok, self.pos, self.mask)
        self.pos = self.pos + 1
        return logits

    def select(self, rows: torch.Tensor) -> None:
        self.state.select(rows)
        self.pos = self.pos[rows]
        if self.mask is not None:
            self.mask = self.mask[rows]
            width = self.state.length
            if not bool((self.mask[:, :width] == 0).any()):  # no padded row left: plain attention
                self.mask = None


class ModuleStep:
    """The module's own forward with a growing `DynamicCache` (models fast_decode does not cover)."""

    kind = "module"

    def __init__(self, model: Any, cache: Any, next_pos: torch.Tensor, mask: torch.Tensor | None, width: int) -> None:
        self.model, self.cache, self.pos, self.mask, self.cur = model, cache, next_pos, mask, width
        self.kw = cache_kwarg(model)

    def step(self, tok: torch.Tensor) -> torch.Tensor:
        self.cur += 1
        out = self.model(input_ids=tok.unsqueeze(-1), position_ids=self.pos.unsqueeze(-1), use_cache=True,
                         attention_mask=self.mask[:, : self.cur] if self.mask is not None else None,
                         **{self.kw: self.cache})
        self.pos = self.pos + 1
        return out.logits[:, -1, :]

    def select(self, rows: torch.Tensor) -> None:
        self.cache.batch_select_indices(rows)
        self.pos = self.pos[rows]
        if self.mask is not None:
            self.mask = self.mask[rows]
