"""The `hf` rollout backend: our own batched sampling loop over a transformers causal LM.

Why not `model.generate`: we need per-request stop ids, budgets, seeds and sampling settings in one
batch, the log-prob of every sampled token, and rows that finish leaving the batch (the KV cache is
compacted with `Cache.batch_select_indices`) so a long tail does not pay for the whole batch.

How a batch runs: distinct prompts are left-padded (attention mask 0 on pads, position ids =
cumsum(mask)-1) and prefilled once each through the module, logits for the last position only
(`logits_to_keep=1`); rows sharing a prompt (GRPO's n samples) get copies of its KV cache; then one
decode step per new token. For Qwen2/Llama-style modules the decode step is
`trainer.rollout.fast_decode` (the same maths on the live weights with a KV cache preallocated for
the whole generation: bit-identical logits here, far less per-step overhead); other models, or
FSDP-sharded ones, run the module with a growing `DynamicCache` (`decode_steps.ModuleStep`). On a CUDA device the
fast step runs at fixed shapes and is captured as one CUDA graph per batch size (`StaticDecode`;
`cuda_graphs=False`, i.e. rollout.enforce_eager, runs the same static step eagerly); on the CPU it
runs the sliced step, which does the least work.
No host sync per token: the sampled tokens and log-probs stay on the device in (rows, budget)
buffers, each row's end (a stop id of its own, or its budget) is a device-side mask, and the host reads
that mask once every `sync_every` steps (16 on a GPU; on the CPU every step, where a read costs
nothing). Rows that ended in between decode on and their extra tokens are cut off; on a GPU they leave
the batch once an eighth of it has ended (a compaction copies the KV cache and needs a new graph).
The sampler gets the batch's settings from the host (`mixed`, `cand`, `may_widen`), so it never asks
the device either, except for a row filtered by top-p with no top-k (see `sample_next`).
bench/host_reads.py counts these reads; tests/trainer/rollout/test_decode_host_reads.py holds them to
one per interval.
Sampling per row: temperature, top-k, top-p, then an inverse-CDF draw with that row's own pre-drawn
uniforms (a `torch.Generator` seeded by the request's seed), so a seeded request reproduces exactly
(alone or batched, up to float reduction order in batched kernels); temperature <= 0 is greedy argmax.

Log-probs returned: log_softmax(logits / T) at the sampled token, i.e. of the tempered distribution
BEFORE top-k / top-p truncation (T = 1 for greedy rows). verl recomputes old log-probs with the actor
anyway; these are for diagnostics (`training/rollout_probs_diff_*`).

Colocation: with `share_module=True` (what `build_engine` does) the engine holds the actor's live
module, so `update_weights` finds each tensor already in place and copies nothing; it only copies
(name by name, into the existing parameters) when given tensors that are not the module's own.
`release_memory` frees cached allocator blocks (no KV cache outlives a `generate` call); with an owned
module on CUDA it also moves the weights to the CPU until `resume_memory`. `flush_cache` has nothing to
drop: this backend keeps no prefix cache between calls.
"""
from __future__ import annotations

import gc
from typing import Any, Iterable

import torch

from trainer.rollout.decode_steps import ModuleStep, SlicedFast, cache_kwarg, full_mask
from trainer.rollout.fast_decode import DecodeState, FastDecoder, StaticDecode
from trainer.rollout.fast_decode import supports as fast_supports
from trainer.rollout.base import (
    GenerationOutput,
    GenerationRequest,
    RolloutEngine,
    register_engine,
)


def _resolve_device(device: Any, model: torch.nn.Module) -> torch.device:
    if device is None or device == "auto":
        try:
            return next(model.parameters()).device
        except StopIteration:
            return torch.device("cpu")
    return torch.device(device)


_BLOCK = 1024  # vocabulary block of the two-level inverse CDF (`_inverse_cdf`)
_ONE_LEVEL_MAX = 8 * _BLOCK  # up to this vocabulary size one full cumsum is cheaper than two levels


def _inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse-CDF draw over token ids in order: per row, the first token whose running sum of
    `weights` (b, V), >= 0, exceeds u * total (u = `uniforms` (b,) in [0, 1)). Returns (tokens (b,),
    total (b,) float64). Never a zero-weight token.

    Small vocabularies take one cumsum (float64) and `searchsorted(..., right=True)`. Large ones skip
    the sequential cumsum over the whole vocabulary (at V = 151,936 and batch 64 it cost as much as
    the softmax): block sums (one vectorised pass), a cumsum over the V / 1024 block sums, then a
    cumsum inside the chosen block only (a target that rounding puts past the block's last positive
    token takes that token). Same draw as the full cumsum, up to float rounding.
    """
    b, vocab = weights.shape
    u = uniforms.double().unsqueeze(-1)
    if vocab <= _ONE_LEVEL_MAX:
        cdf = weights.double().cumsum(-1)
        total = cdf[:, -1:]
        return torch.searchsorted(cdf, u * total, right=True).clamp_(max=vocab - 1).squeeze(-1), total.squeeze(-1)
    blk = _BLOCK
    full = (vocab // blk) * blk
    sums = weights[:, :full].unflatten(-1, (full // blk, blk)).sum(-1)
    if full < vocab:
        sums = torch.cat([sums, weights[:, full:].sum(-1, keepdim=True)], dim=-1)
    cum = sums.double().cumsum(-1)  # (b, blocks)
    total = cum[:, -1:]
    tgt = u * total
    j = torch.searchsorted(cum, tgt, right=True).clamp_(max=cum.shape[-1] - 1)  # (b, 1) block index
    before = torch.where(j > 0, cum.gather(-1, (j - 1).clamp(min=0)), torch.zeros_like(tgt))
    offs = torch.arange(blk, device=weights.device)
    cols = j * blk + offs  # (b, blk) token ids of the chosen block
    local = weights.gather(-1, cols.clamp(max=vocab - 1)).masked_fill_(cols >= vocab, 0.0)
    k = torch.searchsorted(local.double().cumsum(-1) + before, tgt, right=True)
    last = torch.where(local > 0, offs, -1).amax(-1, keepdim=True)  # the block has one (its sum > 0)
    return (j * blk + torch.minimum(k, last)).squeeze(-1), total.squeeze(-1)


def _argmax_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max (b, 1), first index of the max (b, 1)) per row of x (b, V), as `x.max(-1, keepdim=True)`.

    For a large vocabulary `max` with indices is a scalar loop (about 1 ns an element); the maxima of
    1024-token blocks are one vectorised pass, then only the first block holding the row's max is
    searched. Same result, ties included (first occurrence).
    """
    vocab = x.shape[-1]
    if vocab <= _ONE_LEVEL_MAX:
        return x.max(dim=-1, keepdim=True)
    blk = _BLOCK
    full = (vocab // blk) * blk
    maxes = x[:, :full].unflatten(-1, (full // blk, blk)).amax(-1)
    if full < vocab:
        maxes = torch.cat([maxes, x[:, full:].amax(-1, keepdim=True)], dim=-1)
    top, j = maxes.max(dim=-1, keepdim=True)  # the first block holding the max
    cols = (j * blk + torch.arange(blk, device=x.device)).clamp_(max=vocab - 1)  # a tail block repeats V-1
    return top, j * blk + x.gather(-1, cols).argmax(dim=-1, keepdim=True)


def sample_next(
    logits: torch.Tensor,
    temperature: torch.Tensor | None,
    greedy: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    uniforms: torch.Tensor,
    *,
    any_sampled: bool,
    any_filter: bool,
    all_greedy: bool | None = None,
    inplace: bool = False,
    mixed: bool | None = None,
    cand: int | None = None,
    may_widen: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row.

    logits (b, V) float32; temperature (b,) > 0 (1 for greedy rows), or None when every row uses 1;
    greedy (b,) bool; top_k (b,) long (>= V = no filtering); top_p (b,) float; uniforms (b,) in [0, 1).
    Returns (tokens (b,) long, logprobs (b,) float32 of log_softmax(logits / temperature)).
    inplace=True lets it overwrite `logits` (the engine's own, dead after this call), so the paths
    without top-k / top-p allocate no (b, V) tensor at all. Every full-vocabulary pass costs b*V
    elements a step (at batch 64 and Qwen's 151,936 tokens a fresh (b, V) float32 tensor is 39 MB of
    page faults), so each path does as few as it can, on exp(scaled - max) without normalising:
    greedy = block maxima (`_argmax_rows`), exp and a sum for its log-prob; sampling = max, exp and the
    two-level inverse CDF (`_inverse_cdf`); top-k / top-p = max, exp, sum and a top-k slice of the
    weights (a full sort only when the kept set may extend beyond it), only the slice normalised.

    Host syncs: none when the caller says what it knows of the batch: `mixed` (greedy and sampled
    rows together; None = ask the device), `cand` (the top-k slice: the largest top-k >= 64; None =
    ask), `may_widen` (False when no row can keep more than `cand` tokens, e.g. every sampled row has
    a top-k; True = look at the probabilities, one read of the device, for a row filtered by top-p only).
    """
    if all_greedy is None:
        all_greedy = not any_sampled
    if temperature is None:
        scaled = logits
    elif inplace:
        scaled = logits.div_(temperature.unsqueeze(-1))
    else:
        scaled = logits / temperature.unsqueeze(-1)
    own = inplace or scaled is not logits  # `scaled` may be overwritten
    if all_greedy:
        top, tokens = _argmax_rows(scaled)
        total = (scaled.sub_(top) if own else scaled - top).exp_().sum(-1).double()
        return tokens.squeeze(-1), (-total.log()).float()  # log_softmax at the max
    top = scaled.amax(dim=-1, keepdim=True)
    weights = (scaled.sub_(top) if own else scaled - top).exp_()  # exp(scaled - max) = softmax * total
    vocab = weights.shape[-1]
    if not any_filter:
        tokens, total = _inverse_cdf(weights, uniforms)
    else:
        total = weights.sum(-1).double()
        # Most of the time the kept set lies inside the top few dozen tokens: take a top-k slice and
        # fall back to a full sort only for a batch where some row may keep more (exact either way).
        # Sorted on the unnormalised weights; only the slice is divided by the total.
        k_rows = top_k.clamp(max=vocab)
        if cand is None:
            cand = max(64, int(k_rows[k_rows < vocab].max()) if bool((k_rows < vocab).any()) else 64)
        cand = min(vocab, cand)
        norm = total.float().unsqueeze(-1)
        sorted_w, order = torch.topk(weights, cand, dim=-1)
        sorted_probs = sorted_w / norm
        if cand < vocab and may_widen and bool(((k_rows > cand) & (sorted_probs.sum(-1) < top_p)).any()):
            sorted_w, order = torch.sort(weights, dim=-1, descending=True)
            sorted_probs = sorted_w / norm
        ranks = torch.arange(sorted_probs.shape[-1], device=scaled.device).unsqueeze(0)
        remove = ranks >= top_k.unsqueeze(-1)
        # Drop a token once the mass strictly before it already reaches top_p (the first always stays).
        remove |= (sorted_probs.cumsum(-1) - sorted_probs) >= top_p.unsqueeze(-1)
        cdf = sorted_probs.masked_fill(remove, 0.0).cumsum(-1)
        # side="right": the first index whose cdf exceeds u*total, never a zero-probability token.
        idx = torch.searchsorted(cdf, (uniforms * cdf[:, -1]).unsqueeze(-1), right=True)
        tokens = order.gather(-1, idx.clamp_(max=cdf.shape[-1] - 1)).squeeze(-1)
    if bool(greedy.any()) if mixed is None else mixed:  # mixed batch: greedy rows take the argmax
        tokens = torch.where(greedy, _argmax_rows(weights)[1].squeeze(-1), tokens)
    picked = weights.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).double()
    return tokens, (picked.log() - total.log()).float()


@register_engine("hf")
class HFRolloutEngine(RolloutEngine):
    """Batched KV-cache generation over a transformers causal LM (see the module docstring)."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        pad_token_id: int,
        device: Any = None,
        share_module: bool = True,
        max_batch_size: int | None = None,
        fast_decode: bool = True,
        cuda_graphs: bool = True,
        static_decode: bool | None = None,
        sync_every: int | None = None,
    ) -> None:
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.device = _resolve_device(device, model)
        self.share_module = share_module  # True: the actor's module itself (colocated, no copies)
        self.max_batch_size = max_batch_size  # None: every request of a call in one batch
        self.fast_decode = fast_decode  # use trainer.rollout.fast_decode where the model supports it
        # The fast step at fixed shapes (StaticDecode), captured as CUDA graphs on a GPU: None = on CUDA
        # only (on the CPU the sliced step does less work); True forces it anywhere (tests).
        self.static_decode = static_decode
        self.cuda_graphs = cuda_graphs  # off: the static step runs eagerly (rollout.enforce_eager)
        # Decode steps between two reads of the rows' end mask: None = 16 on a GPU, 1 on the CPU (where
        # reading a tensor is no sync and a finished row's extra steps are pure compute).
        self.sync_every = sync_every
        self._offloaded = False
        self.last_stats: dict[str, float] = {}

    @classmethod
    def from_config(cls, *, model: Any, tokenizer: Any, config: Any, device: Any) -> "HFRolloutEngine":
        if not isinstance(model, torch.nn.Module):
            raise TypeError("the hf rollout engine needs the live torch module as `model`")
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        if pad is None:
            raise ValueError("tokenizer has neither pad_token_id nor eos_token_id")
        return cls(model, pad_token_id=pad, device=device, share_module=True,
                   cuda_graphs=not bool(getattr(config, "enforce_eager", False)))

    # ------------------------------------------------------------------ generation
    def generate(self, requests: list[GenerationRequest]) -> list[GenerationOutput]:
        if self._offloaded:
            raise RuntimeError("hf engine memory is released: call resume_memory() before generate()")
        if not requests:
            return []
        size = self.max_batch_size or len(requests)
        was_training = self.model.training
        self.model.eval()  # no dropout while sampling; the actor's mode is restored below
        try:
            outputs: list[GenerationOutput] = []
            # no_grad, not inference_mode: the module is the actor's, and a buffer a model caches
            # lazily during this forward (e.g. dynamic RoPE) must stay usable by autograd later.
            with torch.no_grad():
                for start in range(0, len(requests), size):
                    outputs.extend(self._generate_batch(requests[start:start + size]))
            return outputs
        finally:
            self.model.train(was_training)

    def _generate_batch(self, reqs: list[GenerationRequest]) -> list[GenerationOutput]:
        from transformers import DynamicCache

        dev = self.device
        n = len(reqs)
        for r in reqs:
            if not r.prompt_ids:
                raise ValueError(f"request {r.request_id!r} has an empty prompt")
        budgets = [max(0, int(r.sampling.max_new_tokens)) for r in reqs]
        out_ids: list[list[int]] = [[] for _ in reqs]
        out_lp: list[list[float]] = [[] for _ in reqs]
        finish: list[str] = ["length"] * n
        live = [i for i in range(n) if budgets[i] > 0]
        if not live:
            return [GenerationOutput(r.request_id, [], [], "length") for r in reqs]

        sub = [reqs[i] for i in live]
        # GRPO sends n copies of each prompt: prefill every distinct prompt once, then give each
        # row a copy of its prompt's KV cache (index_select along the batch dimension).
        unique: dict[tuple[int, ...], int] = {}
        expand = [unique.setdefault(tuple(r.prompt_ids), len(unique)) for r in sub]
        prompts = list(unique)
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p):] = 1
        has_pad = bool((mask == 0).any())
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.cumsum(-1) - 1).clamp_(min=0)

        vocab_cap = 1 << 30
        temps = torch.tensor([r.sampling.temperature if r.sampling.temperature > 0 else 1.0 for r in sub],
                             dtype=torch.float32, device=dev)
        greedy = torch.tensor([r.sampling.temperature <= 0 for r in sub], dtype=torch.bool, device=dev)
        top_k = torch.tensor([r.sampling.top_k if r.sampling.top_k > 0 else vocab_cap for r in sub],
                             dtype=torch.long, device=dev)
        top_p = torch.tensor([min(max(float(r.sampling.top_p), 0.0), 1.0) for r in sub],
                             dtype=torch.float32, device=dev)
        any_sampled = any(r.sampling.temperature > 0 for r in sub)
        any_filter = any((r.sampling.top_k > 0 or r.sampling.top_p < 1.0) and r.sampling.temperature > 0
                         for r in sub)
        unit_temp = all(r.sampling.temperature <= 0 or r.sampling.temperature == 1.0 for r in sub)
        max_budget = max(budgets[i] for i in live)
        uniforms = torch.zeros((len(sub), max_budget), dtype=torch.float32)
        if any_sampled:
            for row, r in enumerate(sub):
                gen = None
                if r.sampling.seed is not None:
                    gen = torch.Generator().manual_seed(int(r.sampling.seed) & 0xFFFF_FFFF_FFFF_FFFF)
                uniforms[row, : budgets[live[row]]] = torch.rand(budgets[live[row]], generator=gen)
        uniforms = uniforms.to(dev)
        stop_sets = [set() if r.sampling.ignore_eos else set(r.sampling.stop_token_ids) for r in sub]
        # Per-row settings fixed for the batch, known here so that no step has to ask the device:
        # whether greedy and sampled rows mix, and the top-k slice the filtered path sorts.
        mixed = any_sampled and any(r.sampling.temperature <= 0 for r in sub)
        cand = max([64, *(r.sampling.top_k for r in sub if r.sampling.top_k > 0)])
        # A full sort may be needed only for a sampled row with no top-k (its kept set, by top-p alone,
        # can reach past the top-`cand` slice); greedy rows take the argmax whatever the sort.
        may_widen = any(r.sampling.temperature > 0 and r.sampling.top_k <= 0 for r in sub)

        cache = DynamicCache(config=getattr(self.model, "config", None))
        logits = self.model(input_ids=ids, attention_mask=mask if has_pad else None, position_ids=pos,
                            use_cache=True, logits_to_keep=1, **{cache_kwarg(self.model): cache}).logits[:, -1, :]
        if len(prompts) < len(sub):
            sel = torch.tensor(expand, dtype=torch.long, device=dev)
            cache.batch_select_indices(sel)
            logits, mask, pos = logits[sel], mask[sel], pos[sel]
        stepper = self._stepper(cache, mask if has_pad else None, pos[:, -1] + 1, width, max_budget)
        del cache

        # The batch's tokens and log-probs stay on the device, in (rows, max_budget) buffers; each row's
        # end (a stop id from its own table, or its budget) is a device-side mask. The host reads that
        # mask every `sync_every` steps only (rows that ended meanwhile decode on, their extra tokens
        # cut off at their end), and only then do ended rows leave the batch (`compact`).
        nb = len(sub)
        tok_buf = torch.zeros((nb, max_budget), dtype=torch.long, device=dev)
        lp_buf = torch.zeros((nb, max_budget), dtype=torch.float32, device=dev)
        stop_tab = torch.full((nb, max(1, max(len(x) for x in stop_sets))), -1, dtype=torch.long)
        for row, x in enumerate(stop_sets):
            stop_tab[row, : len(x)] = torch.tensor(sorted(x), dtype=torch.long)
        stop_tab = stop_tab.to(dev)
        budget_t = torch.tensor([budgets[i] for i in live], dtype=torch.long, device=dev)
        ended = torch.zeros(nb, dtype=torch.bool, device=dev)
        n_out = torch.zeros(nb, dtype=torch.long, device=dev)  # tokens kept per row (set when it ends)
        stopped = torch.zeros(nb, dtype=torch.bool, device=dev)
        batch_rows = torch.arange(nb, device=dev)  # batch row -> index into `sub`
        host_rows = list(range(nb))
        final_n = [0] * nb
        final_stop = [False] * nb
        sync_every = max(1, int(self.sync_every or (1 if dev.type == "cpu" else 16)))
        step = decode_rows = syncs = 0
        while True:
            tok, lp = sample_next(logits.float(), None if unit_temp else temps, greedy, top_k, top_p,
                                  uniforms[:, step], any_sampled=any_sampled, any_filter=any_filter,
                                  all_greedy=not any_sampled, inplace=True, mixed=mixed, cand=cand,
                                  may_widen=may_widen)
            tok_buf[batch_rows, step] = tok
            lp_buf[batch_rows, step] = lp
            step += 1
            hit = (tok.unsqueeze(-1) == stop_tab).any(-1)
            now = ~ended & (hit | (budget_t <= step))
            n_out = torch.where(now, step, n_out)
            stopped |= now & hit
            ended |= now
            if step >= max_budget or step % sync_every == 0:  # step >= max_budget: every row has ended
                syncs += 1
                ended_h, n_h, s_h = torch.stack((ended.long(), n_out, stopped.long())).tolist()  # one read
                keep = [b for b, e in enumerate(ended_h) if not e]
                if not keep or self._compact(len(ended_h) - len(keep), len(ended_h), dev):
                    for b, e in enumerate(ended_h):
                        if e:
                            final_n[host_rows[b]], final_stop[host_rows[b]] = n_h[b], bool(s_h[b])
                    if not keep:
                        break
                    sel = torch.tensor(keep, dtype=torch.long, device=dev)
                    stepper.select(sel)
                    host_rows = [host_rows[b] for b in keep]
                    tok, batch_rows, budget_t, stop_tab = tok[sel], batch_rows[sel], budget_t[sel], stop_tab[sel]
                    ended, n_out, stopped = ended[sel], n_out[sel], stopped[sel]
                    temps, greedy, top_k, top_p, uniforms = temps[sel], greedy[sel], top_k[sel], top_p[sel], uniforms[sel]
            decode_rows += len(host_rows)
            logits = stepper.step(tok)
        toks, lps = tok_buf.tolist(), lp_buf.tolist()
        for row, i in enumerate(live):
            k = final_n[row]
            out_ids[i], out_lp[i] = toks[row][:k], lps[row][:k]
            finish[i] = "stop" if final_stop[row] else "length"
        self.last_stats = {"decode_steps": float(step), "decode_row_steps": float(decode_rows),
                           "batch_size": float(nb), "prefill_rows": float(len(prompts)),
                           "fast_decode": float(stepper.kind != "module"), "host_syncs": float(syncs),
                           "cuda_graphs": float(getattr(stepper, "captures", 0))}
        del stepper
        return [GenerationOutput(r.request_id, out_ids[i], out_lp[i], finish[i]) for i, r in enumerate(reqs)]

    def _compact(self, n_ended: int, n_rows: int, dev: torch.device) -> bool:
        """Whether rows that ended leave the batch now. On the CPU at once (every row-step is compute);
        on a GPU once an eighth of the batch has ended: a compaction copies the whole KV cache and, with
        CUDA graphs, captures a new graph, while a finished row decoding on costs little there."""
        if n_ended == 0:
            return False
        return dev.type == "cpu" or 8 * n_ended >= n_rows

    def _stepper(self, cache: Any, prompt_mask: torch.Tensor | None, next_pos: torch.Tensor, width: int,
                 max_budget: int) -> Any:
        """The decode step for this batch: the fast step (static shapes + CUDA graphs on CUDA unless
        `cuda_graphs` is off; the sliced step otherwise), or the module with a growing cache."""
        if self.fast_decode and fast_supports(self.model):
            fast = FastDecoder(self.model)
            static = self.static_decode if self.static_decode is not None else self.device.type == "cuda"
            if static:
                state = DecodeState.from_hf_cache(cache, max_budget, zeros=True)
                return StaticDecode(fast, state, next_pos, prompt_mask, graphs=self.cuda_graphs)
            return SlicedFast(fast, DecodeState.from_hf_cache(cache, max_budget), next_pos,
                               full_mask(prompt_mask, max_budget))
        return ModuleStep(self.model, cache, next_pos, full_mask(prompt_mask, max_budget), width)

    # ------------------------------------------------------------------ weights and memory
    def update_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy tensors into the module's parameters/buffers by HF name.

        Tensors that ARE the module's own storage (the colocated case) are skipped: nothing to copy.
        Unknown names or shape mismatches raise (a silent partial sync would train on stale weights).
        """
        # state_dict names include tied aliases (e.g. lm_head.weight tied to the embedding).
        targets = self.model.state_dict(keep_vars=True)
        copied = skipped = 0
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in targets:
                    raise KeyError(f"update_weights: {name!r} is not a parameter of the rollout module")
                dst = targets[name]
                if tuple(dst.shape) != tuple(tensor.shape):
                    raise ValueError(f"update_weights: {name!r} shape {tuple(tensor.shape)} != {tuple(dst.shape)}")
                if dst.data_ptr() == tensor.data_ptr() and dst.device == tensor.device:
                    skipped += 1
                    continue
                dst.copy_(tensor.to(device=dst.device, dtype=dst.dtype))
                copied += 1
        self.last_stats = {"weights_copied": float(copied), "weights_shared": float(skipped)}

    def release_memory(self) -> None:
        if not self.share_module and self.device.type == "cuda" and not self._offloaded:
            self.model.to("cpu")
            self._offloaded = True
        # The KV cache lives only inside generate(), so on the CPU there is nothing to free here; a
        # gc.collect() cost 0.4-1.0 s a step (bench/grpo_vs_trl.py) for no memory back. On a GPU,
        # collect first so that empty_cache() can return the cache blocks to the device.
        if self.device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()

    def resume_memory(self) -> None:
        if self._offloaded:
            self.model.to(self.device)
            self._offloaded = False

    def flush_cache(self) -> None:
        """Nothing to flush: no KV or prefix cache survives a generate() call in this backend."""

