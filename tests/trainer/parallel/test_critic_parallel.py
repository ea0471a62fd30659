"""The critic (algorithm.adv_estimator=gae) on two CPU workers under a real local Ray (gloo, FSDP2)
against one in-process worker on the same batch: the same values, value loss, grad norm and updated
value-model weights; a whole 2-worker gae run resumed from its sharded step-1 checkpoint continues
exactly (actor and critic)."""
from __future__ import annotations

import torch

from tests.trainer.parallel.test_parallel_runs import events, two_worker_cfg
from trainer.algorithms.advantages import compute_advantage
from trainer.config import apply_overrides
from trainer.recipes import get_recipe

from tests.trainer.parallel.test_parallel_workers import rel, toy_batch


def critic_cfg(model_dir, data):
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(model_dir), "data.train_files": str(data),
        "algorithm.adv_estimator": "gae", "algorithm.gamma": 0.99, "algorithm.lam": 0.95,
        "actor_rollout_ref.actor.optim.total_training_steps": 4, "critic.optim.total_training_steps": 4,
        "critic.optim.lr": 1e-3, "critic.ppo_micro_batch_size_per_gpu": 1, "critic.cliprange_value": 0.05,
        "report.memory_interval_s": 0.25, "trainer.torch_threads": 1})
    return cfg.to_dict()


def critic_step(group):
    b = toy_batch()
    parts = group.split(b.lengths(), balance=True)
    b.values = group.compute_values(b, parts, step=1)
    rewards = torch.zeros_like(b.loss_mask)
    for i, r in enumerate([1.0, 0.0, 0.5, 1.0]):
        rewards[i, int(b.loss_mask[i].nonzero()[-1])] = r
    b.advantages, b.returns = compute_advantage("gae", rewards, b.loss_mask, b.uids, values=b.values,
                                                gamma=0.99, lam=0.95)
    before = {k: v.clone() for k, v in group.call("full_state", role="critic")[0].items()}  # in-process: a view
    m1 = group.update_critic(b, parts, mini_batch_size=4, seed=3, step=1)
    values_after = group.compute_values(b, parts, step=2)
    after = group.call("full_state", role="critic")[0]
    memory = group.drain_memory()
    return b, m1, before, after, values_after, memory


def test_critic_on_two_workers_matches_one_worker(local_ray, tiny_model_dir, demo_data_dir):
    from trainer.parallel.group import LocalWorkerGroup, RayWorkerGroup

    d = critic_cfg(tiny_model_dir, demo_data_dir / "train.jsonl")
    one = LocalWorkerGroup(d)
    try:
        b1, m1, w0, w1, v1, _ = critic_step(one)
    finally:
        one.shutdown()
    two = RayWorkerGroup(d, world_size=2, device_type="cpu")
    try:
        b2, m2, w0b, w2, v2, memory = critic_step(two)
    finally:
        two.shutdown()
    # The head starts at zero: every value 0 on both, whatever the world size.
    assert b1.values.abs().max() == 0 and b2.values.abs().max() == 0
    assert w0["score.weight"].abs().max() == 0 and torch.equal(w0["score.weight"], w0b["score.weight"])
    # One loss and grad norm for the whole mini-batch (global on every rank), equal across world sizes.
    assert len(m1["critic/vf_loss"]) == 1 and len(set(m2["critic/vf_loss"])) == 1
    for k in ("critic/vf_loss", "critic/grad_norm"):
        assert m1[k][0] > 0 and rel(m1[k][0], m2[k][0]) < 1e-5, (k, m1[k], m2[k])
    assert m1["critic/lr"] == [1e-3] and len(m1["critic/vf_clipfrac"]) == 4  # micro-batches of one
    assert set(w1) == set(w2) and "score.weight" in w1
    for n in w1:
        d = (w1[n] - w2[n]).abs().max().item()
        assert d <= 1e-5 * max(1.0, w1[n].abs().max().item()), (n, d)
    assert (w1["score.weight"] - w0["score.weight"]).abs().max() > 0  # the head trained
    # After the update the values moved towards the returns, the same on both, 0 past each response.
    assert torch.allclose(v1, v2, atol=1e-5) and v1.abs().max() > 0
    assert (v1 * (1 - b1.response_mask)).abs().max() == 0
    for rank in (0, 1):
        phases = {m["phase"] for m in memory if m["rank"] == rank}
        assert {"values", "update_critic"} <= phases, (rank, phases)


def test_gae_run_on_two_workers_resumes_exactly_with_its_critic(local_ray, tmp_path, tiny_model_dir, demo_data_dir):
    import pytest

    from tests.trainer.test_critic import read_model
    from trainer.run import run

    train = demo_data_dir / "train.jsonl"
    gae = {"algorithm.adv_estimator": "gae", "critic.optim.lr": 1e-3, "trainer.save_freq": 1}
    assert run(two_worker_cfg(tmp_path, tiny_model_dir, train, "a", **gae)) == 0
    step1 = tmp_path / "a" / "global_step_1"
    assert len(list((step1 / "critic").glob("*.distcp"))) == 2  # one shard file per rank
    assert run(two_worker_cfg(tmp_path, tiny_model_dir, train, "b", **gae, **{
        "trainer.resume_mode": "resume_path", "trainer.resume_from_path": str(step1)})) == 0
    ma = {e["data"]["step"]: e["data"]["metrics"] for e in events(tmp_path / "a") if e["type"] == "metrics"}
    mb = {e["data"]["step"]: e["data"]["metrics"] for e in events(tmp_path / "b") if e["type"] == "metrics"}
    assert sorted(mb) == [2] and ma[1]["critic/vf_loss"] > 0
    for k in ("critic/score/mean", "critic/values/mean", "critic/vf_loss", "critic/grad_norm", "actor/pg_loss",
              "actor/grad_norm"):
        assert ma[2][k] == pytest.approx(mb[2][k], rel=1e-5, abs=1e-7), k
    for role in ("actor", "critic"):
        wa, wb = read_model(tmp_path / "a" / "global_step_2", role), read_model(tmp_path / "b" / "global_step_2", role)
        assert set(wa) == set(wb) and max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6, role
