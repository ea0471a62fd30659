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
