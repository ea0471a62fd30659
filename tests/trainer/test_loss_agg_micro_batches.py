"""Every loss_agg_mode gives the same loss and gradients whatever the micro-batch size (issue 17).

Through the actor's own code path (ActorWorker.update_policy on the tiny model): one 8-row batch of
4 prompts x 2 samples (shared-prompt forward), responses of different lengths (each micro-batch is cut
to its longest response), a tool reply masked out of one row and one row with no trained token.
"""
from __future__ import annotations

import pytest
import torch

from trainer.workers.actor import ActorWorker
from trainer.workers.experience import make_batch

from tests.trainer.actor_probe import actor_cfg, update_grads

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
MICRO = (1, 2, 4, 8)


def batch8():
    g = torch.Generator().manual_seed(0)
    prompts = []
    for n in (5, 9, 3, 7):
        p = torch.randint(10, 200, (n,), generator=g).tolist()
        prompts += [p, p]
    lens = [6, 2, 8, 4, 3, 7, 5, 1]
    responses = [torch.randint(10, 200, (n,), generator=g).tolist() for n in lens]
    masks = [[1] * n for n in lens]
    masks[2] = [1, 1, 0, 0, 0, 1, 1, 1]  # a tool reply in the middle of a multi-turn response
    masks[5] = [0] * 7  # nothing trained in this row (e.g. a response that is all tool reply)
    b = make_batch(prompts, responses, masks, uids=["a", "a", "b", "b", "c", "c", "d", "d"])
    b.advantages = torch.randn(8, b.response_width, generator=g) * b.loss_mask
    b.ref_log_probs = (-3.0 + 0.3 * torch.randn(8, b.response_width, generator=g)) * b.response_mask
    return b


@pytest.fixture(scope="module")
def worker(tiny_model_dir):
    return ActorWorker(model_path=str(tiny_model_dir), device=torch.device("cpu"), dtype=torch.float32,
                       actor_cfg=actor_cfg(), trainable=True, total_steps=10)


def _run(worker, batch, **kw):
    """{micro: (pg_loss, kl_loss, flat gradient)} over the micro-batch sizes."""
    out = {}
    try:
        for micro in MICRO:
            worker.cfg = actor_cfg(ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=micro, grad_clip=1e9, **kw)
            grads, m = update_grads(worker, batch)
            flat = torch.cat([g.flatten() for g in grads.values()])
            out[micro] = (m["actor/pg_loss"][0], m.get("actor/kl_loss", [0.0])[0], flat)
    finally:
        worker.cfg = actor_cfg()
    return out


def _assert_same(out, label, pg_abs=1e-9):
    pg8, kl8, g8 = out[8]
    assert g8.norm() > 0, label
    for micro, (pg, kl, g) in out.items():
        assert pg == pytest.approx(pg8, rel=1e-5, abs=pg_abs), (label, micro)
        assert kl == pytest.approx(kl8, rel=1e-5, abs=1e-9), (label, micro)
        # float32 sums in another order: ~1e-7 relative; the bug this guards against was 0.75.
        assert float((g - g8).norm() / g8.norm()) < 1e-5, (label, micro)


@pytest.mark.parametrize("mode", MODES)
def test_loss_and_gradient_do_not_depend_on_the_micro_batch_size(worker, mode):
    _assert_same(_run(worker, batch8(), loss_agg_mode=mode), mode)


def test_entropy_and_kl_terms_use_the_same_aggregation(worker):
    for mode in ("seq-mean-token-sum-norm", "token-mean"):
        _assert_same(_run(worker, batch8(), loss_agg_mode=mode, use_kl_loss=True, kl_loss_coef=0.5,
                          entropy_coeff=0.01), mode)


def test_seq_mean_token_sum_norm_is_seq_mean_token_sum_over_a_constant(worker):
    # The constant is actor.loss_scale_factor, or the rollout's response length when unset (resolve).
    b = batch8()
    assert actor_cfg().loss_scale_factor == 512  # data.max_response_length's default, via resolve
    total = _run(worker, b, loss_agg_mode="seq-mean-token-sum")[1]
    norm = _run(worker, b, loss_agg_mode="seq-mean-token-sum-norm")[1]
    assert norm[0] * 512 == pytest.approx(total[0], rel=1e-5)
    assert float((norm[2] * 512 - total[2]).norm() / total[2].norm()) < 1e-5
    fixed = _run(worker, b, loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=64)
    assert fixed[1][0] * 64 == pytest.approx(total[0], rel=1e-5)
    _assert_same(fixed, "loss_scale_factor=64")


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo", "cispo", "gpg", "geo_mean", "sapo"])
def test_every_policy_loss_is_micro_batch_invariant_off_policy(worker, loss_mode):
    # Old log-probs 0.1-0.3 nats off the current ones, so clipping acts; token-mean with KL and
    # entropy terms while gspo's and sapo's policy terms are seq-mean-token-mean and geo_mean's a mean
    # over rows: each term keeps its own share.
    b = batch8()
    logp, _ = worker.compute_log_prob(b, with_entropy=False)
    g = torch.Generator().manual_seed(1)
    b.old_log_probs = (logp + 0.3 * torch.randn(logp.shape, generator=g)) * b.response_mask
    out = _run(worker, b, policy_loss={"loss_mode": loss_mode}, loss_agg_mode="token-mean",
               use_kl_loss=True, kl_loss_coef=0.5, entropy_coeff=0.01, clip_ratio=0.1)
    # pg_loss sums per-row terms of order 1 to a value of order 1e-2: float32 in another order
    # differs by ~1e-7 absolute.
    _assert_same(out, loss_mode, pg_abs=1e-6)


def test_the_actor_hands_sapo_its_temperatures(worker):
    # actor.tau_pos / tau_neg reach the loss through the actor's own update: off policy (ratios away
    # from 1) each one changes the loss; the defaults are verl's 1.0 / 1.05.
    b = batch8()
    logp, _ = worker.compute_log_prob(b, with_entropy=False)
    g = torch.Generator().manual_seed(2)
    b.old_log_probs = (logp + 0.5 * torch.randn(logp.shape, generator=g)) * b.response_mask

    def pg_loss(**taus):
        worker.cfg = actor_cfg(ppo_mini_batch_size=8, grad_clip=1e9, policy_loss={"loss_mode": "sapo"}, **taus)
        try:
            return update_grads(worker, b)[1]["actor/pg_loss"][0]
        finally:
            worker.cfg = actor_cfg()

    default = pg_loss()
    assert pg_loss(tau_pos=1.0, tau_neg=1.05) == pytest.approx(default, abs=1e-7)
    assert abs(pg_loss(tau_pos=4.0) - default) > 1e-4
    assert abs(pg_loss(tau_neg=4.0) - default) > 1e-4
