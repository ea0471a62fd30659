"""Whole runs on 2 CPU workers under a real local Ray: resume from a sharded checkpoint continues
exactly; a worker that dies mid-step ends the run failed, naming the rank, within 60 s."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from trainer import checkpoint as ckpt
from trainer.config import apply_overrides
from trainer.recipes import get_recipe
from trainer.run import run

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(c.isdigit() or c == " " for c in solution_str) / max(1, len(solution_str))
'''


def two_worker_cfg(tmp_path: Path, model: Path, train: Path, out: str, **over):
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD)
    ov = {"data.train_files": str(train), "actor_rollout_ref.model.path": str(model),
          "trainer.default_local_dir": str(tmp_path / out), "custom_reward_function.path": str(reward),
          "trainer.logger": ["jsonl"], "trainer.n_gpus_per_node": 2, "trainer.launcher": "ray",
          "report.memory_interval_s": 0.5, "trainer.export_hf": False}
    ov.update(over)
    return apply_overrides(get_recipe("cpu_smoke"), ov)


def events(out: Path):
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_resume_from_sharded_checkpoint_on_two_workers(local_ray, tmp_path, tiny_model_dir, demo_data_dir):
    train = demo_data_dir / "train.jsonl"
    a = two_worker_cfg(tmp_path, tiny_model_dir, train, "a", **{"trainer.export_hf": True})
    assert run(a) == 0
    step1 = tmp_path / "a" / "global_step_1"
    assert (step1 / "actor" / ".metadata").exists()
    assert len(list((step1 / "actor").glob("*.distcp"))) == 2  # one shard file per rank
    b = two_worker_cfg(tmp_path, tiny_model_dir, train, "b", **{"trainer.resume_mode": "resume_path",
                                                                  "trainer.resume_from_path": str(step1)})
    assert run(b) == 0
    ea, eb = events(tmp_path / "a"), events(tmp_path / "b")
    ma = {e["data"]["step"]: e["data"]["metrics"] for e in ea if e["type"] == "metrics"}
    mb = {e["data"]["step"]: e["data"]["metrics"] for e in eb if e["type"] == "metrics"}
    assert sorted(mb) == [2]
    for k in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "response_length/mean"):
        assert ma[2][k] == pytest.approx(mb[2][k], rel=1e-5, abs=1e-7), k
    wa, wb = ckpt.read_actor_model(tmp_path / "a" / "global_step_2"), ckpt.read_actor_model(tmp_path / "b" / "global_step_2")
    w1 = ckpt.read_actor_model(step1)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6
    assert max((wa[k] - w1[k]).abs().max().item() for k in wa) > 0
    assert "timing_s/reshard" in ma[2] and ma[2]["perf/weight_sync_mb"] > 0
    phases = {e["data"]["phase"] for e in ea if e["type"] == "memory"}
    assert {"rollout", "old_log_prob", "ref", "update", "sync"} <= phases or {"rollout", "ref", "update", "sync"} <= phases
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "a" / "huggingface")  # consolidated by rank 0
    for n, p in exported.named_parameters():
        assert torch.allclose(p, wa[n]), n
    # The export keeps the checkpoint's generation_config.json (its eos list), not one from config.json.
    gen = json.loads((tmp_path / "a" / "huggingface" / "generation_config.json").read_text())
    assert gen["eos_token_id"] == json.loads((tiny_model_dir / "generation_config.json").read_text())["eos_token_id"]


def test_a_worker_dying_mid_step_fails_the_run_naming_it(local_ray, tmp_path, tiny_model_dir, demo_data_dir,
                                                         monkeypatch):
    monkeypatch.setenv("TRAINER_FAULT_INJECT", "1:update:1")  # rank 1 exits as it enters the step-1 update
    cfg = two_worker_cfg(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl", "out")
    t0 = time.monotonic()
    assert run(cfg) == 1
    elapsed = time.monotonic() - t0
    assert elapsed < 60, elapsed
    status = [e["data"] for e in events(tmp_path / "out") if e["type"] == "status"]
    assert status[-1]["state"] == "failed"
    assert "worker rank 1 failed in update_policy" in status[-1]["message"]
    assert "died" in status[-1]["message"]


def test_a_peers_collective_error_is_not_taken_for_the_root_cause(local_ray):
    """Rank 1's process dies; rank 0, blocked in a collective with it, fails first with a gloo
    'Connection reset by peer'. The call names rank 1's death (its peers' errors follow from it),
    deterministically: rank 0's error arrives first here."""
    import os

    from trainer.parallel.group import RayWorkerGroup, WorkerError

    @local_ray.remote(max_restarts=0)
    class Rank:
        def step(self, rank):
            if rank == 0:
                raise RuntimeError("[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer")
            time.sleep(1.0)
            os._exit(1)

    actors = [Rank.remote(), Rank.remote()]
    group = RayWorkerGroup.__new__(RayWorkerGroup)  # only _get: no placement group, no torch.distributed
    with pytest.raises(WorkerError) as err:
        group._get([a.step.remote(r) for r, a in enumerate(actors)], "update_policy")
    assert "worker rank 1 failed in update_policy" in str(err.value) and "died" in str(err.value)
    # a failure with no death among its peers stands as it is
    with pytest.raises(WorkerError, match="rank 0 failed in update_policy: RuntimeError"):
        group._get([Rank.remote().step.remote(0)], "update_policy")
