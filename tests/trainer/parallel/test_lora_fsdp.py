"""LoRA under FSDP2: two CPU workers under a real local Ray (gloo) against one in-process worker on the
same batch: the same log-probs (policy and base reference), loss, grad norm and adapter; the engine
holds the merged weights after a sync on every rank; a sharded checkpoint of the adapter reloads to
the same next step; the two-worker export (merged folder + adapter) equals the one-worker export."""
from __future__ import annotations

import pytest
import torch

from trainer.config import apply_overrides
from trainer.recipes import get_recipe
from tests.trainer.parallel.test_parallel_workers import toy_batch


def cfg_dict(model_dir, data):
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(model_dir), "data.train_files": str(data),
        "actor_rollout_ref.model.lora_rank": 4, "actor_rollout_ref.model.lora_alpha": 8,
        "actor_rollout_ref.actor.optim.total_training_steps": 4, "actor_rollout_ref.actor.optim.lr": 1e-2,
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes": 1, "report.memory_interval_s": 0.25,
        "trainer.torch_threads": 1})
    return cfg.to_dict()


def step(group, n):
    b = toy_batch()
    parts = group.split(b.lengths(), balance=True)
    b.old_log_probs, _ = group.compute_log_prob(b, parts, step=n, role="actor", with_entropy=False)
    b.ref_log_probs, _ = group.compute_log_prob(b, parts, step=n, role="ref", with_entropy=False)
    metrics, _, _ = group.update_policy(b, parts, mini_batch_size=4, seed=3, capture=False, step=n)
    group.sync_weights(step=n)
    return b, metrics


def run_group(group, tmp, ids):
    """Step 1, a checkpoint, step 2; reload the checkpoint and redo step 2; export."""
    b1, m1 = step(group, 1)
    group.call("save", path=str(tmp / "ckpt"))
    b2, m2 = step(group, 2)
    adapter2 = {k: v for k, v in group.call("full_state")[0].items() if ".lora_" in k}
    gaps = group.call("logits_gap", input_ids=ids)
    group.call("load", path=str(tmp / "ckpt"))
    b2r, m2r = step(group, 2)
    adapter2r = {k: v for k, v in group.call("full_state")[0].items() if ".lora_" in k}
    group.call("export_hf", out_dir=str(tmp / "huggingface"))
    return dict(b1=b1, m1=m1, b2=b2, m2=m2, adapter2=adapter2, gaps=gaps, b2r=b2r, m2r=m2r, adapter2r=adapter2r)


@pytest.fixture(scope="module")
def results(local_ray, tiny_model_dir, demo_data_dir, tmp_path_factory):
    from trainer.parallel.group import LocalWorkerGroup, RayWorkerGroup

    d = cfg_dict(tiny_model_dir, demo_data_dir / "train.jsonl")
    ids = [toy_batch().prompt_ids[1] + toy_batch().response_ids[1]]
    one_dir, two_dir = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    one = LocalWorkerGroup(d)
    try:
        r1 = run_group(one, one_dir, ids)
    finally:
        one.shutdown()
    two = RayWorkerGroup(d, world_size=2, device_type="cpu")
    try:
        r2 = run_group(two, two_dir, ids)
    finally:
        two.shutdown()
    return r1, r2, one_dir, two_dir


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def test_two_workers_match_one_worker_with_lora(results):
    r1, r2, *_ = results
    for key in ("b1", "b2"):
        assert torch.allclose(r1[key].old_log_probs, r2[key].old_log_probs, atol=1e-5)
        assert torch.allclose(r1[key].ref_log_probs, r2[key].ref_log_probs, atol=1e-5)
    # The reference stays the base while the policy moves.
    assert torch.allclose(r2["b1"].ref_log_probs, r2["b2"].ref_log_probs, atol=1e-6)
    assert (r2["b2"].old_log_probs - r2["b2"].ref_log_probs).abs().max() > 1e-4
    for m in ("m1", "m2"):
        for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
            assert rel(r1[m][k][0], r2[m][k][0]) < 1e-5, (m, k, r1[m][k], r2[m][k])
    assert set(r1["adapter2"]) == set(r2["adapter2"]) and r1["adapter2"]
    for n, t in r1["adapter2"].items():
        assert (t - r2["adapter2"][n]).abs().max().item() <= 1e-5 * max(1.0, t.abs().max().item()), n


def test_engine_holds_merged_weights_on_every_rank(results):
    r1, r2, *_ = results
    assert len(r2["gaps"]) == 2 and max(r2["gaps"]) < 1e-5, r2["gaps"]
    assert r1["gaps"][0] < 1e-5


def test_sharded_adapter_checkpoint_reloads_to_the_same_step(results):
    for r in results[:2]:
        for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
            assert r["m2"][k] == r["m2r"][k], k
        assert all(torch.equal(r["adapter2"][n], r["adapter2r"][n]) for n in r["adapter2"])


def test_two_worker_export_equals_one_worker_export(results):
    from safetensors.torch import load_file

    *_, one_dir, two_dir = results
    for folder, name in (("huggingface", "model.safetensors"), ("lora_adapter", "adapter_model.safetensors")):
        a, b = load_file(one_dir / folder / name), load_file(two_dir / folder / name)
        assert set(a) == set(b) and a, folder
        for k in a:
            assert (a[k] - b[k]).abs().max().item() <= 1e-5 * max(1.0, a[k].abs().max().item()), (folder, k)
    merged = load_file(one_dir / "huggingface" / "model.safetensors")
    assert not any("lora_" in k or "base_layer" in k for k in merged)
