"""Fast decode step for Qwen2 / Llama-style modules: one new token per row as plain tensor ops.

Why: at rollout sizes, most of a transformers decode step is Python and module-dispatch overhead
(profiled on the demo tiny model: ~75% of a batch-1 step outside the matmuls), and `DynamicCache`
re-allocates every layer's keys/values with torch.cat each step. This module runs the SAME maths as
transformers' Qwen2/Llama forward (RMSNorm in float32, rotary embedding, grouped-query SDPA,
SiLU-gated MLP, same op order) straight on the module's live weights (no copies, so weight updates
are seen at once), with a KV cache preallocated for the whole generation. Prefill still runs through
the module itself; `DecodeState.from_hf_cache` moves its cache into the preallocated buffers.

Used by the hf engine only where `supports(model)` holds: model_type qwen2 or llama, default RoPE,
SDPA attention, SiLU MLP, no sliding-window layers, and plain (not FSDP-sharded DTensor) weights.
Anything else takes the module path. The engine tests check greedy outputs against `generate`.

Two forms of the step (the engine picks one per generation, `trainer.rollout.hf`):
- `FastDecoder.step`: the keys/values written at the Python position `state.length` and attention over
  the first `length + 1` positions only (the least work; each step's shapes differ).
- `StaticDecode`: every shape fixed for the whole generation (the CUDA-graph form). The position is a
  device tensor, keys/values go in with `index_copy_`, attention runs over the whole preallocated
  capacity under a mask of the positions written so far (zero-filled buffers, so a masked position
  never brings a NaN in), and the step advances its own position, mask and RoPE positions in place.
  On a CUDA device it is captured once per batch size as a CUDA graph (`torch.cuda.CUDAGraph`) and
  replayed: one launch per token instead of ~20 kernels per layer, each a Python call. On the CPU the
  same code runs eagerly (that is how the tests check it: same tokens as the sliced step). The graph
  records the weights' addresses: valid while the engine's parameters are updated in place
  (`update_weights` copies into them) and the graphs live only inside one `generate` call, so a
  `release_memory` / `resume_memory` that moves the weights never meets a stale graph.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED_TYPES = ("qwen2", "llama")


def supports(model: Any) -> bool:
    """True when the fast step computes exactly what the module would (see the module docstring)."""
    cfg = getattr(model, "config", None)
    base = getattr(model, "model", None)
    if cfg is None or base is None or getattr(cfg, "model_type", None) not in SUPPORTED_TYPES:
        return False
    if getattr(cfg, "_attn_implementation", None) != "sdpa" or getattr(cfg, "hidden_act", None) != "silu":
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        return False
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return False
    if not all(hasattr(base, a) for a in ("layers", "norm", "embed_tokens", "rotary_emb")) or not hasattr(model, "lm_head"):
        return False
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - every torch we support has it
        DTensor = ()  # type: ignore[assignment]
    return not any(isinstance(p, DTensor) for p in model.parameters())


def _rms(x: torch.Tensor, norm: Any) -> torch.Tensor:
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecodeState:
    """Preallocated KV cache: per layer keys/values (B, kv_heads, capacity, head_dim)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], length: int) -> None:
        self.keys, self.values, self.length = keys, values, length
        self._logits: torch.Tensor | None = None  # flat buffer the lm-head writes into (`logits_out`)

    def logits_out(self, rows: int, vocab: int, like: torch.Tensor) -> torch.Tensor:
        """A contiguous (rows, vocab) tensor over one buffer kept for the whole generation.

        A fresh (64, 151,936) float32 tensor every step is 39 MB that the allocator maps and the
        kernel page-faults in each time (more than a tenth of the step at Qwen's vocabulary on a CPU);
        rows only shrink during a generation, so the first step's buffer serves every later one.
        """
        need = rows * vocab
        buf = self._logits
        if buf is None or buf.numel() < need or buf.dtype != like.dtype or buf.device != like.device:
            buf = self._logits = like.new_empty(need)
        return buf[:need].view(rows, vocab)

    @classmethod
    def from_hf_cache(cls, cache: Any, extra: int, *, zeros: bool = False) -> "DecodeState":
        """The prefill's keys/values in buffers with room for `extra` more positions; `zeros` fills
        that room with zeros (the static step attends over it under a mask: garbage could be NaN)."""
        keys, values = [], []
        length = 0
        for layer in cache.layers:
            k, v = layer.keys, layer.values  # (B, kvh, L, d)
            b, h, length, d = k.shape
            alloc = k.new_zeros if zeros else k.new_empty
            kb = alloc((b, h, length + extra, d))
            vb = alloc((b, h, length + extra, d))
            kb[:, :, :length] = k
            vb[:, :, :length] = v
            keys.append(kb)
            values.append(vb)
        return cls(keys, values, length)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (batch compaction when requests finish)."""
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]


class FastDecoder:
    """The decode step over a supported module's live weights."""

    def __init__(self, model: Any) -> None:
        if not supports(model):
            raise ValueError("fast decode does not support this model (see trainer.rollout.fast_decode)")
        self.model = model
        base = model.model
        cfg = model.config
        self.layers = list(base.layers)
        self.num_heads = cfg.num_attention_heads
        self.num_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.rep = self.num_heads // self.num_kv

    @torch.no_grad()
    def step(self, state: DecodeState, tokens: torch.Tensor, positions: torch.Tensor,
             mask: torch.Tensor | None) -> torch.Tensor:
        """tokens (B,) long, positions (B,) long, mask (B, length+1) bool/long or None -> logits (B, V).

        The logits live in the state's buffer (`DecodeState.logits_out`): the next step overwrites them.
        """
        t = state.length

        def kv_at(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            state.keys[i][:, :, t] = k
            state.values[i][:, :, t] = v
            return state.keys[i][:, :, : t + 1], state.values[i][:, :, : t + 1]

        attn_mask = None if mask is None else mask[:, None, None, : t + 1].bool()  # (B, 1, 1, T)
        h = self._layers(tokens, positions, kv_at, attn_mask)
        state.length = t + 1
        head = self.model.lm_head
        if head.bias is not None or h.dtype != head.weight.dtype:
            return F.linear(h, head.weight, head.bias)
        # = F.linear(h, W) (no bias), written into the state's logits buffer: valid until the next step.
        return torch.mm(h, head.weight.t(), out=state.logits_out(h.shape[0], head.weight.shape[0], h))

    @torch.no_grad()
    def step_static(self, state: DecodeState, tokens: torch.Tensor, positions: torch.Tensor,
                    valid: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """The same step with every shape fixed (see the module docstring): no Python int in it.

        tokens (B,) long; positions (B,) long, advanced by one in place; valid (B, capacity) bool, the
        positions written so far (column `at` set here, before attending); at (1,) long, the write
        position, advanced in place. -> logits (B, V), a fresh tensor (inside a graph: its output).
        """
        valid.index_fill_(1, at, True)

        def kv_at(i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            state.keys[i].index_copy_(2, at, k.unsqueeze(2))
            state.values[i].index_copy_(2, at, v.unsqueeze(2))
            return state.keys[i], state.values[i]

        h = self._layers(tokens, positions, kv_at, valid[:, None, None, :])
        positions.add_(1)
        at.add_(1)
        head = self.model.lm_head
        return F.linear(h, head.weight, head.bias)

    def _layers(self, tokens: torch.Tensor, positions: torch.Tensor, kv_at: Any,
                attn_mask: torch.Tensor | None) -> torch.Tensor:
        """Embedding, every decoder layer and the final norm for one new token per row -> (B, H).

        `kv_at(i, k, v)` stores layer i's new key/value (B, kv_heads, d) and returns the keys/values
        (B, kv_heads, T, d) to attend over; `attn_mask` (B, 1, 1, T) bool or None (attend to all T).
        """
        base = self.model.model
        b = tokens.shape[0]
        x = F.embedding(tokens, base.embed_tokens.weight)  # (B, H)
        rot = base.rotary_emb
        freqs = positions[:, None].float() * rot.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * rot.attention_scaling).to(x.dtype)[:, None, :]  # (B, 1, d)
        sin = (emb.sin() * rot.attention_scaling).to(x.dtype)[:, None, :]
        for i, layer in enumerate(self.layers):
            att = layer.self_attn
            h = _rms(x, layer.input_layernorm)
            q = F.linear(h, att.q_proj.weight, att.q_proj.bias).view(b, self.num_heads, self.head_dim)
            k = F.linear(h, att.k_proj.weight, att.k_proj.bias).view(b, self.num_kv, self.head_dim)
            v = F.linear(h, att.v_proj.weight, att.v_proj.bias).view(b, self.num_kv, self.head_dim)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys, values = kv_at(i, k, v)
            if attn_mask is None:
                o = F.scaled_dot_product_attention(q[:, :, None, :], keys, values, scale=att.scaling,
                                                   enable_gqa=self.rep > 1)
            else:
                # One query per row: fold the heads sharing a kv head into the query length.
                o = F.scaled_dot_product_attention(q.view(b, self.num_kv, self.rep, self.head_dim), keys, values,
                                                   attn_mask=attn_mask, scale=att.scaling)
            x = x + F.linear(o.reshape(b, self.num_heads * self.head_dim), att.o_proj.weight, att.o_proj.bias)
            h = _rms(x, layer.post_attention_layernorm)
            mlp = layer.mlp
            x = x + F.linear(F.silu(F.linear(h, mlp.gate_proj.weight, mlp.gate_proj.bias))
                             * F.linear(h, mlp.up_proj.weight, mlp.up_proj.bias),
                             mlp.down_proj.weight, mlp.down_proj.bias)
        return _rms(x, base.norm)


class StaticDecode:
    """Decode steps at fixed shapes for one generation: static input buffers, and on CUDA (unless
    `graphs=False`) one CUDA graph per batch size, captured at the first step of that size.

    `step(tokens)` -> logits (B, V) for the rows' next tokens (the graph's output buffer on CUDA:
    overwritten by the next step); `select(rows)` keeps only `rows` (batch compaction), after which
    the next step captures a graph for the new size. `captures` counts the graphs captured.
    """

    kind = "static"

    def __init__(self, decoder: FastDecoder, state: DecodeState, positions: torch.Tensor,
                 prompt_mask: torch.Tensor | None, *, graphs: bool) -> None:
        self.decoder, self.state = decoder, state
        b, cap = state.keys[0].shape[0], state.keys[0].shape[2]
        dev = state.keys[0].device
        self.valid = torch.zeros((b, cap), dtype=torch.bool, device=dev)
        width = state.length
        self.valid[:, :width] = True if prompt_mask is None else prompt_mask[:, :width].bool()
        self.positions = positions.clone()
        self.at = torch.full((1,), width, dtype=torch.long, device=dev)
        self.tokens = torch.zeros(b, dtype=torch.long, device=dev)
        self.graphs = bool(graphs) and dev.type == "cuda"
        self.graph: Any = None
        self.out: torch.Tensor | None = None
        self.captures = 0

    def _run(self) -> torch.Tensor:
        return self.decoder.step_static(self.state, self.tokens, self.positions, self.valid, self.at)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        self.tokens.copy_(tokens)
        if not self.graphs:
            return self._run()
        if self.graph is not None:
            self.graph.replay()
            return self.out
        # First step at this size: run it eagerly on a side stream (the real step, and the warm-up
        # CUDA graphs want before a capture), then record the same step for the following ones.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            logits = self._run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the memory monitor's thread may read allocator stats / NVML meanwhile.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.out = self._run()  # recorded, not run: the state is not advanced twice
        self.graph = graph
        self.captures += 1
        return logits

    def select(self, rows: torch.Tensor) -> None:
        self.state.select(rows)
        self.valid, self.positions = self.valid[rows], self.positions[rows]
        self.tokens = self.tokens[rows]
        self.graph = self.out = None  # the buffers moved: the next step captures anew
