"""trainer.workers: log-probs with local padding equal an unpadded forward; the update honours the loss
mask (tool tokens), micro-batch accumulation, the on-policy skip, checkpoint state round-trips."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from trainer.workers.actor import ActorWorker
from trainer.workers.optim import lr_lambda_factory
from trainer.workers.experience import make_batch, token_budget_chunks

from tests.trainer.actor_probe import actor_cfg, update_grads


def toy_batch():
    g = torch.Generator().manual_seed(0)
    lens_p, lens_r = [5, 9, 3, 7], [6, 2, 8, 4]
    prompts = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens_p]
    responses = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens_r]
    masks = [[1] * n for n in lens_r]
    masks[2] = [1, 1, 0, 0, 0, 1, 1, 1]  # a tool reply in the middle of a multi-turn response
    return make_batch(prompts, responses, masks, uids=["a", "a", "b", "b"])


@pytest.fixture(scope="module")
def worker(tiny_model_dir):
    return ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                       actor_cfg=actor_cfg(), trainable=True, temperature=0.7, total_steps=10)


def test_log_probs_match_unpadded_forward(worker):
    batch = toy_batch()
    for micro in (None, 1, 3):
        worker.log_prob_micro = micro
        logp, ent = worker.compute_log_prob(batch)
        assert logp.shape == (4, 8) and ent.shape == (4, 8)
        for i in range(4):
            ids = torch.tensor([batch.prompt_ids[i] + batch.response_ids[i]])
            with torch.no_grad():
                logits = worker.model(input_ids=ids).logits[0].float() / 0.7
            p, r = len(batch.prompt_ids[i]), len(batch.response_ids[i])
            want = torch.log_softmax(logits[p - 1:p + r - 1], -1).gather(-1, ids[0, p:].unsqueeze(-1)).squeeze(-1)
            assert torch.allclose(logp[i, :r], want, atol=1e-5), (micro, i)
            assert torch.all(logp[i, r:] == 0)
    worker.log_prob_micro = None


def test_masked_tool_tokens_do_not_reach_the_gradient(worker):
    b1 = toy_batch()
    b1.advantages = torch.randn(4, 8, generator=torch.Generator().manual_seed(1)) * b1.loss_mask
    b2 = dataclasses.replace(b1, advantages=b1.advantages.clone())
    b2.advantages[2, 2:5] = 100.0  # huge advantages on the tool-reply tokens (loss mask 0)
    g1, m1 = update_grads(worker, b1)
    g2, _ = update_grads(worker, b2)
    assert all(torch.allclose(g1[n], g2[n], atol=1e-7) for n in g1)
    assert m1["actor/grad_norm"][0] > 0
    b3 = dataclasses.replace(b1, advantages=b1.advantages.clone())
    b3.advantages[2, 0] += 1.0  # a trained token: the gradient must change
    g3, _ = update_grads(worker, b3)
    assert any(not torch.allclose(g1[n], g3[n], atol=1e-7) for n in g1)


def test_micro_batches_accumulate_to_the_full_batch_gradient(worker):
    worker.cfg = actor_cfg(loss_agg_mode="seq-mean-token-sum")
    try:
        b = toy_batch()
        b.advantages = torch.randn(4, 8, generator=torch.Generator().manual_seed(2)) * b.loss_mask
        full, _ = update_grads(worker, b)
        worker.cfg = actor_cfg(loss_agg_mode="seq-mean-token-sum", ppo_micro_batch_size_per_gpu=1)
        micro, m = update_grads(worker, b)
        assert len(m["actor/pg_clipfrac"]) == 4 and len(m["actor/pg_loss"]) == 1  # per micro / per mini-batch
        for n in full:
            assert torch.allclose(full[n], micro[n], atol=1e-6, rtol=1e-4), n
        worker.cfg = actor_cfg(loss_agg_mode="seq-mean-token-sum", use_dynamic_bsz=True, ppo_max_token_len_per_gpu=24)
        dyn, _ = update_grads(worker, b)
        for n in full:
            assert torch.allclose(full[n], dyn[n], atol=1e-6, rtol=1e-4), n
    finally:
        worker.cfg = actor_cfg()


def test_on_policy_skip_equals_recomputed_old_log_probs(tiny_model_dir):
    def fresh():
        return ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                           actor_cfg=actor_cfg(), trainable=True, total_steps=10)

    b_skip, b_rec = toy_batch(), toy_batch()
    adv = torch.randn(4, 8, generator=torch.Generator().manual_seed(3)) * b_skip.loss_mask
    b_skip.advantages, b_rec.advantages = adv.clone(), adv.clone()
    w1, w2 = fresh(), fresh()
    b_rec.old_log_probs, _ = w2.compute_log_prob(b_rec)
    m1 = w1.update_policy(b_skip, mini_batch_size=4, capture=True)
    m2 = w2.update_policy(b_rec, mini_batch_size=4)
    assert torch.allclose(b_skip.old_log_probs, b_rec.old_log_probs, atol=1e-5)
    assert m1["actor/pg_clipfrac"] == [0.0] and abs(m1["actor/ppo_kl"][0]) < 1e-12
    assert abs(m1["actor/pg_loss"][0] - m2["actor/pg_loss"][0]) < 1e-5
    for (n, p1), (_, p2) in zip(w1.model.named_parameters(), w2.model.named_parameters()):
        assert torch.allclose(p1, p2, atol=1e-5), n
    assert w1.last_entropy is not None and w1.last_entropy.shape == (4, 8)
    with pytest.raises(ValueError, match="one mini-batch"):
        w1.update_policy(dataclasses.replace(b_skip, old_log_probs=None), mini_batch_size=2)


def test_non_finite_gradient_skips_the_step(worker):
    b = toy_batch()
    b.advantages = torch.full((4, 8), float("nan")) * b.loss_mask
    before = {n: p.detach().clone() for n, p in worker.model.named_parameters()}
    m = worker.update_policy(b, mini_batch_size=4)
    assert m["actor/skipped_steps"] == [1.0]
    assert all(torch.equal(before[n], p) for n, p in worker.model.named_parameters())


def test_reference_worker_is_frozen_and_state_round_trips(tiny_model_dir, worker):
    ref = ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32, trainable=False)
    assert all(not p.requires_grad for p in ref.model.parameters())
    with pytest.raises(RuntimeError, match="frozen"):
        ref.update_policy(toy_batch(), mini_batch_size=4)
    state = worker.state_dict()
    assert {"model", "optimizer", "scheduler"} <= set(state)
    names = [n for n, _ in worker.named_tensors()]
    assert len(names) == len(set(names)) and all(n in state["model"] for n in names)


def test_lr_schedule_and_token_budget():
    const = lr_lambda_factory(warmup_steps=2, total_steps=10, style="constant", min_lr_ratio=0.0)
    assert [const(s) for s in range(4)] == [0.0, 0.5, 1.0, 1.0]
    cos = lr_lambda_factory(warmup_steps=0, total_steps=4, style="cosine", min_lr_ratio=0.1)
    assert cos(0) == pytest.approx(1.0) and cos(2) == pytest.approx(0.55) and cos(4) == pytest.approx(0.1)
    chunks = token_budget_chunks([10, 3, 8, 5, 30], max_tokens=16)
    assert sorted(i for c in chunks for i in c) == [0, 1, 2, 3, 4]
    assert chunks[-1] == [4]  # longer than the budget: alone, never dropped
    assert all(len(c) * max([10, 3, 8, 5, 30][i] for i in c) <= 16 for c in chunks[:-1])


def test_gradient_checkpointing_recomputes_and_gives_the_same_gradient(tiny_model_dir, worker):
    """model.enable_gradient_checkpointing: the update keeps few activations for backward (transformers
    checkpoints only in training mode, so the update runs in train mode with every dropout rate at 0;
    in eval mode the option did nothing), the gradient is the one without checkpointing, and the model
    is back in eval mode after the update (the rollout engine generates with it, with its KV cache)."""
    ckpt = ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                       actor_cfg=actor_cfg(), trainable=True, temperature=0.7, total_steps=10,
                       gradient_checkpointing=True)
    b = toy_batch()
    b.advantages = torch.randn(4, 8, generator=torch.Generator().manual_seed(3)) * b.loss_mask

    def grads_and_saved(w):
        saved = [0]

        def pack(t):
            saved[0] += 1
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            grads, _ = update_grads(w, b)
        return grads, saved[0]

    want, saved_plain = grads_and_saved(worker)
    got, saved_ckpt = grads_and_saved(ckpt)
    assert saved_ckpt < saved_plain / 2, (saved_ckpt, saved_plain)  # activations recomputed, not kept
    for n in want:
        assert torch.allclose(want[n], got[n], atol=1e-6, rtol=1e-4), n
    assert not ckpt.model.training
