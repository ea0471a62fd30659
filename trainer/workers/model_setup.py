"""How the workers set up torch and a loaded model: the device and dtype a config names
(`resolve_device`, `resolve_dtype`), what a module is (`is_sharded`: FSDP2 DTensor parameters;
`takes_cache`: transformers' `cache` argument, which the shared-prompt forward needs), its compiled
forward (`compiled_forward`) and every dropout rate set to 0 (`without_dropout`)."""
from __future__ import annotations

from typing import Any

import torch


def is_sharded(model: Any) -> bool:
    """Whether any parameter is an FSDP2 shard (DTensor)."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - every torch we support has it
        return False
    return any(isinstance(p, DTensor) for p in model.parameters())


def takes_cache(model: Any) -> bool:
    import inspect

    try:
        return "cache" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin forward
        return False


def compiled_forward(model: Any) -> Any:
    """`torch.compile(model.forward, dynamic=True)`: the log-prob / update forward as fused kernels.

    The bound `forward` is compiled, not the module: the module, its parameter names (state_dict keys,
    checkpoints) and every other caller (the rollout engine runs on the same module) are untouched, and
    a checkpoint written with compile on loads with it off and back. Dynamic shapes: micro-batches of
    any size and length reuse one graph per mode (grad / no grad; shared-prompt or plain forward).
    Plain (not FSDP-sharded) modules only: calling `forward` directly would bypass FSDP2's hooks.
    """
    return torch.compile(model.forward, dynamic=True)


def resolve_device(name: str) -> torch.device:
    """trainer.device: auto -> cuda when available, else cpu."""
    if name in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"trainer.device={name!r} but CUDA is not available on this machine")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """model.dtype: auto -> bf16 on GPU, fp32 on CPU."""
    if name in (None, "", "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise ValueError(f"actor_rollout_ref.model.dtype must be one of auto|{'|'.join(table)}, got {name!r}")
    return table[name]


def without_dropout(model: torch.nn.Module) -> None:
    """Set every dropout probability of `model` to 0 (nn.Dropout modules and attention's own rate)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "attention_dropout"):
        config.attention_dropout = 0.0
