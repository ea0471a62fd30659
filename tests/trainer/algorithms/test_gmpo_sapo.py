"""The policy losses geo_mean (GMPO) and sapo (SAPO) (trainer.algorithms.policy_losses) against values
and gradients worked out by hand on tiny float64 tensors: masks, all-equal (zero) advantages, the clip
bounds, rollout correction's weights, and their on-policy gradient (-A grad log pi, as every loss)."""

import math

import pytest
import torch

from trainer.algorithms.policy_losses import (
    ACTOR_LOSS_KEYS,
    compute_policy_loss_geo_mean,
    compute_policy_loss_sapo,
    get_policy_loss,
    loss_mode_options,
)
from trainer.config import ActorConfig, PolicyLossConfig

torch.set_num_threads(1)
D = torch.float64
E = math.exp


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + E(-x))


def _inputs(log_r, mask, adv):
    """old log-probs, current log-probs (old + log_r, requiring grad), advantages, mask; (B, T)."""
    mask = torch.tensor(mask, dtype=D)
    old = -torch.arange(1, mask.numel() + 1, dtype=D).reshape(mask.shape) / 10
    logp = (old + torch.tensor(log_r, dtype=D)).requires_grad_(True)
    return old, logp, torch.tensor(adv, dtype=D), mask


# ----------------------------------------------------------------------------------------- geo_mean
# Row 0: A = +1 on each token; row 1: A = -2, its last token masked out (log r 9, A 100: both ignored);
# row 2: A = 0 (an all-equal group); row 3: no trained token at all.
GEO_LOG_R = [[0.1, 0.5, -0.6], [0.3, -0.5, 9.0], [1.0, 1.0, 1.0], [0.4, 0.4, 0.4]]
GEO_MASK = [[1.0, 1, 1], [1, 1, 0], [1, 1, 1], [0, 0, 0]]
GEO_ADV = [[1.0, 1, 1], [-2, -2, 100], [0, 0, 0], [0, 0, 0]]


def test_geo_mean_loss_metrics_and_gradient_by_hand():
    old, logp, adv, mask = _inputs(GEO_LOG_R, GEO_MASK, GEO_ADV)
    out = compute_policy_loss_geo_mean(old, logp, adv, mask, clip_ratio=0.2)
    # Row 0 (A > 0): clamp(x, -0.2, 0.2) = [0.1, 0.2, -0.2]; min(x, clamp) = [0.1, 0.2, -0.6] (only the
    # upper side limits a positive advantage); mean -0.1, ratio e^-0.1, L0 = -e^-0.1.
    # Row 1 (A < 0): clamp = [0.2, -0.2]; max(x, clamp) = [0.3, -0.2]; mean 0.05, L1 = 2 e^0.05.
    # Row 2 (A = 0): x' = 0, ratio 1, L2 = 0. Row 3 (no tokens): ratio 1, A 0, L3 = 0.
    # pg_loss: the mean over all 4 rows (verl's torch.mean).
    assert out.pg_loss.item() == pytest.approx((-E(-0.1) + 2 * E(0.05)) / 4, abs=1e-12)
    # 8 trained tokens. Outside [-0.2, 0.2]: row 0's 0.5 and -0.6 (A > 0: pg_clipfrac, -0.6 counted
    # though its own value was kept, as verl), row 1's 0.3 and -0.5 (A < 0: pg_clipfrac_lower); row 2's
    # tokens are outside too but A = 0 counts in neither.
    assert out.pg_clipfrac.item() == pytest.approx(2 / 8)
    assert out.pg_clipfrac_lower.item() == pytest.approx(2 / 8)
    # ppo_kl = mean(-x) over the trained tokens: -(0.1 + 0.5 - 0.6 + 0.3 - 0.5 + 3 * 1.0) / 8
    assert out.ppo_kl.item() == pytest.approx(-2.8 / 8, abs=1e-12)
    out.pg_loss.backward()
    # dL0/dlogp_t = -e^-0.1 / 3 where x' follows x (tokens 0 and 2), 0 at the clamped token 1;
    # dL1/dlogp_0 = 2 e^0.05 / 2, token 1 clamped; each / 4 rows.
    g0, g1 = -E(-0.1) / 3 / 4, E(0.05) / 4
    expected = torch.tensor([[g0, 0, g0], [g1, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=D)
    assert torch.allclose(logp.grad, expected, atol=1e-12)


def test_geo_mean_ignores_loss_agg_mode_and_weighs_by_rows():
    old, logp, adv, mask = _inputs(GEO_LOG_R, GEO_MASK, GEO_ADV)
    a = compute_policy_loss_geo_mean(old, logp, adv, mask)
    b = compute_policy_loss_geo_mean(old, logp, adv, mask, loss_agg_mode="seq-mean-token-sum-norm",
                                     loss_scale_factor=7.0, clip_ratio_c=10.0)
    assert a.pg_loss.item() == b.pg_loss.item()
    # a mean over every row: the actor weighs its micro-batches by rows, as seq-mean-token-sum
    assert a.loss_agg_mode == b.loss_agg_mode == "seq-mean-token-sum"
    assert set(a.metrics()) == {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}


def test_geo_mean_asymmetric_bounds():
    # Row 0 (A = +1): x = [0.25, 0.5], eps_high 0.3: x' = [0.25, 0.3], mean 0.275, L0 = -e^0.275.
    # Row 1 (A = -1): x = [-0.05, -0.5], eps_low 0.1: x' = [-0.05, -0.1], mean -0.075, L1 = e^-0.075.
    old, logp, adv, mask = _inputs([[0.25, 0.5], [-0.05, -0.5]], [[1.0, 1], [1, 1]], [[1.0, 1], [-1, -1]])
    out = compute_policy_loss_geo_mean(old, logp, adv, mask, clip_ratio=0.2, clip_ratio_low=0.1,
                                       clip_ratio_high=0.3)
    assert out.pg_loss.item() == pytest.approx((-E(0.275) + E(-0.075)) / 2, abs=1e-12)
    assert out.pg_clipfrac.item() == pytest.approx(1 / 4)  # the 0.5 (A > 0)
    assert out.pg_clipfrac_lower.item() == pytest.approx(1 / 4)  # the -0.5 (A < 0)
    # clip_ratio alone moves both sides: at 0.6 nothing is outside, x' = x
    wide = compute_policy_loss_geo_mean(old, logp, adv, mask, clip_ratio=0.6)
    assert wide.pg_loss.item() == pytest.approx((-E(0.375) + E(-0.275)) / 2, abs=1e-12)
    assert wide.pg_clipfrac.item() == wide.pg_clipfrac_lower.item() == 0.0


def test_geo_mean_rollout_weights_enter_as_their_per_row_geometric_mean():
    old, logp, adv, mask = _inputs(GEO_LOG_R, GEO_MASK, GEO_ADV)
    # row 0: (1 * 4 * 0.25)^(1/3) = 1; row 1: (4 * 4)^(1/2) = 4 (the masked 0 is not counted)
    w = torch.tensor([[1.0, 4.0, 0.25], [4.0, 4.0, 0.0], [9.0, 9.0, 9.0], [5.0, 5.0, 5.0]], dtype=D)
    out = compute_policy_loss_geo_mean(old, logp, adv, mask, rollout_is_weights=w)
    assert out.pg_loss.item() == pytest.approx((-E(-0.1) + 4 * 2 * E(0.05)) / 4, abs=1e-12)
    # a weight of 0 (a rejected token) is floored at 1e-10 before the log, as verl: row 0's factor is
    # (1e-10 * 1 * 1)^(1/3)
    w = torch.ones_like(w)
    w[0, 0] = 0.0
    out = compute_policy_loss_geo_mean(old, logp, adv, mask, rollout_is_weights=w)
    assert out.pg_loss.item() == pytest.approx((-E(-0.1) * 1e-10 ** (1 / 3) + 2 * E(0.05)) / 4, rel=1e-9)


def test_geo_mean_padding_beyond_the_mask_changes_nothing():
    old, logp, adv, mask = _inputs(GEO_LOG_R, GEO_MASK, GEO_ADV)
    a = compute_policy_loss_geo_mean(old, logp, adv, mask)
    pad = torch.zeros(4, 2, dtype=D)
    b = compute_policy_loss_geo_mean(torch.cat([old, pad], 1), torch.cat([logp, pad + 30], 1),
                                     torch.cat([adv, pad - 9], 1), torch.cat([mask, pad], 1))
    assert b.pg_loss.item() == pytest.approx(a.pg_loss.item(), abs=1e-12)
    assert b.pg_clipfrac.item() == pytest.approx(a.pg_clipfrac.item())


# --------------------------------------------------------------------------------------------- sapo
# Row 0: A = +1, ratios 1 and 2; row 1: A = -0.5, ratio 0.5, its second token masked out (log r 5);
# row 2: A = 0 (an all-equal group), one trained token; row 3: no trained token.
SAPO_LOG_R = [[0.0, math.log(2.0)], [math.log(0.5), 5.0], [0.7, 0.0], [0.3, 0.3]]
SAPO_MASK = [[1.0, 1], [1, 0], [1, 0], [0, 0]]
SAPO_ADV = [[1.0, 1], [-0.5, -0.5], [0, 0], [0, 0]]


def test_sapo_gate_loss_and_gradient_by_hand():
    old, logp, adv, mask = _inputs(SAPO_LOG_R, SAPO_MASK, SAPO_ADV)
    out = compute_policy_loss_sapo(old, logp, adv, mask, tau_pos=1.0, tau_neg=2.0)
    # f(r) = sigmoid(tau (r - 1)) 4 / tau; L = -f(r) A.
    # Row 0 (tau_pos 1): f(1) = 4 sigmoid(0) = 2, f(2) = 4 sigmoid(1): row mean -(2 + 4 s(1)) / 2.
    # Row 1 (tau_neg 2): f(0.5) = sigmoid(-1) * 2; L = 0.5 * 2 sigmoid(-1) = sigmoid(-1).
    # Row 2: A = 0, L = 0. Row 3 has no tokens: it counts 0 in the mean over the 4 rows (verl's
    # global_batch_size counts every row of the mini-batch).
    s1, sm1 = _sigmoid(1.0), _sigmoid(-1.0)
    assert out.pg_loss.item() == pytest.approx((-(1 + 2 * s1) + sm1 + 0) / 4, abs=1e-12)
    assert out.loss_agg_mode == "seq-mean-token-mean"
    # no clip: both fractions 0; ppo_kl = -(0 + ln 2 + ln 0.5 + 0.7) / 4 trained tokens
    assert out.pg_clipfrac.item() == 0.0 and out.pg_clipfrac_lower.item() == 0.0
    assert out.ppo_kl.item() == pytest.approx(-0.7 / 4, abs=1e-12)
    out.pg_loss.backward()
    # dL/dlogp = -A f'(r) r = -A 4 s (1 - s) r with s = sigmoid(tau (r - 1)); then / tokens / 4 rows.
    # Row 0: r = 1 -> -1; r = 2 -> -8 s(1) s(-1); each / 2 / 4. Row 1: 0.5 * 4 s(-1) s(1) * 0.5 / 4.
    expected = torch.tensor([[-1 / 8, -8 * s1 * sm1 / 8], [s1 * sm1 / 4, 0], [0, 0], [0, 0]], dtype=D)
    assert torch.allclose(logp.grad, expected, atol=1e-12)


def test_sapo_picks_the_temperature_by_the_advantages_sign():
    old, logp, adv, mask = _inputs(SAPO_LOG_R, SAPO_MASK, SAPO_ADV)
    base = compute_policy_loss_sapo(old, logp, adv, mask, tau_pos=1.0, tau_neg=2.0).pg_loss.item()
    # tau_pos moves row 0 only: at tau 3, f(1) = 4/3 * 1/2, f(2) = 4/3 sigmoid(3)
    other = compute_policy_loss_sapo(old, logp, adv, mask, tau_pos=3.0, tau_neg=2.0).pg_loss.item()
    row0 = lambda tau: -(_sigmoid(0) + _sigmoid(tau)) * 4 / tau / 2  # noqa: E731
    assert other - base == pytest.approx((row0(3.0) - row0(1.0)) / 4, abs=1e-12)
    # an advantage of 0 takes tau_neg (A <= 0), harmlessly: its loss is 0 whatever tau is
    assert compute_policy_loss_sapo(old, logp, adv * 0, mask, tau_neg=0.5).pg_loss.item() == 0.0


def test_sapo_ignores_loss_agg_mode_and_the_clip_keys():
    old, logp, adv, mask = _inputs(SAPO_LOG_R, SAPO_MASK, SAPO_ADV)
    a = compute_policy_loss_sapo(old, logp, adv, mask)
    b = compute_policy_loss_sapo(old, logp, adv, mask, loss_agg_mode="token-mean", clip_ratio=0.01,
                                 clip_ratio_low=0.001, clip_ratio_high=0.002, clip_ratio_c=1.5)
    assert a.pg_loss.item() == b.pg_loss.item() and b.loss_agg_mode == "seq-mean-token-mean"


def test_sapo_far_off_policy_tokens_saturate_with_no_gradient():
    # log r = 30 is clamped at 20 (r = e^20): the gate is at its ceiling 4 / tau, the gradient 0.
    old, logp, adv, mask = _inputs([[30.0], [-30.0]], [[1.0], [1.0]], [[1.0], [-1.0]])
    out = compute_policy_loss_sapo(old, logp, adv, mask, tau_pos=1.0, tau_neg=1.05)
    # row 0: -4; row 1: r = e^-20 ~ 0: f = sigmoid(-1.05) * 4 / 1.05, L = +f
    f = _sigmoid(1.05 * (E(-20) - 1)) * 4 / 1.05
    assert out.pg_loss.item() == pytest.approx((-4 + f) / 2, abs=1e-9)
    out.pg_loss.backward()
    assert torch.isfinite(logp.grad).all() and abs(logp.grad[0, 0].item()) < 1e-12


def test_sapo_rollout_weights_multiply_each_token():
    old, logp, adv, mask = _inputs(SAPO_LOG_R, SAPO_MASK, SAPO_ADV)
    a = compute_policy_loss_sapo(old, logp, adv, mask).pg_loss.item()
    b = compute_policy_loss_sapo(old, logp, adv, mask, rollout_is_weights=torch.full((4, 2), 3.0, dtype=D))
    assert b.pg_loss.item() == pytest.approx(3 * a, abs=1e-12)


def test_sapo_refuses_a_temperature_that_is_not_positive():
    old, logp, adv, mask = _inputs(SAPO_LOG_R, SAPO_MASK, SAPO_ADV)
    for taus in ({"tau_pos": 0.0}, {"tau_neg": -1.0}):
        with pytest.raises(ValueError, match="tau_pos and tau_neg must be > 0"):
            compute_policy_loss_sapo(old, logp, adv, mask, **taus)


# ------------------------------------------------------------------------------------------ both
@pytest.mark.parametrize("name", ["geo_mean", "sapo"])
def test_on_policy_they_give_the_policy_gradient(name):
    # At ratio 1 nothing is clipped (geo_mean) and the gate's slope is 1 (sapo): the gradient is
    # -A grad(log pi) averaged per sequence, then over the 3 rows (all have tokens).
    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(3, 5, generator=g, dtype=D) * 3).requires_grad_(True)
    mask = torch.tensor([[1.0] * 5, [1, 1, 1, 0, 0], [0, 1, 1, 1, 1]], dtype=D)
    adv = torch.tensor([[0.7], [-1.3], [0.4]], dtype=D) * mask
    get_policy_loss(name)(logp.detach(), logp, adv, mask).pg_loss.backward()
    expected = -adv / mask.sum(-1, keepdim=True) / 3 * mask
    assert torch.allclose(logp.grad, expected, atol=1e-12)


def test_loss_mode_options_give_sapo_the_actors_temperatures():
    assert ACTOR_LOSS_KEYS == {"sapo": ("tau_pos", "tau_neg")}
    actor = ActorConfig(tau_pos=0.5, policy_loss=PolicyLossConfig(loss_mode="sapo"))
    assert loss_mode_options(actor.policy_loss, None, actor=actor) == {"tau_pos": 0.5, "tau_neg": 1.05}
    assert loss_mode_options(actor.policy_loss, None) == {}  # without the actor section: the defaults
    geo = PolicyLossConfig(loss_mode="geo_mean")
    assert loss_mode_options(geo, None, actor=actor) == {}  # geo_mean reads only the clip keys
