"""The reward-model worker: a sequence-classification checkpoint scoring whole trajectories.

`RewardModelWorker(path, device=..., micro_batch=..., max_length=...)` loads
`AutoModelForSequenceClassification` (one label) with ITS OWN tokenizer and chat template, and
`score(conversations)` returns one float per conversation.

Each conversation is the trajectory's messages (system, user, the assistant turns with their tool
calls, the tool replies) rendered again with the reward model's chat template and tokenized with its
tokenizer: the policy's token ids are never fed to it. verl does the same when the two tokenizers
differ (it decodes the response and re-applies the reward model's template); here the transcript's
messages are kept as text, so nothing is decoded, and tool turns are rendered as the reward model's
template renders tool messages. A conversation longer than `max_length` keeps its end (the score is
read there); verl cuts the end instead.

The score is the head's output at the last attention-valid token, as verl's reward worker reads it
(verl loads the checkpoint as token classification and indexes the last valid position); here a
forward hook on the model's `score` head (the transformers sequence-classification models of the
Llama / Qwen / Mistral families) gives the per-token outputs; a model without such a head falls back
to transformers' own pooled logits. Micro-batches are formed by length (less padding); results come
back in the input order. Inference only: no gradients, eval mode.
"""
from __future__ import annotations

from typing import Any

import torch

from trainer.chat.transcript import render_transcript as render


class RewardModelWorker:
    """A loaded reward model and its tokenizer on one device."""

    def __init__(self, path: str, *, device: torch.device, dtype: torch.dtype = torch.float32,
                 micro_batch: int = 8, max_length: int | None = None, trust_remote_code: bool = False):
        from transformers import AutoModelForSequenceClassification

        from trainer.models.hf_folder import load_tokenizer

        self.device = device
        self.tokenizer = load_tokenizer(path, trust_remote_code=trust_remote_code)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"the reward model's tokenizer at {path} has no chat template")
        self.model = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=dtype, trust_remote_code=trust_remote_code).to(device).eval()
        if int(self.model.config.num_labels) != 1:
            raise ValueError(f"the reward model at {path} has num_labels={self.model.config.num_labels}; a "
                             "reward model gives one score (num_labels=1)")
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        self.pad_id = int(pad)
        if self.model.config.pad_token_id is None:  # transformers' pooling refuses batches without one
            self.model.config.pad_token_id = self.pad_id
        limit = getattr(self.model.config, "max_position_embeddings", None)
        self.max_length = int(max_length or limit or 4096)
        self.micro_batch = max(1, int(micro_batch))
        self._head = getattr(self.model, "score", None)
        for p in self.model.parameters():
            p.requires_grad_(False)

    def encode(self, messages: list[dict[str, Any]]) -> list[int]:
        """The reward model's token ids of one conversation, at most max_length (the end kept)."""
        ids = self.tokenizer.encode(render(self.tokenizer, messages), add_special_tokens=False)
        return ids[-self.max_length:]

    @torch.no_grad()
    def score_ids(self, seqs: list[list[int]]) -> list[float]:
        """Scores of token-id sequences, in their order (micro-batches of similar lengths)."""
        out = [0.0] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        for start in range(0, len(order), self.micro_batch):
            idx = order[start:start + self.micro_batch]
            width = max(1, max(len(seqs[i]) for i in idx))
            ids = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for r, i in enumerate(idx):  # right padding: the last valid token is at length - 1
                ids[r, : len(seqs[i])] = torch.as_tensor(seqs[i], dtype=torch.long)
                mask[r, : len(seqs[i])] = 1
            for i, v in zip(idx, self.forward_scores(ids.to(self.device), mask.to(self.device))):
                out[i] = float(v)
        return out

    def forward_scores(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(b,) scores of one right-padded micro-batch (b, T) (differentiable: the demo trains with it)."""
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        captured: list[torch.Tensor] = []
        handle = self._head.register_forward_hook(lambda _m, _i, o: captured.append(o)) if self._head else None
        try:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
        finally:
            if handle is not None:
                handle.remove()
        last = mask.sum(-1) - 1  # (b,)
        if captured and captured[0].dim() == 3:  # (b, T, 1): the head on every token
            per_token = captured[0][..., 0].float()
            return per_token[torch.arange(ids.shape[0], device=ids.device), last].cpu()
        return out.logits.float().reshape(ids.shape[0], -1)[:, 0].cpu()

    def score(self, conversations: list[list[dict[str, Any]]]) -> list[float]:
        """One score per conversation (lists of chat messages), in their order."""
        return self.score_ids([self.encode(m) for m in conversations])
