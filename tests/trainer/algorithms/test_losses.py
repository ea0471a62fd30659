"""Policy loss, aggregation, KL estimators, entropy and KL controllers against hand / float64 values."""

import math

import pytest
import torch

from trainer.algorithms.losses import (
    AdaptiveKLController,
    FixedKLController,
    agg_loss,
    apply_kl_penalty,
    entropy_from_log_probs,
    entropy_from_logits,
    entropy_from_logits_chunked,
    get_kl_controller,
    kl_penalty,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from trainer.algorithms.policy_losses import compute_policy_loss, get_policy_loss, policy_loss_names

torch.set_num_threads(1)
D = torch.float64


# ------------------------------------------------------------------------------------- aggregation
L = torch.tensor([[1.0, 2, 3, 0], [4, 5, 6, 7]], dtype=D)
M = torch.tensor([[1.0, 1, 0, 0], [1, 0, 0, 0]], dtype=D)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
        ("seq-mean-token-sum", (3 + 4) / 2),  # mean of per-row sums
        ("seq-mean-token-mean", (1.5 + 4) / 2),  # mean of per-row means
        ("seq-mean-token-sum-norm", (3 + 4) / 2 / 4),  # mean of per-row sums / padded width T
    ],
)
def test_agg_loss_modes(mode, expected):
    assert agg_loss(L, M, mode).item() == pytest.approx(expected, abs=1e-12)


def test_seq_mean_token_sum_norm_divides_by_the_given_constant_not_the_width():
    # verl: mean_i(sum_t L m) / loss_scale_factor; the width T is only the default.
    assert agg_loss(L, M, "seq-mean-token-sum-norm", 10).item() == pytest.approx(7 / 2 / 10)
    cut = agg_loss(L[:, :2], M[:, :2], "seq-mean-token-sum-norm", 4)  # a micro-batch cut to width 2
    assert cut.item() == pytest.approx(agg_loss(L, M, "seq-mean-token-sum-norm").item())
    # Per-row shares (what the actor weights micro-batches by) add up to the whole batch's value.
    rows = [agg_loss(L[i:i + 1, : int(M[i].nonzero().max()) + 1], M[i:i + 1, : int(M[i].nonzero().max()) + 1],
                     "seq-mean-token-sum-norm", 4) / 2 for i in range(2)]
    assert sum(r.item() for r in rows) == pytest.approx(7 / 8)
    # Policy and the other terms take the same constant.
    old = torch.zeros(2, 4, dtype=D)
    out = compute_policy_loss(old, old, -L, M, loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=10)
    assert out.pg_loss.item() == pytest.approx(7 / 2 / 10)
    with pytest.raises(ValueError, match="loss_scale_factor"):
        agg_loss(L, M, "seq-mean-token-sum-norm", 0)


def test_masked_sum_ignores_nan_under_the_mask():
    values = torch.tensor([[1.0, float("nan")], [float("inf"), 2.0]], dtype=D)
    mask = torch.tensor([[1.0, 0], [0, 1]], dtype=D)
    assert masked_sum(values, mask).item() == 3.0
    torch.testing.assert_close(masked_sum(values, mask, axis=-1), torch.tensor([1.0, 2.0], dtype=D))
    assert masked_mean(values, mask).item() == 1.5
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        assert torch.isfinite(agg_loss(values, mask, mode)), mode


def test_every_seq_mean_counts_empty_rows_and_unknown_mode_raises():
    """A row without trained tokens counts 0 in every seq-mean, as in verl's loss over its
    global_batch_size rows (rows of L: 1 2 3 4 / 5 6 7 8)."""
    mask = torch.tensor([[1.0, 1, 0, 0], [0, 0, 0, 0]], dtype=D)
    assert agg_loss(L, mask, "seq-mean-token-mean").item() == pytest.approx(1.5 / 2)
    assert agg_loss(L, mask, "seq-mean-token-sum").item() == pytest.approx(3 / 2)
    assert agg_loss(L, mask, "seq-mean-token-sum-norm", 4).item() == pytest.approx(3 / 2 / 4)
    assert agg_loss(L, mask, "token-mean").item() == pytest.approx(1.5)
    with pytest.raises(ValueError, match="token-mean"):
        agg_loss(L, M, "mean")


def test_masked_stats():
    values = torch.tensor([[1.0, 2, 100], [3, 4, 100]], dtype=D)
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 0]], dtype=D)
    assert masked_mean(values, mask).item() == pytest.approx(2.5)
    torch.testing.assert_close(
        masked_mean(values, mask, axis=-1), torch.tensor([1.5, 3.5], dtype=D)
    )
    assert masked_var(values, mask).item() == pytest.approx(5 / 3)  # unbiased var of 1..4
    w = masked_whiten(values, mask)
    torch.testing.assert_close(
        w[mask.bool()], (torch.tensor([1.0, 2, 3, 4], dtype=D) - 2.5) / math.sqrt(5 / 3 + 1e-8)
    )
    assert masked_mean(values, torch.zeros_like(mask)).item() == 0.0
    with pytest.raises(ValueError):
        masked_var(values, torch.zeros_like(mask))


# ------------------------------------------------------------------------------------- policy loss
RATIOS = [1.5, 0.5, 0.5, 5.0, 1.1]
ADV = [1.0, 1.0, -1.0, -1.0, -2.0]


def _pg_inputs():
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.2]], dtype=D)
    logp = old + torch.log(torch.tensor([RATIOS], dtype=D))
    adv = torch.tensor([ADV], dtype=D)
    return old, logp, adv, torch.ones_like(adv)


def test_policy_loss_clip_and_dual_clip_by_hand():
    old, logp, adv, mask = _pg_inputs()
    out = compute_policy_loss(old, logp, adv, mask, clip_ratio=0.2, clip_ratio_c=3.0)
    # per token: max(-A r, -A clip(r, .8, 1.2)), then min(., 3|A|) where A < 0
    # 1: max(-1.5, -1.2) = -1.2 (clipped)   2: max(-0.5, -0.8) = -0.5
    # 3: max(0.5, 0.8) = 0.8 (clipped)       4: max(5, 1.2) = 5 -> dual clip 3
    # 5: max(2.2, 2.2) = 2.2
    assert out.pg_loss.item() == pytest.approx((-1.2 - 0.5 + 0.8 + 3.0 + 2.2) / 5, abs=1e-12)
    assert out.pg_clipfrac.item() == pytest.approx(2 / 5)
    assert out.pg_clipfrac_lower.item() == pytest.approx(1 / 5)
    assert out.ppo_kl.item() == pytest.approx(-sum(math.log(r) for r in RATIOS) / 5, abs=1e-12)


def test_policy_loss_asymmetric_clip():
    old, logp, adv, mask = _pg_inputs()
    out = compute_policy_loss(
        old,
        logp,
        adv,
        mask,
        clip_ratio=0.2,
        clip_ratio_low=0.1,
        clip_ratio_high=0.3,
        clip_ratio_c=3.0,
    )
    # 1: clip(1.5) = 1.3 -> max(-1.5, -1.3) = -1.3;  3: clip(.5) = .9 -> max(.5, .9) = .9
    assert out.pg_loss.item() == pytest.approx((-1.3 - 0.5 + 0.9 + 3.0 + 2.2) / 5, abs=1e-12)


def test_policy_loss_ignores_masked_tokens_and_seq_mode():
    old, logp, adv, mask = _pg_inputs()
    old2 = torch.cat([old, torch.tensor([[0.0]], dtype=D)], dim=1)
    logp2 = torch.cat([logp, torch.tensor([[-50.0]], dtype=D)], dim=1)
    adv2 = torch.cat([adv, torch.tensor([[7.0]], dtype=D)], dim=1)
    mask2 = torch.cat([mask, torch.zeros(1, 1, dtype=D)], dim=1)
    a = compute_policy_loss(old, logp, adv, mask)
    b = compute_policy_loss(old2, logp2, adv2, mask2)
    assert b.pg_loss.item() == pytest.approx(a.pg_loss.item(), abs=1e-12)
    assert b.ppo_kl.item() == pytest.approx(a.ppo_kl.item(), abs=1e-12)
    s = compute_policy_loss(old, logp, adv, mask, loss_agg_mode="seq-mean-token-sum")
    assert s.pg_loss.item() == pytest.approx(-1.2 - 0.5 + 0.8 + 3.0 + 2.2, abs=1e-12)


def test_policy_loss_log_ratio_clamped_and_gradient():
    old = torch.zeros(1, 2, dtype=D)
    logp = torch.tensor([[30.0, 0.1]], dtype=D, requires_grad=True)
    adv = torch.tensor([[-1.0, 1.0]], dtype=D)
    out = compute_policy_loss(old, logp, adv, torch.ones(1, 2, dtype=D), clip_ratio_c=3.0)
    assert math.isfinite(out.pg_loss.item())
    assert out.ppo_kl.item() == pytest.approx(-(20.0 + 0.1) / 2)  # clamped at 20
    out.pg_loss.backward()
    # token 1: ratio e^0.1 = 1.105 inside [0.8, 1.2]: d(-A r)/dlogp = -A r / 2 (token mean)
    assert logp.grad[0, 1].item() == pytest.approx(-math.exp(0.1) / 2)
    assert logp.grad[0, 0].item() == 0.0  # dual-clipped constant


def test_policy_loss_registry_and_bad_dual_clip():
    assert "vanilla" in policy_loss_names()
    assert get_policy_loss("vanilla") is compute_policy_loss
    with pytest.raises(ValueError, match="unknown policy loss"):
        get_policy_loss("nope")
    old, logp, adv, mask = _pg_inputs()
    with pytest.raises(ValueError, match="clip_ratio_c"):
        compute_policy_loss(old, logp, adv, mask, clip_ratio_c=1.0)


# ---------------------------------------------------------------------------------------------- KL
X = [-30.0, -2.0, -0.3, 0.0, 0.4, 1.5, 25.0]  # logp - ref_logp


def _kl_ref(name, x):
    if name in ("kl", "k1"):
        return x
    if name == "abs":
        return abs(x)
    if name in ("mse", "k2"):
        return 0.5 * x * x
    neg = min(max(-x, -20.0), 20.0)
    return min(max(math.exp(neg) - neg - 1.0, -10.0), 10.0)


@pytest.mark.parametrize("name", ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"])
def test_kl_estimators_match_float64_formulas(name):
    ref = torch.full((1, len(X)), -1.0, dtype=torch.float32)
    logp = ref + torch.tensor([X], dtype=torch.float32)
    got = kl_penalty(logp, ref, name).double()
    expected = torch.tensor([[_kl_ref(name, x) for x in X]], dtype=D)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["k3", "low_var_kl", "k1", "abs"])
def test_a_trailing_plus_keeps_the_value_and_takes_k2s_gradient(name):
    """verl's straight-through estimators: "k3+" is k3's value with the gradient of k2 = x^2 / 2 (x)."""
    ref = torch.full((1, len(X)), -1.0, dtype=D)
    logp = (ref + torch.tensor([X], dtype=D)).requires_grad_(True)
    got = kl_penalty(logp, ref, name + "+")
    torch.testing.assert_close(got.detach(), kl_penalty(logp, ref, name).detach())
    got.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([X], dtype=D))
    with pytest.raises(ValueError, match="unknown kl_penalty 'full\\+'"):
        kl_penalty(ref, ref, "full+")


def test_the_plus_estimators_are_config_choices():
    from trainer.config import Config, ConfigError, apply_overrides

    cfg = apply_overrides(Config(), ["actor_rollout_ref.actor.kl_loss_type=k3+", "algorithm.kl_penalty=low_var_kl+"])
    assert (cfg.actor_rollout_ref.actor.kl_loss_type, cfg.algorithm.kl_penalty) == ("k3+", "low_var_kl+")
    with pytest.raises(ConfigError, match="kl_loss_type"):
        apply_overrides(Config(), ["actor_rollout_ref.actor.kl_loss_type=k9+"])


def test_low_var_kl_clamps():
    ref = torch.zeros(1, 3, dtype=D)
    got = kl_penalty(torch.tensor([[-30.0, 25.0, -2.0]], dtype=D), ref, "low_var_kl")
    assert got[0, 0].item() == 10.0  # e^20 - 21 clamped
    assert got[0, 1].item() == 10.0  # e^-20 + 19 clamped
    assert got[0, 2].item() == pytest.approx(math.exp(2) - 3)  # not clamped
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(ref, ref, "full")


def test_apply_kl_penalty_in_reward():
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=D)
    old = torch.tensor([[-1.0, -1.0], [-2.0, -1.0]], dtype=D)
    ref = torch.tensor([[-1.5, -1.0], [-1.0, -9.0]], dtype=D)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]], dtype=D)
    ctrl = FixedKLController(0.1)
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, ctrl, "kl")
    # kl = old - ref masked: [[0.5, 0], [-1, 0]]
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 1.0], [0.1, 0.0]], dtype=D))
    assert metrics["actor/reward_kl_penalty"] == pytest.approx((0.25 + -1.0) / 2)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    assert ctrl.value == 0.1


def test_adaptive_kl_controller_update_rule():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=10000)
    ctrl.update(current_kl=0.15, n_steps=100)  # error 0.5 clipped to 0.2
    assert ctrl.value == pytest.approx(0.1 * (1 + 0.2 * 100 / 10000))
    before = ctrl.value
    ctrl.update(current_kl=0.09, n_steps=100)  # error -0.1
    assert ctrl.value == pytest.approx(before * (1 - 0.1 * 100 / 10000))
    ctrl.update(current_kl=0.0, n_steps=10000)  # error -1 clipped to -0.2
    assert ctrl.value == pytest.approx(before * (1 - 0.1 * 0.01) * 0.8)
    built = get_kl_controller(
        {"type": "adaptive", "kl_coef": 0.2, "target_kl": 0.05, "horizon": 50}
    )
    assert isinstance(built, AdaptiveKLController) and built.value == 0.2 and built.horizon == 50
    from trainer.config import KLCtrlConfig

    assert isinstance(get_kl_controller(KLCtrlConfig()), FixedKLController)


# ----------------------------------------------------------------------------------------- entropy
def test_entropy_matches_float64_reference():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=gen) * 4
    got = entropy_from_logits(logits)
    p = torch.softmax(logits.double(), dim=-1)
    expected = -(p * torch.log(p)).sum(-1)
    assert got.shape == (3, 5)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy_from_logits_chunked(logits, chunk_size=4), got)
    uniform = entropy_from_logits(torch.zeros(1, 1, 8))
    assert uniform.item() == pytest.approx(math.log(8), abs=1e-6)


def test_entropy_from_log_probs_matches_float64_reference_even_with_underflowing_probs():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 13, generator=gen) * 4
    logits[0, 0, 0] = 120.0  # every other probability underflows to 0 in float32: 0 * log p must be 0
    p = torch.softmax(logits.double(), dim=-1)
    expected = -(torch.special.xlogy(p, p)).sum(-1)
    got = entropy_from_log_probs(torch.log_softmax(logits, dim=-1))
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
