"""Matmul FLOP counting for one GRPO step of a decoder-only LM, and the matmul roofline it is held to.

Used by bench/grpo_vs_trl.py (and any other bench that wants a compute floor). Two halves:

1. Counting (pure functions, no torch): `ModelShape` (trainer/flops.py, from an HF config) ->
   `step_work(...)` lists every matmul of a GRPO step as `Work(phase, op, shape, flops)`: the rollout
   (prefill with the logits of the last position only, then one KV-cached decode step per new token), the
   reference forward, the old-log-prob forward (when the trainer runs it) and the policy forward + backward
   (backward = 2x forward: grad of the input and grad of the weight). Only matmuls are counted (2*m*k*n
   each): the q/k/v/o and MLP projections, causal attention (QK^T and AV over the positions each token may
   see: token i of a fresh sequence sees i+1 positions, a decode token sees its whole cache) and the LM head
   (only at the positions whose logits are used). Norms, RoPE, softmax, sampling, the optimizer and the
   embedding lookup are not matmuls and are left out: the floor is a lower bound.
   With `shared_prompts=True` the prompt of each GROUP (trajectories with the same prompt, GRPO's n
   samples, consecutive) is counted once in the rollout prefill and in every scoring forward, the
   responses on top of its cache: the work of an engine and trainer that compute each distinct prompt
   once (RL Studio's hf engine prefill, trainer/workers/prefix.py); False counts every trajectory's
   prompt, as a plain trainer (TRL) computes it.

2. Roofline: `measure_rate(shape, dtype)` times a plain `torch.matmul` / `torch.bmm` at exactly a work
   item's shape on the current threads and precision (best of a few repeats), and `compute_floor(work)`
   sums flops / rate over the items: the time the step would take if every matmul ran at the speed a
   bare matmul of its own shape reaches here and nothing else cost anything.

Shapes: a linear layer applied to M tokens is shape (1, M, K, N) meaning (M, K) @ (K, N); attention is
(batch*heads, q_len, head_dim, kv_len) for QK^T and (batch*heads, q_len, kv_len, head_dim) for AV.
"""
from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

# The decoder's sizes and verl's MFU (count, peak table) are the trainer's: perf/mfu/actor is computed
# there (trainer/flops.py); re-exported here for the benches that read them as bench.flops.*.
from trainer.flops import VERL_PEAK_FLOPS, ModelShape, verl_flops, verl_mfu, verl_peak_flops  # noqa: F401

PHASES = ("rollout", "ref", "old_log_prob", "policy_fwd", "policy_bwd")


@dataclass(frozen=True)
class Work:
    """One group of identical-shape matmuls: `flops` in total, timed at `shape` = (batch, m, k, n)."""

    phase: str
    op: str  # "linear" | "attention" | "lm_head"
    shape: tuple[int, int, int, int]
    flops: float


def _mm(b: int, m: int, k: int, n: int) -> float:
    return 2.0 * b * m * k * n


def forward_work(s: ModelShape, *, phase: str, batch: int, new_tokens: int, cached: int, logits: int,
                 tokens_total: int | None = None, ctx_sum: float | None = None) -> list[Work]:
    """Matmuls of one forward of `batch` rows, each with `new_tokens` new tokens after `cached` cached ones.

    The FLOPs are exact for equal rows; pass `tokens_total` (sum of new tokens over rows) and `ctx_sum`
    (sum over rows and new tokens of the positions each token attends to) for ragged rows; the timing
    shape keeps the per-row sizes. `logits`: logit rows computed per row (LM head).
    """
    tokens = tokens_total if tokens_total is not None else batch * new_tokens
    if ctx_sum is None:  # token i (0-based) of a row sees cached + i + 1 positions
        ctx_sum = batch * (new_tokens * cached + new_tokens * (new_tokens + 1) / 2)
    m = batch * new_tokens
    work = [Work(phase, "linear", (1, m, k, n), _mm(1, tokens, k, n) * s.layers) for _name, k, n in s.linears()]
    kv_len = cached + new_tokens
    bh = batch * s.heads
    # QK^T and AV: 2*head_dim FLOPs per (query, key) pair per head each.
    attn = 2.0 * s.head_dim * s.heads * ctx_sum * s.layers
    work.append(Work(phase, "attention", (bh, new_tokens, s.head_dim, kv_len), attn))
    work.append(Work(phase, "attention", (bh, new_tokens, kv_len, s.head_dim), attn))
    work.append(Work(phase, "lm_head", (1, batch * logits, s.hidden, s.vocab), _mm(1, batch * logits, s.hidden, s.vocab)))
    return work


def backward_of(work: list[Work], phase: str = "policy_bwd") -> list[Work]:
    """Backward = grad w.r.t. the input and w.r.t. the weight (or the other operand): 2x the forward.

    (1, M, K, N) -> dX: (M, N) @ (N, K) and dW: (K, M) @ (M, N); attention (b, m, k, n) -> both
    operand grads, (b, m, n, k) and (b, k, m, n).
    """
    out = []
    for w in work:
        b, m, k, n = w.shape
        out.append(Work(phase, w.op, (b, m, n, k), w.flops))
        out.append(Work(phase, w.op, (b, k, m, n), w.flops))
    return out


def _distinct_prompts(prompt_lens: list[int], group: int) -> list[int]:
    """Prompt lengths of the groups of `group` consecutive trajectories (the first of each)."""
    return prompt_lens[::group]


def rollout_work(s: ModelShape, prompt_lens: list[int], response_lens: list[int], *, group: int = 1) -> list[Work]:
    """Prefill (logits of the last position only) + one cached decode step per new token after the first.

    A response of R tokens needs the prefill (which yields token 1) and R - 1 decode forwards. `group` > 1:
    each run of `group` trajectories shares its prompt, prefilled once.
    """
    B = len(prompt_lens)
    p_max = max(prompt_lens)
    pre = _distinct_prompts(prompt_lens, group)
    ctx_prefill = sum(p * (p + 1) / 2 for p in pre)
    work = forward_work(s, phase="rollout", batch=len(pre), new_tokens=p_max, cached=0, logits=1,
                        tokens_total=sum(pre), ctx_sum=ctx_prefill)
    steps = max(response_lens) - 1
    if steps > 0:
        decode_tokens = sum(max(0, r - 1) for r in response_lens)
        # decode step j (1-based) of a row with prompt p sees p + j positions
        ctx_decode = sum(sum(p + j for j in range(1, r)) for p, r in zip(prompt_lens, response_lens))
        mean_cache = p_max + steps // 2
        per_step = forward_work(s, phase="rollout", batch=B, new_tokens=1, cached=mean_cache, logits=1,
                                tokens_total=decode_tokens, ctx_sum=ctx_decode)
        # The LM head runs once per decoded token: its FLOPs scale with decode_tokens, not with B.
        for w in per_step:
            if w.op == "lm_head":
                w = Work(w.phase, w.op, w.shape, _mm(1, decode_tokens, s.hidden, s.vocab))
            work.append(w)
    return work


def scoring_work(s: ModelShape, prompt_lens: list[int], response_lens: list[int], *, phase: str,
                 group: int = 1) -> list[Work]:
    """One log-prob forward over prompt + response with logits at the response positions only.

    `group` > 1: each run of `group` trajectories shares its prompt, computed once; the responses (all
    but their last token, which predicts nothing) run on top of its keys/values.
    """
    if group > 1:
        pre = _distinct_prompts(prompt_lens, group)
        p_max = max(pre)
        work = [w for w in forward_work(s, phase=phase, batch=len(pre), new_tokens=p_max, cached=0, logits=1,
                                        tokens_total=sum(pre), ctx_sum=sum(p * (p + 1) / 2 for p in pre))]
        fed = [max(0, r - 1) for r in response_lens]
        if max(fed) > 0:
            ctx = sum(sum(p + j for j in range(1, f + 1)) for p, f in zip(prompt_lens, fed))
            work += forward_work(s, phase=phase, batch=len(prompt_lens), new_tokens=max(fed), cached=p_max,
                                 logits=max(fed), tokens_total=sum(fed), ctx_sum=ctx)
        # LM head: exactly one logit row per response token (the prompt's last row and the fed tokens').
        head = [w for w in work if w.op == "lm_head"][-1]
        rest = [w for w in work if w.op != "lm_head"]
        return rest + [Work(phase, "lm_head", head.shape, _mm(1, sum(response_lens), s.hidden, s.vocab))]
    B = len(prompt_lens)
    lens = [p + r for p, r in zip(prompt_lens, response_lens)]
    work = forward_work(s, phase=phase, batch=B, new_tokens=max(lens), cached=0, logits=max(response_lens),
                        tokens_total=sum(lens), ctx_sum=sum(L * (L + 1) / 2 for L in lens))
    out = []
    for w in work:
        if w.op == "lm_head":  # exact: sum of response lengths, not B * R_max
            w = Work(w.phase, w.op, w.shape, _mm(1, sum(response_lens), s.hidden, s.vocab))
        out.append(w)
    return out


def step_work(s: ModelShape, prompt_lens: list[int], response_lens: list[int], *, with_ref: bool = True,
              with_old_log_prob: bool = False, group: int = 1) -> list[Work]:
    """Every matmul of one GRPO step on these trajectories (see the module docstring).

    `group`: trajectories per shared prompt, consecutive (1 = every prompt computed per trajectory).
    """
    if len(prompt_lens) != len(response_lens) or not prompt_lens:
        raise ValueError("prompt_lens and response_lens must be non-empty and of equal length")
    if group < 1 or len(prompt_lens) % group:
        raise ValueError(f"group={group} must divide the {len(prompt_lens)} trajectories")
    work = rollout_work(s, prompt_lens, response_lens, group=group)
    if with_ref:
        work += scoring_work(s, prompt_lens, response_lens, phase="ref", group=group)
    if with_old_log_prob:
        work += scoring_work(s, prompt_lens, response_lens, phase="old_log_prob", group=group)
    fwd = scoring_work(s, prompt_lens, response_lens, phase="policy_fwd", group=group)
    return work + fwd + backward_of(fwd)


def breakdown(work: Iterable[Work]) -> dict[str, dict[str, float]]:
    """{phase: {linear, attention, lm_head, total}} in FLOPs, phases in step order, plus "total"."""
    out: dict[str, dict[str, float]] = {}
    for w in work:
        row = out.setdefault(w.phase, {"linear": 0.0, "attention": 0.0, "lm_head": 0.0, "total": 0.0})
        row[w.op] += w.flops
        row["total"] += w.flops
    ordered = {p: out[p] for p in PHASES if p in out}
    ordered["total"] = {k: sum(r[k] for r in ordered.values()) for k in ("linear", "attention", "lm_head", "total")}
    return ordered


# ---------------------------------------------------------------------------------------- roofline
def measure_rate(shape: tuple[int, int, int, int], dtype: Any, *, min_time_s: float = 0.05, repeats: int = 3,
                 device: str = "cpu") -> float:
    """FLOP/s of a plain (b, m, k) @ (b, k, n) matmul at this shape and dtype (best of `repeats`)."""
    import torch

    b, m, k, n = shape
    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(b, m, k, generator=gen).to(device=device, dtype=dtype)
    y = torch.randn(b, k, n, generator=gen).to(device=device, dtype=dtype)
    fn = (lambda: torch.matmul(x[0], y[0])) if b == 1 else (lambda: torch.bmm(x, y))
    fn()
    fn()
    # Calibrate the inner count so one timing lasts >= min_time_s (tiny shapes take microseconds).
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-7)
    iters = max(1, int(min_time_s / one))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return _mm(b, m, k, n) / best


def best_rates(work: Iterable[Work], dtype: Any, rates: dict | None = None, **kw: Any) -> dict[tuple, float]:
    """Measure every distinct shape of `work` once more and keep the best rate seen per shape.

    Called between steps on a shared machine, it finds the rate each shape reaches at the quietest
    moment of the run: the physical limit the floor is about.
    """
    rates = {} if rates is None else rates
    for shape in dict.fromkeys(w.shape for w in work):
        key = (shape, str(dtype))
        rates[key] = max(rates.get(key, 0.0), measure_rate(shape, dtype, **kw))
    return rates


def compute_floor(work: list[Work], dtype: Any, *, rates: dict | None = None, **kw: Any
                  ) -> tuple[float, dict[str, float], dict[tuple, float]]:
    """(floor seconds, floor seconds per phase, {shape: FLOP/s}) for `work` at `dtype`.

    `rates` caches measurements across calls (keyed by (shape, dtype)).
    """
    rates = {} if rates is None else rates
    per_phase: dict[str, float] = defaultdict(float)
    for w in work:
        key = (w.shape, str(dtype))
        if key not in rates:
            rates[key] = measure_rate(w.shape, dtype, **kw)
        per_phase[w.phase] += w.flops / rates[key]
    return sum(per_phase.values()), dict(per_phase), rates


def effective_rate(work: list[Work], per_phase_s: dict[str, float]) -> float:
    """Total FLOPs / total floor seconds: the FLOP/s a bare matmul averages over this step's shapes."""
    total = sum(w.flops for w in work)
    return total / max(1e-12, sum(per_phase_s.values()))
