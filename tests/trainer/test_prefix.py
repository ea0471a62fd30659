"""trainer.workers.prefix: the shared-prompt forward gives each row the log-probs of its own unpadded
forward, and the update the same gradient as the plain padded forward; torch.compile of the forward
(slow: minutes of compile on a CPU) changes neither the numbers nor the checkpoint keys."""
from __future__ import annotations

import pytest
import torch

from trainer.config import Config, resolve
from trainer.workers.actor import ActorWorker
from trainer.workers.experience import make_batch
from trainer.workers.prefix import group_prompts, pack_shared, prompt_sorted_chunks

from tests.trainer.actor_probe import actor_cfg, update_grads


def grouped_batch():
    """Two prompts x 3 samples, ragged responses (one of a single token, one empty), a masked tool span."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 200, (n,), generator=g).tolist() for n in (5, 9)]
    lens_r = [6, 1, 8, 4, 0, 5]
    responses = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens_r]
    masks = [[1] * n for n in lens_r]
    masks[2] = [1, 1, 0, 0, 0, 1, 1, 1]
    rows = [prompts[0], prompts[1], prompts[0], prompts[1], prompts[0], prompts[1]]  # interleaved groups
    b = make_batch(rows, responses, masks, uids=["a", "b", "a", "b", "a", "b"])
    b.advantages = torch.randn(6, 8, generator=g) * b.loss_mask
    b.ref_log_probs = -torch.rand(6, 8, generator=g) * b.response_mask
    return b


@pytest.fixture(scope="module")
def worker(tiny_model_dir):
    return ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                       actor_cfg=actor_cfg(use_kl_loss=True), trainable=True, temperature=0.7, total_steps=10)


def test_group_prompts_and_packing():
    assert group_prompts([[1, 2], [3]]) is None
    distinct, index = group_prompts([[1, 2], [3], [1, 2]])
    assert distinct == [[1, 2], [3]] and index == [0, 1, 0]
    inp = pack_shared(distinct, index, [[7, 8, 9], [5], []], pad_id=0)
    assert inp.prompt_ids.tolist() == [[1, 2], [0, 3]] and inp.response_width == 3
    assert inp.feed_ids.tolist() == [[7, 8], [5, 0], [0, 0]]
    assert inp.full_mask.tolist() == [[1, 1, 1, 1], [0, 1, 1, 0], [1, 1, 0, 0]]
    assert inp.feed_pos.tolist() == [[2, 3], [1, 2], [2, 3]]


def test_prompt_sorted_chunks_keep_groups_together():
    prompts = [[5, 6], [1, 2, 3], [5, 6], [1, 2, 3], [4], [5, 6]]
    lengths = [4, 9, 3, 5, 2, 6]
    chunks = prompt_sorted_chunks(prompts, lengths, 3)
    assert chunks == [[4, 2, 0], [5, 3, 1]]
    assert sorted(i for c in chunks for i in c) == list(range(6))


def test_shared_prompt_log_probs_match_unpadded_forward(worker):
    assert worker.share_prompts
    batch = grouped_batch()
    for micro in (None, 4):
        worker.log_prob_micro = micro
        logp, ent = worker.compute_log_prob(batch)
        for i in range(6):
            p, r = len(batch.prompt_ids[i]), len(batch.response_ids[i])
            if r == 0:
                assert torch.all(logp[i] == 0)
                continue
            ids = torch.tensor([batch.prompt_ids[i] + batch.response_ids[i]])
            with torch.no_grad():
                logits = worker.model(input_ids=ids).logits[0].float() / 0.7
            want = torch.log_softmax(logits[p - 1:p + r - 1], -1).gather(-1, ids[0, p:].unsqueeze(-1)).squeeze(-1)
            assert torch.allclose(logp[i, :r], want, atol=1e-5), (micro, i)
            assert torch.all(logp[i, r:] == 0)
    worker.log_prob_micro = None


def test_shared_prompt_update_equals_the_padded_forward(worker):
    b_shared, b_plain = grouped_batch(), grouped_batch()
    g1, m1 = update_grads(worker, b_shared, capture=True)
    worker.share_prompts = False
    try:
        g2, m2 = update_grads(worker, b_plain, capture=True)
    finally:
        worker.share_prompts = True
    assert m1["actor/grad_norm"][0] > 0
    for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
        assert m1[k][0] == pytest.approx(m2[k][0], rel=1e-5, abs=1e-7), k
    for n in g1:
        assert torch.allclose(g1[n], g2[n], atol=1e-6, rtol=1e-4), n
    assert torch.allclose(b_shared.old_log_probs, b_plain.old_log_probs, atol=1e-5)
    cfg = worker.cfg
    worker.cfg = actor_cfg(use_kl_loss=True, ppo_micro_batch_size_per_gpu=2)  # prompt-sorted micro-batches
    try:
        g3, m3 = update_grads(worker, grouped_batch(), capture=True)
    finally:
        worker.cfg = cfg
    assert len(m3["actor/pg_clipfrac"]) == 3
    for n in g1:
        assert torch.allclose(g1[n], g3[n], atol=1e-6, rtol=1e-4), n


def test_ref_compile_follows_the_actor_unless_set():
    arr = resolve(Config.from_dict({"actor_rollout_ref": {"actor": {"use_torch_compile": True}}})).actor_rollout_ref
    assert arr.ref.use_torch_compile is True
    arr = resolve(Config.from_dict({"actor_rollout_ref": {"actor": {"use_torch_compile": True},
                                                          "ref": {"use_torch_compile": False}}})).actor_rollout_ref
    assert arr.ref.use_torch_compile is False
    assert resolve(Config()).actor_rollout_ref.ref.use_torch_compile is False


@pytest.mark.slow  # torch.compile of the forward takes minutes on a CPU (several graphs: grad / no grad)
def test_compiled_forward_gives_the_same_numbers_and_checkpoint_keys(tiny_model_dir, tmp_path):
    def make(compile_):
        return ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                           actor_cfg=actor_cfg(use_kl_loss=True, use_torch_compile=compile_), trainable=True,
                           total_steps=10, use_torch_compile=compile_)

    eager, compiled = make(False), make(True)
    assert compiled.compiled and not eager.compiled
    batch = grouped_batch()
    for share in (True, False):
        eager.share_prompts = compiled.share_prompts = share
        a, _ = eager.compute_log_prob(batch)
        c, _ = compiled.compute_log_prob(batch)
        assert torch.allclose(a, c, atol=1e-5), share
    eager.share_prompts = compiled.share_prompts = True
    b1, b2 = grouped_batch(), grouped_batch()
    m1 = eager.update_policy(b1, mini_batch_size=6, capture=True)
    m2 = compiled.update_policy(b2, mini_batch_size=6, capture=True)
    assert m1["actor/grad_norm"][0] == pytest.approx(m2["actor/grad_norm"][0], rel=1e-4)
    assert torch.allclose(b1.old_log_probs, b2.old_log_probs, atol=1e-5)
    for (n, p), (_, q) in zip(eager.model.named_parameters(), compiled.model.named_parameters()):
        assert torch.allclose(p, q, atol=1e-4), n  # Adam's first step is ~lr * sign(grad): lr 1e-3
    # A checkpoint written with compile on has the plain keys and loads into an eager worker.
    state = compiled.state_dict()
    assert set(state["model"]) == set(eager.model.state_dict())
    torch.save(state, tmp_path / "ckpt.pt")
    fresh = make(False)
    fresh.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=False))
    for (n, p), (_, q) in zip(fresh.model.named_parameters(), compiled.model.named_parameters()):
        assert torch.equal(p, q), n
    path = str(tmp_path / "sharded")
    compiled.save_sharded(path)
    again = make(False)
    again.load_sharded(path)
    assert all(torch.equal(p, q) for p, q in zip(again.model.parameters(), compiled.model.parameters()))
