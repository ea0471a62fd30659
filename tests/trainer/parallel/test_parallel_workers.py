"""Two CPU workers under a real local Ray (gloo, FSDP2) against one in-process worker on the same batch:
the same loss, grad norm and updated weights; the engine's logits equal the actor's after a sync;
memory samples from every phase of every rank."""
from __future__ import annotations

import pytest
import torch

from trainer.config import apply_overrides
from trainer.recipes import get_recipe
from trainer.workers.experience import make_batch


def cfg_dict(model_dir, data):
    cfg = apply_overrides(get_recipe("cpu_smoke"), {
        "actor_rollout_ref.model.path": str(model_dir), "data.train_files": str(data),
        "actor_rollout_ref.actor.optim.total_training_steps": 4, "actor_rollout_ref.actor.optim.lr": 1e-3,
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes": 1, "report.memory_interval_s": 0.25,
        "trainer.torch_threads": 1})
    return cfg.to_dict()


def toy_batch():
    g = torch.Generator().manual_seed(0)
    lens_p, lens_r = [5, 9, 3, 7], [6, 2, 8, 4]
    prompts = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens_p]
    responses = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens_r]
    masks = [[1] * n for n in lens_r]
    masks[2] = [1, 1, 0, 0, 0, 1, 1, 1]
    b = make_batch(prompts, responses, masks, uids=["a", "a", "b", "b"])
    b.advantages = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)) * b.loss_mask
    return b


def one_step(group):
    b = toy_batch()
    parts = group.split(b.lengths(), balance=True)
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3] and len({len(p) for p in parts}) == 1
    b.old_log_probs, ent = group.compute_log_prob(b, parts, step=1, role="actor", with_entropy=True)
    b.ref_log_probs, _ = group.compute_log_prob(b, parts, step=1, role="ref", with_entropy=False)
    metrics, _, _ = group.update_policy(b, parts, mini_batch_size=4, seed=3, capture=False, step=1)
    sync = group.sync_weights(step=1)
    state = group.call("full_state")[0]
    return b, ent, metrics, sync, state


@pytest.fixture(scope="module")
def results(local_ray, tiny_model_dir, demo_data_dir):
    from trainer.parallel.group import LocalWorkerGroup, RayWorkerGroup

    d = cfg_dict(tiny_model_dir, demo_data_dir / "train.jsonl")
    one = LocalWorkerGroup(d)
    try:
        r1 = one_step(one)
    finally:
        one.shutdown()
    two = RayWorkerGroup(d, world_size=2, device_type="cpu")
    try:
        r2 = one_step(two)
        ids = [toy_batch().prompt_ids[1] + toy_batch().response_ids[1]]
        gaps = two.call("logits_gap", input_ids=ids)
        from trainer.types import PromptItem
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        msgs = [{"role": "user", "content": "What is 12 + 30?"}]
        pids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        prompts = [PromptItem(uid=f"u{i}", index=i, messages=msgs, prompt_ids=list(pids)) for i in range(2)]
        from trainer.rollout.base import SamplingParams

        trajs = two.generate(prompts, n=2, sampling=SamplingParams(max_new_tokens=8, seed=5), step=2)
        memory = two.drain_memory()
        info = two.info
    finally:
        two.shutdown()
    return r1, r2, gaps, trajs, memory, info


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def test_two_workers_match_one_worker(results):
    (b1, e1, m1, s1, w1), (b2, e2, m2, s2, w2), *_ = results
    assert torch.allclose(b1.old_log_probs, b2.old_log_probs, atol=1e-5)
    assert torch.allclose(b1.ref_log_probs, b2.ref_log_probs, atol=1e-5)
    assert torch.allclose(e1, e2, atol=1e-5)
    assert len(m1["actor/pg_loss"]) == 1 and len(set(m2["actor/pg_loss"])) == 1  # global: one value per rank
    for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert rel(m1[k][0], m2[k][0]) < 1e-5, (k, m1[k], m2[k])
    assert m1["actor/grad_norm"][0] > 0
    assert set(w1) == set(w2)
    for n in w1:
        d = (w1[n] - w2[n]).abs().max().item()
        assert d <= 1e-5 * max(1.0, w1[n].abs().max().item()), (n, d)
    assert s1["perf/weight_sync_mb"] == 0.0  # one worker: the engine runs on the actor's own tensors
    total_mb = sum(t.numel() * t.element_size() for t in w1.values()) / 2**20
    assert 0.5 * total_mb < s2["perf/weight_sync_mb"] <= total_mb  # every parameter (tied ones once)
    assert s2["perf/weight_sync_buckets"] >= 1 and s2["timing_s/reshard"] > 0


def test_engine_logits_equal_actor_after_sync(results):
    *_, gaps, trajs, memory, info = results
    assert [i["rank"] for i in info] == [0, 1] and all(not i["shared_engine"] for i in info)
    assert len(gaps) == 2 and max(gaps) < 1e-5, gaps
    assert len(trajs) == 4 and [t.uid for t in trajs] == ["u0", "u0", "u1", "u1"]


def test_memory_events_carry_every_phase_from_every_rank(results):
    *_, memory, info = results
    for rank in (0, 1):
        phases = {m["phase"] for m in memory if m["rank"] == rank}
        assert {"rollout", "old_log_prob", "ref", "update", "sync"} <= phases, (rank, phases)
        assert all(m["rss"] > 0 and m["device"] == "cpu" for m in memory if m["rank"] == rank)


def test_buckets_and_balanced_split():
    from trainer.parallel.balance import balanced_partition, contiguous_chunks, imbalance
    from trainer.parallel.fsdp import bucketed_full_tensors

    m = torch.nn.Sequential(torch.nn.Linear(100, 100), torch.nn.Linear(100, 10))  # 40400 + 400, 4040 + 40 bytes
    buckets = list(bucketed_full_tensors(m, 41_000))
    assert [[n for n, _ in b] for b in buckets] == [["0.weight", "0.bias"], ["1.weight", "1.bias"]]
    assert all(t.data_ptr() == dict(m.named_parameters())[n].data_ptr() for b in buckets for n, t in b)
    lengths = [100, 10, 90, 20, 50, 50, 30, 70]
    parts = balanced_partition(lengths, 2)
    assert sorted(i for p in parts for i in p) == list(range(8)) and [len(p) for p in parts] == [4, 4]
    # verl's log_seqlen_unbalance: min / max / minmax_diff of the batch cut in order (220 and 200 tokens),
    # balanced_* of the split used, mean = tokens per rank
    assert imbalance(lengths, parts) == {
        "global_seqlen/min": 200.0, "global_seqlen/max": 220.0, "global_seqlen/minmax_diff": 20.0,
        "global_seqlen/balanced_min": 210.0, "global_seqlen/balanced_max": 210.0, "global_seqlen/mean": 210.0}
    unbalanced = imbalance(lengths, contiguous_chunks(8, 2))
    assert (unbalanced["global_seqlen/balanced_min"], unbalanced["global_seqlen/balanced_max"]) == (200.0, 220.0)
    one = imbalance(lengths, [list(range(8))])  # one worker: every figure is the step's 420 tokens
    assert one == {"global_seqlen/min": 420.0, "global_seqlen/max": 420.0, "global_seqlen/minmax_diff": 0.0,
                   "global_seqlen/balanced_min": 420.0, "global_seqlen/balanced_max": 420.0,
                   "global_seqlen/mean": 420.0}
    assert contiguous_chunks(5, 2) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError):
        balanced_partition([1, 2, 3], 2)
