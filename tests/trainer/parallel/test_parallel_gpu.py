"""GPU-only checks (marker `gpu`, deselected by default): NCCL in a one-rank group, and CUDA memory
phases from a sharded (FSDP2) worker. Skipped with the reason where there is no GPU."""
from __future__ import annotations

import socket

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (NCCL, CUDA memory)")]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_nccl_all_reduce_and_cuda_memory_phases(tiny_model_dir, demo_data_dir):
    import torch.distributed as dist

    from trainer.config import apply_overrides
    from trainer.parallel.group import LocalWorkerGroup
    from trainer.recipes import get_recipe

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_port()}", rank=0, world_size=1)
    try:
        x = torch.full((3,), 2.0, device="cuda")
        dist.all_reduce(x)
        assert x.tolist() == [2.0, 2.0, 2.0]
        cfg = apply_overrides(get_recipe("cpu_smoke"), {
            "actor_rollout_ref.model.path": str(tiny_model_dir), "data.train_files": str(demo_data_dir / "train.jsonl"),
            "trainer.device": "cuda", "actor_rollout_ref.model.dtype": "bfloat16",
            "actor_rollout_ref.actor.optim.total_training_steps": 2})
        group = LocalWorkerGroup(cfg.to_dict())
        try:
            assert group.worker.sharded and not group.worker.shared_engine
            sync = group.sync_weights(step=1)
            assert sync["perf/weight_sync_mb"] > 0
            mem = group.drain_memory()
            assert any(m["phase"] == "sync" and m["device"] == "cuda:0" and m["allocated"] > 0 for m in mem)
        finally:
            group.shutdown()
    finally:
        dist.destroy_process_group()


def test_nvml_sees_the_whole_device_beyond_torchs_allocator():
    """device_used (NVML) counts the CUDA context and every allocator, so it is at least what torch's
    allocator reserved; with nvidia-ml-py missing the reason is reported instead of a 0 passing silently."""
    from trainer.memory import nvml_unavailable, nvml_used_bytes, read_memory

    block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")
    used = nvml_used_bytes("cuda:0")
    if used is None:
        pytest.skip(f"NVML not readable here: {nvml_unavailable('cuda:0')} (install the gpu extra: nvidia-ml-py)")
    reading = read_memory("cuda:0")
    assert reading["device_used"] >= reading["reserved"] >= block.numel()
    del block
