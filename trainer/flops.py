"""verl's FLOP count of an actor update and its peak-FLOP/s table: the source of `perf/mfu/actor`.

`perf/mfu/actor` is verl's model FLOPs utilisation of the actor's update (its fsdp_workers'
`update_actor`): the FLOPs its counter (verl/utils/flops_counter.py) gives for one forward and
backward over the step's sequences, times `actor.ppo_epochs`, over the update's seconds, the
device's peak FLOP/s and the world size. Each rank computes it from the whole batch's sequence
lengths and its own update time, and the driver averages the ranks (trainer.parallel.worker).

The count, per model family (`FAMILIES`, by the HF config's `model_type`, as verl picks its
estimate): 6 x N x tokens + 6 x sum(L^2) x head_dim x heads x layers, where L runs over the
sequences (prompt + response, unpadded) and N = layers x (q, k, v, o projections + MLP) + 2 x vocab x
hidden (the embedding and the LM head both counted, tied or not). The MLP is the three SwiGLU
matrices; in the MoE families it is the three matrices of each of the `num_experts_per_tok` experts a
token reaches plus the router (hidden x num_experts). A family outside `FAMILIES` has no count here
(verl reports 0 for it): the metric is not reported.

Peak FLOP/s: verl's dense bf16 table (`VERL_PEAK_FLOPS`), matched by substring of the CUDA device
name as verl matches it. verl has no config key to override it, so neither do we. On the CPU or a
GPU the table does not know, the metric is not reported (verl uses 448 GFLOP/s for any CPU and an
infinite peak, i.e. 0, for an unknown GPU: neither is a measured figure).

Pure functions and no torch at import (bench/flops.py and bench/gpu_grpo.py import them too);
`device_peak_flops` asks torch for the device name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# verl's peak dense bf16 FLOP/s per device name (verl/utils/flops_counter.py _DEVICE_FLOPS, its GPU
# entries; the CPU's and Ascend's are left out: neither is a CUDA device name).
VERL_PEAK_FLOPS = {
    "GB200": 2.5e15,
    "B200": 2.25e15,
    "MI300X": 1336e12,
    "H100": 989e12,
    "H800": 989e12,
    "H200": 989e12,
    "A100": 312e12,
    "A800": 312e12,
    "L40S": 362.05e12,
    "L40": 181.05e12,
    "A40": 149.7e12,
    "L20": 119.5e12,
    "H20": 148e12,
    "RTX 3070 Ti": 21.75e12,
}

# HF model_type -> the estimate verl applies to it (text-only configs; "dense" or "moe").
FAMILIES = {
    "qwen2": "dense",
    "llama": "dense",
    "qwen3": "dense",
    "mistral": "dense",
    "seed_oss": "dense",
    "mimo": "dense",
    "qwen2_moe": "moe",
    "qwen3_moe": "moe",
}


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen2/Llama-style decoder that fix its FLOPs (`ffn`: one expert's MLP width
    when `experts` > 0)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    experts: int = 0
    experts_per_token: int = 0

    @classmethod
    def from_hf_config(cls, cfg: Any) -> "ModelShape":
        """The dense sizes of an HF config (head_dim from the config, else hidden / heads, as verl)."""
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        return cls(
            hidden=cfg.hidden_size,
            layers=cfg.num_hidden_layers,
            heads=cfg.num_attention_heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            head_dim=head_dim,
            ffn=cfg.intermediate_size,
            vocab=cfg.vocab_size,
        )

    def linears(self) -> list[tuple[str, int, int]]:
        """(name, K, N) of the per-layer projections of a dense layer (x (M, K) @ W (K, N))."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [
            ("q_proj", self.hidden, q),
            ("k_proj", self.hidden, kv),
            ("v_proj", self.hidden, kv),
            ("o_proj", q, self.hidden),
            ("gate_proj", self.hidden, self.ffn),
            ("up_proj", self.hidden, self.ffn),
            ("down_proj", self.ffn, self.hidden),
        ]


def shape_for(cfg: Any) -> ModelShape | None:
    """The shape verl's estimate reads from this HF config, or None when `FAMILIES` lacks its model_type."""
    family = FAMILIES.get(getattr(cfg, "model_type", None) or "")
    if family is None:
        return None
    s = ModelShape.from_hf_config(cfg)
    if family == "moe":
        s = ModelShape(
            hidden=s.hidden,
            layers=s.layers,
            heads=s.heads,
            kv_heads=s.kv_heads,
            head_dim=s.head_dim,
            ffn=cfg.moe_intermediate_size,
            vocab=s.vocab,
            experts=cfg.num_experts,
            experts_per_token=cfg.num_experts_per_tok,
        )
    return s


def verl_params(s: ModelShape) -> int:
    """N of verl's 6 x N x tokens: the parameters a token passes through, embedding and LM head both."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    if s.experts:
        mlp = s.hidden * s.ffn * 3 * s.experts_per_token + s.hidden * s.experts
    else:
        mlp = s.hidden * s.ffn * 3
    return (mlp + s.hidden * (q + kv + kv + q)) * s.layers + 2 * s.vocab * s.hidden


def verl_flops(s: ModelShape, seqlens: list[int]) -> float:
    """FLOPs verl counts for one forward + backward over sequences of these lengths (prompt + response,
    unpadded): 6 x N x tokens + 6 x sum(L^2) x head_dim x heads x layers. The attention term is the
    causal one verl uses now (older releases counted 12 x sum(L^2): attention without the causal half)."""
    attention = 6.0 * sum(n * n for n in seqlens) * s.head_dim * s.heads * s.layers
    return 6.0 * verl_params(s) * sum(seqlens) + attention


def verl_mfu(
    s: ModelShape,
    seqlens: list[int],
    seconds: float,
    peak_flops: float,
    *,
    ppo_epochs: int = 1,
    world: int = 1,
) -> float:
    """verl's perf/mfu/actor: the update's counted FLOPs x ppo_epochs / its seconds / peak / world size.

    `seqlens`: the whole step's sequences (every rank's), `seconds`: this rank's update."""
    return verl_flops(s, seqlens) * ppo_epochs / max(seconds, 1e-12) / peak_flops / world


def verl_peak_flops(device_name: str) -> float | None:
    """verl's promised FLOP/s for this device name, or None when verl's table does not know it.

    Keys are tried in reverse alphabetical order, the first substring wins, as in verl ("H200"
    before "H20", "L40S" before "L40", "GB200" before "B200")."""
    for key in sorted(VERL_PEAK_FLOPS, reverse=True):
        if key in device_name:
            return VERL_PEAK_FLOPS[key]
    return None


def device_peak_flops(device: Any) -> float | None:
    """verl's peak FLOP/s for this torch device: None on the CPU and on a GPU outside the table."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    return verl_peak_flops(torch.cuda.get_device_name(device))
