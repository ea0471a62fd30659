"""The policy losses clip_cov and kl_cov (trainer.algorithms.policy_losses, "The Entropy Mechanism
of RL for Reasoning LMs") against values and gradients worked out by hand on tiny float64 tensors."""

import math

import pytest
import torch

from trainer.algorithms.policy_losses import (
    LOSS_MODE_KEYS,
    compute_policy_loss_clip_cov,
    compute_policy_loss_kl_cov,
    loss_mode_options,
)
from trainer.config import PolicyLossConfig

torch.set_num_threads(1)
D = torch.float64
E = math.exp

# Two rows, the last token of row 1 masked out (values it must ignore). Over the 5 masked tokens:
# mean A = (3 - 2) / 5 = 0.2, mean log pi = -11 / 5 = -2.2, so cov = (A - 0.2)(log pi + 2.2) is
#   row 0: 0.8 * 1.2 = 0.96, 0.8 * 0.2 = 0.16, 0.8 * -0.8 = -0.64
#   row 1: -1.2 * 1.2 = -1.44, -1.2 * -1.8 = 2.16
LOGP = [[-1.0, -2.0, -3.0], [-1.0, -4.0, -9.0]]
ADV = [[1.0, 1.0, 1.0], [-1.0, -1.0, 7.0]]
MASK = [[1.0, 1, 1], [1, 1, 0]]


def _inputs(log_ratio):
    logp = torch.tensor(LOGP, dtype=D, requires_grad=True)
    old = logp.detach() - torch.tensor(log_ratio, dtype=D)
    return old, logp, torch.tensor(ADV, dtype=D), torch.tensor(MASK, dtype=D)


# ---------------------------------------------------------------------------------------- kl_cov
KL_D = [[0.1, -0.2, 0.3], [0.2, -0.5, 4.0]]


def test_kl_cov_penalises_the_highest_covariance_tokens():
    old, logp, adv, mask = _inputs(KL_D)
    # kl_cov_ratio 0.4 of 5 tokens: the 2 of largest cov, row 1 t1 (2.16) and row 0 t0 (0.96).
    out = compute_policy_loss_kl_cov(old, logp, adv, mask, kl_cov_ratio=0.4, ppo_kl_coef=0.1)
    per_token = [-E(0.1) + 0.1 * 0.1, -E(-0.2), -E(0.3), E(0.2), E(-0.5) + 0.1 * 0.5]
    assert out.pg_loss.item() == pytest.approx(sum(per_token) / 5, abs=1e-12)
    assert out.loss_agg_mode == "token-mean"
    assert out.pg_clipfrac is None and out.pg_clipfrac_lower is None  # verl's kl_cov reports ppo_kl only
    assert out.ppo_kl.item() == pytest.approx(
        (0.1 + 0.2 + 0.3 + 0.2 + 0.5) / 5, abs=1e-12
    )  # mean |log r|
    out.pg_loss.backward()
    # d/dlog pi: -A r, plus coef * sign(log r) on the two penalised tokens; 0 where masked.
    expected = (
        torch.tensor([[-E(0.1) + 0.1, -E(-0.2), -E(0.3)], [E(0.2), E(-0.5) - 0.1, 0.0]], dtype=D)
        / 5
    )
    assert torch.allclose(logp.grad, expected, atol=1e-12)


def test_kl_cov_default_ratio_penalises_one_token_and_aggregation_applies():
    old, logp, adv, mask = _inputs(KL_D)
    # 0.0002 * 5 tokens rounds down to 0: at least one, the largest cov (row 1 t1).
    out = compute_policy_loss_kl_cov(old, logp, adv, mask, loss_agg_mode="seq-mean-token-sum")
    rows = [-E(0.1) - E(-0.2) - E(0.3), E(0.2) + E(-0.5) + 0.1 * 0.5]
    assert out.pg_loss.item() == pytest.approx(sum(rows) / 2, abs=1e-12)
    with pytest.raises(ValueError, match="kl_cov_ratio"):
        compute_policy_loss_kl_cov(old, logp, adv, mask, kl_cov_ratio=0.0)


# -------------------------------------------------------------------------------------- clip_cov
# clip 0.2: row 0 t1 (r = e^0.5) and t2 (e^0.3) are clipped by PPO (A > 0), row 1 t1 (r = e^-0.5 <
# 0.8, A < 0) too; row 0 t0 (e^0.1) and row 1 t0 (e^0.2, A < 0: the unclipped term wins) are not.
CLIP_D = [[0.1, 0.5, 0.3], [0.2, -0.5, 4.0]]


def test_clip_cov_cuts_the_unclipped_tokens_with_covariance_in_bounds():
    old, logp, adv, mask = _inputs(CLIP_D)
    # cov in (0.1, 1.0): row 0 t0 (0.96) and row 0 t1 (0.16); t1 is PPO-clipped, so only t0 is a
    # candidate, and a budget of 2 (0.4 of 5) cuts it.
    out = compute_policy_loss_clip_cov(
        old, logp, adv, mask, clip_ratio=0.2, clip_cov_ratio=0.4, clip_cov_lb=0.1, clip_cov_ub=1.0
    )
    per_token = [0.0, -1.2, -1.2, E(0.2), 0.8]
    assert out.pg_loss.item() == pytest.approx(sum(per_token) / 5, abs=1e-12)
    assert out.pg_clipfrac.item() == pytest.approx(1 / 5)  # the cut token only, as verl
    assert out.pg_clipfrac_lower is None  # verl's clip_cov reports no dual-clip fraction
    assert out.ppo_kl.item() == pytest.approx(-(0.1 + 0.5 + 0.3 + 0.2 - 0.5) / 5, abs=1e-12)
    out.pg_loss.backward()
    # Only row 1 t0 passes a gradient, -A r / 5; the cut token and the PPO-clipped ones give none.
    expected = torch.zeros(2, 3, dtype=D)
    expected[1, 0] = E(0.2) / 5
    assert torch.allclose(logp.grad, expected, atol=1e-12)


def test_clip_cov_with_no_candidate_is_ppo_clip_without_dual_clip():
    old, logp, adv, mask = _inputs(CLIP_D)
    out = compute_policy_loss_clip_cov(old, logp, adv, mask, clip_ratio=0.2)  # verl's bounds (1, 5)
    assert out.pg_loss.item() == pytest.approx((-E(0.1) - 1.2 - 1.2 + E(0.2) + 0.8) / 5, abs=1e-12)
    assert out.pg_clipfrac.item() == 0.0
    with pytest.raises(ValueError, match="clip_cov_ratio"):
        compute_policy_loss_clip_cov(old, logp, adv, mask, clip_cov_ratio=0.0)


def test_clip_cov_draws_its_budget_at_random_from_the_generator():
    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(8, 50, generator=g, dtype=D) * 3
    adv = torch.randn(8, 1, generator=g, dtype=D).expand(8, 50).contiguous()
    mask = torch.ones(8, 50, dtype=D)
    mask[:, 40:] = 0

    def cut(seed):
        out = compute_policy_loss_clip_cov(
            logp,
            logp,
            adv,
            mask,
            clip_cov_ratio=0.01,
            clip_cov_lb=-1e9,
            clip_cov_ub=1e9,
            generator=torch.Generator().manual_seed(seed),
        )
        return out.pg_clipfrac.item()

    # 320 masked tokens, all candidates at ratio 1: int(0.01 * 320) = 3 cut.
    assert cut(0) == pytest.approx(3 / 320)
    lp = logp.clone().requires_grad_(True)
    compute_policy_loss_clip_cov(
        logp,
        lp,
        adv,
        mask,
        clip_cov_ratio=0.01,
        clip_cov_lb=-1e9,
        clip_cov_ub=1e9,
        generator=torch.Generator().manual_seed(0),
    ).pg_loss.backward()
    zero = (lp.grad == 0) & (mask > 0)
    assert int(zero.sum()) == 3
    lp2 = logp.clone().requires_grad_(True)
    compute_policy_loss_clip_cov(
        logp,
        lp2,
        adv,
        mask,
        clip_cov_ratio=0.01,
        clip_cov_lb=-1e9,
        clip_cov_ub=1e9,
        generator=torch.Generator().manual_seed(0),
    ).pg_loss.backward()
    assert torch.equal(lp.grad, lp2.grad)  # the same seed cuts the same tokens


def test_loss_mode_options_pass_each_mode_its_own_keys():
    assert LOSS_MODE_KEYS == {
        "clip_cov": ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"),
        "kl_cov": ("kl_cov_ratio", "ppo_kl_coef"),
    }
    gen = torch.Generator()
    assert loss_mode_options(PolicyLossConfig(), gen) == {}
    assert loss_mode_options(PolicyLossConfig(loss_mode="kl_cov"), gen) == {
        "kl_cov_ratio": 0.0002,
        "ppo_kl_coef": 0.1,
    }
    assert loss_mode_options(PolicyLossConfig(loss_mode="clip_cov", clip_cov_ub=4.0), gen) == {
        "clip_cov_ratio": 0.0002,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 4.0,
        "generator": gen,
    }
