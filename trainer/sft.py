"""Supervised warm start on chat conversations, loss on assistant tokens only.

Run: ``python -m trainer sft --model DIR --data sft.jsonl --out DIR [--steps 300 --batch-size 64
--lr 2e-3 --seed 0 --max-seconds S --threads 1 --chat-template-kwargs '{"enable_thinking": false}']``

Data: JSONL rows ``{"messages": [...], "tools": [schemas]?}`` (what ``make-demo-data`` writes).
A conversation is tokenized the way a multi-turn rollout builds a trajectory (trainer.chat.deltas):
the prompt up to the first assistant turn with the generation prompt, then each assistant turn as
the chat template renders it after a fixed base conversation, then the messages up to the next
assistant turn with the next generation prompt, each piece tokenized on its own. The loss mask is 1
on each assistant turn up to and including the token that closes it (its content, its tool calls,
``<|im_end|>`` / ``<|eot_id|>``) and 0 elsewhere (system, user, tool replies, role headers, the
template's newline after the turn): the same tokens a rollout marks as generated. No template needs
to render a conversation's prefixes as prefixes of the whole: Qwen3's does not (each assistant turn
here keeps its own ``<think>`` block, empty when it has no reasoning, as the rollout's turns do).

Batches group conversations of similar length (sorted within shuffled windows) so padding stays
small. AdamW, linear warmup then cosine decay to 0 over the run (over ``--steps``, or over
``--max-seconds`` of wall time when that bound comes first: then the schedule follows elapsed time
and the run is no longer bit-for-bit repeatable). Deterministic for a seed when bounded by steps.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

IGNORE = -100


@dataclass
class Example:
    """One tokenized conversation."""

    input_ids: list[int]
    loss_mask: list[int]  # 1 where the token is trained on (assistant tokens)


@dataclass
class SFTResult:
    """What a warm start did (for logs, tests and benchmarks)."""

    steps: int
    losses: list[float] = field(default_factory=list)  # mean assistant-token loss per step
    seconds: float = 0.0
    tokens: int = 0  # tokens processed, padding included
    target_tokens: int = 0  # assistant tokens trained on


def chat_deltas(tokenizer, template_kwargs: dict[str, Any] | None = None):
    """The tokenizer's ChatDeltas, with its family's turn-closing tokens (trainer.chat) and extra
    template variables (e.g. ``{"enable_thinking": False}``)."""
    from trainer.chat.deltas import ChatDeltas
    from trainer.chat.families import closing_token_ids, detect_family

    return ChatDeltas(tokenizer, closing_ids=closing_token_ids(tokenizer, detect_family(tokenizer)),
                      template_kwargs=template_kwargs)


def build_example(tokenizer, messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]] | None = None, *, deltas=None) -> Example:
    """Tokenize a conversation and mark its assistant tokens (see the module docstring).
    ``deltas``: a ``chat_deltas(tokenizer)`` to reuse across conversations."""
    ids, mask = (deltas or chat_deltas(tokenizer)).conversation(messages, tools=tools)
    return Example(input_ids=ids, loss_mask=mask)


def load_conversations(path: str | Path) -> list[dict[str, Any]]:
    """Read JSONL rows with ``messages`` (and optional ``tools``)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                row = json.loads(line)
                if "messages" not in row:
                    raise ValueError(f"{path}:{n}: row has no 'messages'")
                rows.append(row)
    return rows


def length_grouped_batches(lengths: list[int], batch_size: int, rng: random.Random,
                           window: int = 50) -> list[list[int]]:
    """One epoch of index batches: shuffle, sort by length within windows of ``window`` batches,
    cut into batches, shuffle the batch order (so padding stays small without a fixed order)."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    span = batch_size * window
    batches = []
    for w in range(0, len(order), span):
        chunk = sorted(order[w: w + span], key=lambda i: lengths[i])
        batches += [chunk[i: i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(examples: list[Example], pad_id: int):
    """Right-pad to the longest; labels are the next token where the mask is 1, else IGNORE.

    Returns (input_ids (B, T), attention_mask (B, T), labels (B, T)) with labels already shifted:
    ``labels[:, t]`` is the target for the logits at position t.
    """
    import torch

    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    att = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for r, e in enumerate(examples):
        n = len(e.input_ids)
        ids[r, :n] = torch.tensor(e.input_ids)
        att[r, :n] = 1
        tgt = torch.tensor(e.input_ids[1:])
        m = torch.tensor(e.loss_mask[1:], dtype=torch.bool)
        labels[r, : n - 1] = torch.where(m, tgt, torch.full_like(tgt, IGNORE))
    return ids, att, labels


def common_prefix_length(examples: list[Example]) -> int:
    """Longest shared token prefix of the batch that is all mask-0 and leaves >= 1 token each."""
    first = examples[0]
    limit = min(len(e.input_ids) for e in examples) - 1
    n = 0
    while (n < limit and first.loss_mask[n] == 0
           and all(e.input_ids[n] == first.input_ids[n] for e in examples)):
        n += 1
    # Token n is predicted from the prefix's last position; that target would be lost, so keep a
    # trained first tail token out of the prefix's reach.
    if n > 0 and any(e.loss_mask[n] for e in examples):
        n -= 1
    return n


def batch_loss(model, examples: list[Example], pad_id: int, *, share_prefix: int = 16):
    """Mean next-token loss over the batch's assistant tokens; returns (loss, tokens computed).

    When the batch shares a mask-0 prefix of at least ``share_prefix`` tokens (the demo's system
    prompt and tool schemas), the prefix runs once at batch size 1 and its key/value cache is
    repeated for the batch: the same loss and gradients as the padded full forward (the prefix
    gradient is the sum over the batch), at a fraction of the cost. ``share_prefix=0`` disables it.
    """
    import torch

    p = common_prefix_length(examples) if share_prefix else 0
    if p < max(1, share_prefix):
        ids, att, labels = collate(examples, pad_id)
        logits = model(input_ids=ids, attention_mask=att).logits  # (B, T, V)
        computed = ids.numel()
    else:
        from transformers import DynamicCache

        prefix = torch.tensor([examples[0].input_ids[:p]])  # (1, P)
        cache = DynamicCache(config=model.config)
        model.model(input_ids=prefix, cache=cache, use_cache=True)
        cache.batch_repeat_interleave(len(examples))  # differentiable: grads sum into the prefix
        tails = [Example(e.input_ids[p:], e.loss_mask[p:]) for e in examples]
        ids, att, labels = collate(tails, pad_id)  # (B, S)
        full_att = torch.cat([torch.ones((len(examples), p), dtype=att.dtype), att], dim=1)
        pos = torch.arange(p, p + ids.shape[1]).unsqueeze(0).expand(len(examples), -1)
        logits = model(input_ids=ids, attention_mask=full_att, position_ids=pos,
                       cache=cache, use_cache=True).logits  # (B, S, V)
        # Tails start with a mask-0 token (common_prefix_length), so no target sits at the seam.
        computed = p + ids.numel()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             labels.reshape(-1), ignore_index=IGNORE)
    return loss, computed


def _length_proxy(row: dict[str, Any]) -> int:
    """Characters of content and tool calls: orders conversations like their token counts do."""
    n = 0
    for m in row["messages"]:
        n += 16 + len(m.get("content") or "")
        n += sum(len(json.dumps(c)) for c in m.get("tool_calls") or [])
    return n


def lr_factor(progress: float, warmup: float) -> float:
    """Linear warmup over the first ``warmup`` fraction, then cosine decay to 0 at progress 1."""
    if progress < warmup:
        return (progress + 1e-9) / warmup
    t = (progress - warmup) / max(1e-9, 1.0 - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))


def _first_eos(tokenizer) -> int:
    eos = tokenizer.eos_token_id
    return int(eos[0] if isinstance(eos, (list, tuple)) else eos)


def sft_train(*, model_dir: str | Path, rows: list[dict[str, Any]], out: str | Path | None,
              steps: int, batch_size: int = 64, lr: float = 2e-3, seed: int = 0,
              max_seconds: float | None = None, threads: int | None = 1, warmup: float = 0.05,
              weight_decay: float = 0.01, grad_clip: float = 1.0, log_every: int = 10,
              share_prefix: int = 16, schedule_by_time: bool = True, on_step=None,
              template_kwargs: dict[str, Any] | None = None, log=print) -> SFTResult:
    """Warm-start the model in ``model_dir`` on ``rows``; save model + tokenizer to ``out``.

    ``schedule_by_time=False`` makes ``max_seconds`` a plain safety stop: the learning-rate schedule
    then follows steps only, so a run that ends before the cap is repeatable bit for bit.
    ``on_step(done, steps)`` is called after each step (progress for a caller's status page).
    ``template_kwargs``: extra chat-template variables (verl's data.apply_chat_template_kwargs).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if steps < 1 or batch_size < 1:
        raise ValueError("steps and batch_size must be >= 1")
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    if not rows:
        raise ValueError("no conversations to train on")
    # Tokenize lazily (rendering the template is the slow part): batches are grouped by a cheap
    # length proxy, and only the conversations a run reaches are ever rendered.
    cache: dict[int, Example] = {}
    deltas = chat_deltas(tokenizer, template_kwargs)
    # Llama 3 has no pad token: padding is masked out of attention and labels, any id will do.
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else _first_eos(tokenizer)

    def example(i: int) -> Example:
        if i not in cache:
            cache[i] = build_example(tokenizer, rows[i]["messages"], rows[i].get("tools"), deltas=deltas)
        return cache[i]

    lengths = [_length_proxy(r) for r in rows]
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    result = SFTResult(steps=0)
    queue: list[list[int]] = []
    start = time.perf_counter()
    for step in range(steps):
        elapsed = time.perf_counter() - start
        progress = step / steps
        if max_seconds:
            if elapsed >= max_seconds:
                break
            if schedule_by_time:
                progress = max(progress, elapsed / max_seconds)
        for g in opt.param_groups:
            g["lr"] = lr * lr_factor(progress, warmup)
        if not queue:
            queue = length_grouped_batches(lengths, batch_size, rng)
        batch = [example(i) for i in queue.pop()]
        loss, computed = batch_loss(model, batch, pad_id, share_prefix=share_prefix)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        if torch.isfinite(gnorm):  # a non-finite gradient would poison the weights: skip it
            opt.step()
        result.steps = step + 1
        result.losses.append(loss.item())
        result.tokens += computed
        result.target_tokens += sum(sum(e.loss_mask[1:]) for e in batch)
        if on_step is not None:
            on_step(result.steps, steps)
        if log and (step % log_every == 0 or step == steps - 1):
            dt = time.perf_counter() - start
            log(f"step {step + 1}/{steps} loss {result.losses[-1]:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                f"{result.steps / dt:.2f} steps/s {result.tokens / dt:.0f} tok/s")
    result.seconds = time.perf_counter() - start
    if out is not None:
        model.eval()
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer sft",
                                 description="Supervised warm start (assistant-token loss).")
    ap.add_argument("--model", required=True, help="HF model folder to start from")
    ap.add_argument("--data", required=True, help="JSONL conversations ({'messages', 'tools'?})")
    ap.add_argument("--out", required=True, help="output folder (HF format)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: leave torch's)")
    ap.add_argument("--warmup", type=float, default=0.05, help="warmup fraction of the run")
    ap.add_argument("--share-prefix", type=int, default=16,
                    help="run a shared mask-0 prefix of at least this many tokens once (0: off)")
    ap.add_argument("--chat-template-kwargs", type=json.loads, default=None, metavar="JSON",
                    help='extra chat-template variables, e.g. \'{"enable_thinking": false}\'')
    args = ap.parse_args(argv)
    from trainer.chat.deltas import template_kwargs_errors

    if args.chat_template_kwargs is not None and template_kwargs_errors(args.chat_template_kwargs):
        ap.error("--chat-template-kwargs: " + "; ".join(template_kwargs_errors(args.chat_template_kwargs)))
    res = sft_train(model_dir=args.model, rows=load_conversations(args.data), out=args.out,
                    steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                    max_seconds=args.max_seconds, threads=args.threads or None, warmup=args.warmup,
                    share_prefix=args.share_prefix, template_kwargs=args.chat_template_kwargs)
    print(f"done: {res.steps} steps in {res.seconds:.1f}s ({res.steps / res.seconds:.2f} steps/s, "
          f"{res.tokens / res.seconds:.0f} tok/s), final loss {res.losses[-1]:.4f}; saved {args.out}")
    return 0
