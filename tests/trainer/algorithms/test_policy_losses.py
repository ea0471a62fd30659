"""The policy losses gspo, cispo and gpg (trainer.algorithms.policy_losses) against values and
gradients worked out by hand on tiny float64 tensors; the registry against the config schema; and
the four losses' common ground (at ratio 1 they all give the policy gradient -A grad log pi).
vanilla's hand-worked cases are in test_losses.py."""

import math
import typing

import pytest
import torch

from trainer.algorithms.policy_losses import (
    compute_policy_loss,
    compute_policy_loss_cispo,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    get_policy_loss,
    policy_loss_names,
)
from trainer.config import PolicyLossConfig

torch.set_num_threads(1)
D = torch.float64
E = math.exp


def test_registry_holds_the_four_losses_the_schema_offers():
    offered = typing.get_args(typing.get_type_hints(PolicyLossConfig)["loss_mode"])
    assert sorted(offered) == policy_loss_names() == [
        "cispo", "clip_cov", "geo_mean", "gpg", "gspo", "kl_cov", "sapo", "vanilla"]
    assert get_policy_loss("vanilla") is compute_policy_loss
    assert get_policy_loss("gspo") is compute_policy_loss_gspo
    assert get_policy_loss("cispo") is compute_policy_loss_cispo
    assert get_policy_loss("gpg") is compute_policy_loss_gpg


# -------------------------------------------------------------------------------------------- gspo
# Token log-ratios (log pi - log pi_old); row 1's last token is masked out (a huge value it must ignore).
GSPO_LOG_R = [[0.3, -0.1, 0.1], [0.2, 0.4, 5.0], [2.0, 2.0, 2.0]]
GSPO_MASK = [[1.0, 1, 1], [1, 1, 0], [1, 1, 1]]
GSPO_ADV = [1.0, 2.0, -1.0]  # one advantage per sequence (GRPO)


def _gspo_inputs():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.7, -1.1, -3.0], [-2.0, -0.2, -1.4]], dtype=D)
    logp = (old + torch.tensor(GSPO_LOG_R, dtype=D)).requires_grad_(True)
    mask = torch.tensor(GSPO_MASK, dtype=D)
    adv = torch.tensor(GSPO_ADV, dtype=D).unsqueeze(-1) * mask
    return old, logp, adv, mask


def test_gspo_sequence_ratio_loss_and_gradient_by_hand():
    old, logp, adv, mask = _gspo_inputs()
    out = compute_policy_loss_gspo(old, logp, adv, mask, clip_ratio=0.2)
    # s_i = exp(mean of the sequence's token log-ratios): e^0.1, e^0.3 (masked 5.0 ignored), e^2.
    s0, s1, s2 = E(0.1), E(0.3), E(2.0)
    # Row 0 (A=1): s0 = 1.105 inside [0.8, 1.2]: L = -s0 on each token.
    # Row 1 (A=2): s1 = 1.350 > 1.2: max(-2 s1, -2 * 1.2) = -2.4, clipped (no gradient).
    assert s1 > 1.2 and 0.8 < s0 < 1.2
    # Row 2 (A=-1): max(s2, 1.2) = e^2 = 7.39: no dual clip in GSPO (vanilla would cap it at c = 3).
    # seq-mean-token-mean: every token of a row carries the same loss, so each row's mean is it.
    assert out.pg_loss.item() == pytest.approx((-s0 - 2.4 + s2) / 3, abs=1e-12)
    assert out.loss_agg_mode == "seq-mean-token-mean"
    assert out.pg_clipfrac.item() == pytest.approx(2 / 8)  # row 1's two tokens, of 8 in the mask
    assert out.pg_clipfrac_lower.item() == 0.0
    assert out.ppo_kl.item() == pytest.approx(-(0.3 - 0.1 + 0.1 + 0.2 + 0.4 + 6.0) / 8, abs=1e-12)
    out.pg_loss.backward()
    # d/dlogp_t of (1/B)(1/|y_i|) sum_t -A_i s_i,t where s_i,t's gradient is s_i * dlogp_t (its own
    # token only): -A_i s_i / (B |y_i|).
    expected = torch.tensor([[-s0 / 9] * 3, [0.0, 0.0, 0.0], [s2 / 9] * 3], dtype=D)
    assert torch.allclose(logp.grad, expected, atol=1e-12)


def test_gspo_gradient_is_the_sequence_level_objective_gradient():
    # The GSPO-token construction: with one advantage per sequence its gradient is that of the
    # paper's sequence objective mean_i max(-A_i s_i, -A_i clip(s_i)) with s_i(theta) itself
    # differentiated (d s_i / d logp_t = s_i / |y_i|).
    old, logp, adv, mask = _gspo_inputs()
    compute_policy_loss_gspo(old, logp, adv, mask, clip_ratio=0.2).pg_loss.backward()
    token = logp.grad.clone()
    logp2 = logp.detach().clone().requires_grad_(True)
    s = torch.exp(((logp2 - old) * mask).sum(-1) / mask.sum(-1))
    a = torch.tensor(GSPO_ADV, dtype=D)
    torch.maximum(-a * s, -a * s.clamp(0.8, 1.2)).mean().backward()
    assert torch.allclose(token, logp2.grad, atol=1e-12)


def test_gspo_ignores_loss_agg_mode_and_dual_clip_as_verl():
    old, logp, adv, mask = _gspo_inputs()
    base = compute_policy_loss_gspo(old, logp, adv, mask, clip_ratio=0.2).pg_loss.item()
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"):
        out = compute_policy_loss_gspo(old, logp, adv, mask, clip_ratio=0.2, clip_ratio_c=1.5,
                                       loss_agg_mode=mode, loss_scale_factor=100)
        assert out.pg_loss.item() == pytest.approx(base, abs=1e-12) and out.loss_agg_mode == "seq-mean-token-mean"


def test_gspo_asymmetric_paper_clip_range():
    # The paper's (and verl's recipe) ranges: 3e-4 below, 4e-4 above.
    old = torch.zeros(2, 2, dtype=D)
    logp = torch.tensor([[5e-4, 5e-4], [-2e-4, -2e-4]], dtype=D, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=D)
    out = compute_policy_loss_gspo(old, logp, adv, torch.ones(2, 2, dtype=D),
                                   clip_ratio=0.2, clip_ratio_low=3e-4, clip_ratio_high=4e-4)
    # Row 0: s = e^5e-4 > 1 + 4e-4, A > 0: clipped at -1.0004. Row 1: s = e^-2e-4 > 1 - 3e-4, A < 0:
    # max(s, 0.9997) = s, unclipped.
    assert out.pg_loss.item() == pytest.approx((-1.0004 + E(-2e-4)) / 2, abs=1e-12)
    assert out.pg_clipfrac.item() == pytest.approx(0.5)
    out.pg_loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.0, 0.0], [E(-2e-4) / 4] * 2], dtype=D), atol=1e-12)


def test_gspo_log_ratio_clamped_above_at_10():
    old = torch.zeros(1, 2, dtype=D)
    logp = torch.tensor([[12.0, 12.0]], dtype=D, requires_grad=True)
    adv = torch.tensor([[-1.0, -1.0]], dtype=D)
    out = compute_policy_loss_gspo(old, logp, adv, torch.ones(1, 2, dtype=D))
    assert out.pg_loss.item() == pytest.approx(E(10.0))  # max(e^10, 1.2): the clamp, then exp
    out.pg_loss.backward()
    assert logp.grad.abs().sum().item() == 0.0  # the clamp passes no gradient


# ------------------------------------------------------------------------------------------- cispo
CISPO_RATIOS = [1.5, 0.5, 1.0, 0.9]
CISPO_ADV = [1.0, 1.0, -1.0, -2.0]


def _cispo_inputs():
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=D)
    logp = (old + torch.log(torch.tensor([CISPO_RATIOS], dtype=D))).requires_grad_(True)
    return old, logp, torch.tensor([CISPO_ADV], dtype=D), torch.ones(1, 4, dtype=D)


def test_cispo_clipped_weight_times_log_prob_by_hand():
    old, logp, adv, mask = _cispo_inputs()
    out = compute_policy_loss_cispo(old, logp, adv, mask, clip_ratio=0.2)
    w = [1.2, 0.8, 1.0, 0.9]  # clip(r, 0.8, 1.2), a constant
    lp = logp.detach()[0].tolist()
    assert out.pg_loss.item() == pytest.approx(sum(-w[t] * CISPO_ADV[t] * lp[t] for t in range(4)) / 4,
                                               abs=1e-12)
    assert out.loss_agg_mode == "token-mean"
    assert out.pg_clipfrac.item() == pytest.approx(2 / 4)  # 1.5 and 0.5 were clipped
    assert out.pg_clipfrac_lower.item() == 0.0
    assert out.ppo_kl.item() == pytest.approx(-sum(math.log(r) for r in CISPO_RATIOS) / 4, abs=1e-12)
    out.pg_loss.backward()
    # -w A / 4 on every token: the clipped token 0 (r = 1.5 > 1.2, A > 0) keeps its gradient.
    expected = torch.tensor([[-w[t] * CISPO_ADV[t] / 4 for t in range(4)]], dtype=D)
    assert torch.allclose(logp.grad, expected, atol=1e-12)
    # vanilla PPO gives that token none.
    logp_v = logp.detach().clone().requires_grad_(True)
    compute_policy_loss(old, logp_v, adv, mask, clip_ratio=0.2).pg_loss.backward()
    assert logp_v.grad[0, 0].item() == 0.0 and logp.grad[0, 0].item() == pytest.approx(-0.3)


def test_cispo_without_lower_bound_and_aggregation():
    old, logp, adv, mask = _cispo_inputs()
    # The paper leaves the weight unbounded below: clip_ratio_low=1 makes the floor 0.
    out = compute_policy_loss_cispo(old, logp, adv, mask, clip_ratio_low=1.0, clip_ratio_high=0.2,
                                    loss_agg_mode="seq-mean-token-sum")
    w = [1.2, 0.5, 1.0, 0.9]
    lp = logp.detach()[0].tolist()
    assert out.pg_loss.item() == pytest.approx(sum(-w[t] * CISPO_ADV[t] * lp[t] for t in range(4)), abs=1e-12)
    assert out.pg_clipfrac.item() == pytest.approx(1 / 4)
    out.pg_loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-w[t] * CISPO_ADV[t] for t in range(4)]], dtype=D))


def test_cispo_ignores_masked_tokens():
    old, logp, adv, mask = _cispo_inputs()
    a = compute_policy_loss_cispo(old, logp, adv, mask)
    pad = torch.tensor([[0.0]], dtype=D)
    b = compute_policy_loss_cispo(torch.cat([old, pad], 1), torch.cat([logp, pad - 40], 1),
                                  torch.cat([adv, pad + 9], 1), torch.cat([mask, pad], 1))
    assert b.pg_loss.item() == pytest.approx(a.pg_loss.item(), abs=1e-12)
    assert b.pg_clipfrac.item() == pytest.approx(a.pg_clipfrac.item())


# --------------------------------------------------------------------------------------------- gpg
def test_gpg_is_minus_advantage_times_log_prob():
    old = torch.zeros(2, 3, dtype=D)
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, -9.0]], dtype=D, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, 0.0]], dtype=D)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]], dtype=D)
    out = compute_policy_loss_gpg(old, logp, adv, mask, clip_ratio=0.2)
    # token-mean over 5 tokens of -A logp: (1 + 2 + 0.5 + 0.5 * -0.3 + 0.5 * -4) / 5
    assert out.pg_loss.item() == pytest.approx((3.5 - 0.15 - 2.0) / 5, abs=1e-12)
    assert out.metrics() == {}  # verl's gpg reports no clip fraction or KL
    out.pg_loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-0.2, -0.2, -0.2], [0.1, 0.1, 0.0]], dtype=D))
    # old_log_prob plays no part; loss_agg_mode applies.
    again = compute_policy_loss_gpg(old - 3, logp, adv, mask, loss_agg_mode="seq-mean-token-sum")
    assert again.pg_loss.item() == pytest.approx((3.5 + (-0.15 - 2.0)) / 2, abs=1e-12)


# -------------------------------------------------------------------------------------- all four
def test_metric_names_are_verls():
    old, logp, adv, mask = _cispo_inputs()
    names = {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    for name in ("vanilla", "gspo", "cispo"):
        assert set(get_policy_loss(name)(old, logp, adv, mask).metrics()) == names
    assert set(get_policy_loss("clip_cov")(old, logp, adv, mask).metrics()) == {"actor/pg_clipfrac", "actor/ppo_kl"}
    assert set(get_policy_loss("kl_cov")(old, logp, adv, mask).metrics()) == {"actor/ppo_kl"}


@pytest.mark.parametrize("name", ["vanilla", "gspo", "cispo", "gpg", "clip_cov", "kl_cov"])
def test_on_policy_every_loss_gives_the_policy_gradient(name):
    # At ratio 1 (old == current, the first micro-batch of a step) nothing is clipped and each loss's
    # gradient is -A grad(log pi) under the same aggregation (seq-mean-token-mean, GSPO's). kl_cov's
    # penalty |log r| has gradient 0 at r = 1; clip_cov is given bounds no token's covariance is in
    # (its cut tokens have no gradient, on policy too).
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(3, 5, generator=g, dtype=D) * 3).requires_grad_(True)
    mask = torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0], [0, 1, 1, 1, 1]], dtype=D)
    adv = torch.tensor([[0.7], [-1.3], [0.4]], dtype=D) * mask
    extra = {"clip_cov_lb": 100.0, "clip_cov_ub": 101.0} if name == "clip_cov" else {}
    out = get_policy_loss(name)(logp.detach(), logp, adv, mask, loss_agg_mode="seq-mean-token-mean", **extra)
    out.pg_loss.backward()
    expected = -adv / mask.sum(-1, keepdim=True) / 3 * mask
    assert torch.allclose(logp.grad, expected, atol=1e-12)
