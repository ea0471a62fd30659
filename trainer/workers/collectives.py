"""The few collectives the workers need across ranks, each the identity on one process: the world
size and this rank (`dist_world`, `dist_rank`), an all-reduce of a few numbers (`all_reduce`), and a
DTensor result taken as a plain tensor (`local_tensor`)."""
from __future__ import annotations

import torch


def dist_world() -> int:
    """The number of ranks (1 without a process group)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_reduce(values: list[float], op: str = "sum") -> list[float]:
    """All-reduce a few numbers across ranks (identity on one process). float64 on the CPU (gloo) or
    on the current CUDA device (NCCL)."""
    if dist_world() == 1:
        return list(values)
    import torch.distributed as dist

    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor(values, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t.cpu().tolist()


def dist_rank() -> int:
    """This process's rank (0 without a process group)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """clip_grad_norm_ over FSDP2 (DTensor) gradients returns a DTensor holding the GLOBAL norm (FSDP
    clips globally); take it as a plain tensor."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t
