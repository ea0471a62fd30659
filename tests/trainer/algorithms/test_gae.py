"""GAE (algorithm.adv_estimator=gae) against returns and advantages worked out by hand, with masks:
padding, a tool reply between two assistant turns (skipped: neither trained nor bootstrapped from),
gamma and lambda, whitening; and the critic's clipped value loss."""

import pytest
import torch

from trainer.algorithms.advantages import compute_advantage, get_adv_estimator
from trainer.algorithms.losses import masked_whiten, value_loss

torch.set_num_threads(1)


def _raw(rewards, values, mask, gamma, lam):
    """GAE before whitening, straight from the definition, one row at a time in float64: the trained
    tokens in order, each with the next trained token's value and advantage."""
    B, T = rewards.shape
    adv = torch.zeros(B, T, dtype=torch.float64)
    for i in range(B):
        idx = [t for t in range(T) if mask[i, t] > 0]
        nxt_v = nxt_a = 0.0
        for t in reversed(idx):
            a = float(rewards[i, t]) + gamma * nxt_v - float(values[i, t]) + gamma * lam * nxt_a
            adv[i, t] = a
            nxt_v, nxt_a = float(values[i, t]), a
    return adv


def test_gae_by_hand_one_row_gamma_1_lambda_1():
    # 3 trained tokens, reward 1 on the last: with gamma = lam = 1, A_t = R - V_t and R_t = 1.
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    values = torch.tensor([[0.2, 0.5, 0.7, 9.0]], dtype=torch.float64)  # 9.0 sits on padding: unused
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    adv, ret = get_adv_estimator("gae")(rewards, mask, ["u"], values=values, gamma=1.0, lam=1.0)
    assert ret.tolist() == [[1.0, 1.0, 1.0, 0.0]]
    raw = torch.tensor([[0.8, 0.5, 0.3, 0.0]], dtype=torch.float64)
    assert torch.allclose(adv, masked_whiten(raw, mask) * mask)
    # whitened: mean 0.5333, unbiased std over the 3 tokens
    m, sd = 1.6 / 3, ((0.8 - 1.6 / 3) ** 2 + (0.5 - 1.6 / 3) ** 2 + (0.3 - 1.6 / 3) ** 2) ** 0.5 / 2 ** 0.5
    assert adv[0, :3].tolist() == pytest.approx([(x - m) / sd for x in (0.8, 0.5, 0.3)], rel=1e-6)
    assert adv[0, 3] == 0


def test_gae_by_hand_with_gamma_and_lambda():
    # delta_2 = 1 - 0.7 = 0.3; delta_1 = 0 + 0.9*0.7 - 0.5 = 0.13; delta_0 = 0.9*0.5 - 0.2 = 0.25
    # A_2 = 0.3; A_1 = 0.13 + 0.9*0.8*0.3 = 0.346; A_0 = 0.25 + 0.72*0.346 = 0.49912
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.2, 0.5, 0.7]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.float64)
    adv, ret = compute_advantage("gae", rewards, mask, ["u"], values=values, gamma=0.9, lam=0.8)
    assert ret[0].tolist() == pytest.approx([0.69912, 0.846, 1.0], abs=1e-12)
    raw = torch.tensor([[0.49912, 0.346, 0.3]], dtype=torch.float64)
    assert torch.allclose(adv, masked_whiten(raw, mask), atol=1e-12)


def test_gae_skips_a_tool_reply_between_turns():
    # turn 1: tokens 0-1 (trained); tool reply: tokens 2-4 (mask 0, own rewards/values ignored);
    # turn 2: tokens 5-6 (trained); padding: 7. Reward 1 on token 6.
    rewards = torch.tensor([[0.0, 0.0, 5.0, 5.0, 5.0, 0.0, 1.0, 0.0]], dtype=torch.float64)
    values = torch.tensor([[0.1, 0.2, 7.0, 7.0, 7.0, 0.4, 0.6, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    gamma, lam = 0.9, 0.5
    adv, ret = compute_advantage("gae", rewards, mask, ["u"], values=values, gamma=gamma, lam=lam)
    # by hand: A6 = 1 - 0.6 = 0.4; A5 = 0.9*0.6 - 0.4 + 0.45*0.4 = 0.32
    # token 1 bootstraps from token 5 (the next trained one): A1 = 0.9*0.4 - 0.2 + 0.45*0.32 = 0.304
    # A0 = 0.9*0.2 - 0.1 + 0.45*0.304 = 0.2168
    raw = torch.tensor([[0.2168, 0.304, 0, 0, 0, 0.32, 0.4, 0]], dtype=torch.float64)
    assert torch.allclose(raw, _raw(rewards, values, mask, gamma, lam), atol=1e-12)
    assert torch.allclose(ret, (raw + values) * mask, atol=1e-12)
    assert ret[0].tolist() == pytest.approx([0.3168, 0.504, 0, 0, 0, 0.72, 1.0, 0], abs=1e-12)
    assert torch.allclose(adv, masked_whiten(raw, mask) * mask, atol=1e-12)
    assert (adv[0, [2, 3, 4, 7]] == 0).all() and (ret[0, [2, 3, 4, 7]] == 0).all()
    # the tool reply's values and rewards change nothing
    v2, r2 = values.clone(), rewards.clone()
    v2[0, 2:5], r2[0, 2:5] = -3.0, 11.0
    adv2, ret2 = compute_advantage("gae", r2, mask, ["u"], values=v2, gamma=gamma, lam=lam)
    assert torch.equal(adv, adv2) and torch.equal(ret, ret2)


def test_gae_batch_whitening_is_over_every_trained_token_of_the_batch():
    g = torch.Generator().manual_seed(0)
    rewards = torch.zeros(3, 6, dtype=torch.float64)
    values = torch.rand(3, 6, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]], dtype=torch.float64)
    rewards[0, 3], rewards[1, 5], rewards[2, 5] = 1.0, 0.0, 0.5
    adv, ret = compute_advantage("gae", rewards, mask, ["a", "a", "b"], values=values, gamma=0.95, lam=0.9)
    raw = _raw(rewards, values, mask, 0.95, 0.9)
    assert torch.allclose(ret, (raw + values) * mask, atol=1e-12)
    assert torch.allclose(adv, masked_whiten(raw, mask) * mask, atol=1e-12)
    sel = adv[mask.bool()]
    assert abs(sel.mean().item()) < 1e-9 and sel.std().item() == pytest.approx(1.0, abs=1e-6)


def test_gae_needs_values_of_the_same_shape():
    r, m = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="needs the critic's values"):
        compute_advantage("gae", r, m, ["a", "b"])
    with pytest.raises(ValueError, match="differ"):
        compute_advantage("gae", r, m, ["a", "b"], values=torch.zeros(2, 4))


def test_value_loss_clipped_by_hand():
    # returns 1; old values 0; cliprange 0.5.
    # token 0: vpred 0.2 (inside the clip): both errors 0.64 -> 0.64, not clipped
    # token 1: vpred 0.9 -> clipped to 0.5: errors 0.01 and 0.25 -> 0.25, clipped
    # token 2: vpred -0.8 -> clipped to -0.5: errors 3.24 and 2.25 -> 3.24, not clipped
    # token 3: masked out
    vpreds = torch.tensor([[0.2, 0.9, -0.8, 5.0]], dtype=torch.float64, requires_grad=True)
    returns = torch.tensor([[1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    values = torch.zeros(1, 4, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    loss, clipfrac = value_loss(vpreds, returns, values, mask, 0.5, "token-mean")
    assert loss.item() == pytest.approx(0.5 * (0.64 + 0.25 + 3.24) / 3)
    assert clipfrac.item() == pytest.approx(1 / 3)
    loss.backward()
    # d/dv of 0.5*mean: token 0 (v - R)/3; token 1 clipped -> no gradient; token 2 (v - R)/3; masked 0
    assert vpreds.grad[0].tolist() == pytest.approx([-0.8 / 3, 0.0, -1.8 / 3, 0.0])
    seq, _ = value_loss(vpreds.detach(), returns, values, mask, 0.5, "seq-mean-token-sum")
    assert seq.item() == pytest.approx(0.5 * (0.64 + 0.25 + 3.24))
