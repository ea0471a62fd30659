"""FSDP2 for the policy and the reference; full-tensor gathers for weight sync and export.

`shard_module(model, ...)` applies `fully_shard` to every decoder layer and then to the root (the
embedding / final norm / lm_head live in the root group), as FSDP2 wants: inner groups first.
On CUDA with a bf16/fp16 compute dtype the policy gets `MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)`: fp32 master weights and gradients, bf16 compute. `offload=True` keeps the
parameters on the CPU (`CPUOffloadPolicy`, used for the frozen reference on GPUs).

Why FSDP2 and not FSDP1: FSDP1's full-state gather segfaulted on CPU/gloo here; FSDP2 does not
(docs/design.md §5, "FSDP2 on CPU").

`bucketed_full_tensors(model, bucket_bytes)` walks the parameters in a fixed order (every rank the
same, since `full_tensor()` is a collective), groups them into buckets of about `bucket_bytes` of
full-size tensors, gathers one bucket at a time and yields it as [(hf_name, full_tensor)]: the
caller loads the bucket into its engine and drops it before the next gather, so the peak extra
memory is one bucket, not a full model copy.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch


def is_distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of an HF causal LM (model.model.layers for Llama/Qwen2-style models)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        no_split = set(getattr(model, "_no_split_modules", None) or [])
        found = [m for m in model.modules() if type(m).__name__ in no_split]
        if not found:
            raise ValueError(f"cannot find the decoder layers of {type(model).__name__} to shard")
        return found
    return list(layers)


def shard_module(model: torch.nn.Module, *, device: torch.device, compute_dtype: torch.dtype,
                 mixed_precision: bool, offload: bool = False) -> torch.nn.Module:
    """fully_shard each decoder layer, then the root; returns the same (now sharded) module."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kw: dict[str, Any] = {}
    if mixed_precision and device.type == "cuda" and compute_dtype in (torch.bfloat16, torch.float16):
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    if offload and device.type == "cuda":
        kw["offload_policy"] = CPUOffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    return model


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly sharded) DTensor parameter; a plain tensor as it is."""
    from torch.distributed.tensor import DTensor

    t = t.detach()
    return t.full_tensor() if isinstance(t, DTensor) else t


def bucketed_full_tensors(model: torch.nn.Module, bucket_bytes: int
                          ) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Buckets of (name, full tensor) pairs, each about `bucket_bytes` (one oversized tensor alone)."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, param in model.named_parameters():
        nbytes = param.numel() * param.element_size()  # numel() of a DTensor is the global size
        if bucket and size + nbytes > bucket_bytes:
            yield [(n, full_tensor(p)) for n, p in bucket]
            bucket, size = [], 0
        bucket.append((name, param))
        size += nbytes
    if bucket:
        yield [(n, full_tensor(p)) for n, p in bucket]


def full_model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) model state dict on the CPU. Collective under FSDP: call on every rank
    (every rank gets it; callers other than rank 0 drop it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # A one-rank mesh can come back as DTensors: make every value a plain CPU tensor.
    return {k: full_tensor(v).cpu() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
