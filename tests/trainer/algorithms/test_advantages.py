"""Advantage estimators against values worked out by hand / in float64."""

import math

import numpy as np
import pytest
import torch

from trainer.algorithms.advantages import adv_estimator_names, compute_advantage, get_adv_estimator

torch.set_num_threads(1)

# rows: group a = [1, 0, 0, 1], singleton b = [0.5], group c = [2, 0]; score on each row's last token
SCORES = [1.0, 0.0, 0.0, 1.0, 0.5, 2.0, 0.0]
INDEX = ["a", "a", "a", "a", "b", "c", "c"]
LENGTHS = [3, 1, 4, 2, 4, 2, 3]
T = 4


def _batch(dtype=torch.float64):
    rewards = torch.zeros(len(SCORES), T, dtype=dtype)
    mask = torch.zeros(len(SCORES), T, dtype=dtype)
    for i, (s, n) in enumerate(zip(SCORES, LENGTHS)):
        mask[i, :n] = 1
        rewards[i, n - 1] = s
    return rewards, mask


def _expand(per_row):
    _, mask = _batch()
    return torch.tensor(per_row, dtype=torch.float64).unsqueeze(-1) * mask


def test_registry_lists_the_estimators_and_names_unknown():
    assert {
        "grpo",
        "rloo",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "gae",
        "opo",
        "grpo_passk",
        "remax",
        "gpg",
    } <= set(adv_estimator_names())
    with pytest.raises(ValueError, match="grpo_vectorized.*known: gae"):
        get_adv_estimator("grpo_vectorized")


def test_grpo_known_group_and_singleton():
    rewards, mask = _batch()
    adv, ret = compute_advantage("grpo", rewards, mask, INDEX)
    sa = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    sc = math.sqrt(2)  # unbiased std of [2, 0]
    eps = 1e-6
    expected = [
        0.5 / (sa + eps),
        -0.5 / (sa + eps),
        -0.5 / (sa + eps),
        0.5 / (sa + eps),
        0.5 / (1 + eps),  # singleton: mean 0, std 1
        1 / (sc + eps),
        -1 / (sc + eps),
    ]
    torch.testing.assert_close(adv, _expand(expected), rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, adv)
    assert torch.all(adv[mask == 0] == 0)


def test_grpo_without_std_is_dr_grpo():
    rewards, mask = _batch()
    adv, _ = compute_advantage("grpo", rewards, mask, INDEX, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(
        adv, _expand([0.5, -0.5, -0.5, 0.5, 0.5, 1.0, -1.0]), rtol=0, atol=1e-12
    )


def test_grpo_all_equal_group_gives_zero_advantage():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    mask = torch.ones(3, 2)
    adv, _ = compute_advantage("grpo", rewards, mask, ["u", "u", "u"])
    assert torch.all(adv == 0)


def test_grpo_sums_token_rewards_per_sequence():
    rewards = torch.tensor([[0.5, 0.5], [0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.float64)
    adv, _ = compute_advantage("grpo", rewards, mask, ["g", "g"])
    expected = 0.5 / (math.sqrt(0.5) + 1e-6)
    torch.testing.assert_close(adv[:, 0], torch.tensor([expected, -expected], dtype=torch.float64))


def test_rloo_is_leave_one_out_baseline():
    rewards, mask = _batch()
    adv, ret = compute_advantage("rloo", rewards, mask, INDEX)
    # row with 1: others 0, 0, 1 -> 1 - 1/3; row with 0: others 1, 0, 1 -> 0 - 2/3
    expected = [1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 0.5, 2.0, -2.0]
    torch.testing.assert_close(adv, _expand(expected), rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, adv)


def test_opo_length_weighted_group_baseline():
    rewards, mask = _batch()
    adv, ret = compute_advantage("opo", rewards, mask, INDEX)
    # group a: lengths 3, 1, 4, 2, scores 1, 0, 0, 1 -> b = (3 + 2) / 10 = 0.5
    # group c: lengths 2, 3, scores 2, 0 -> b = 4 / 5 = 0.8; singleton b: baseline 0
    expected = [0.5, -0.5, -0.5, 0.5, 0.5, 2.0 - 0.8, -0.8]
    torch.testing.assert_close(adv, _expand(expected), rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, adv)
    assert torch.all(adv[mask == 0] == 0)


def test_opo_longer_responses_weigh_more_than_in_grpo():
    # scores 1 (length 1) and 0 (length 3): b = 1/4, not the plain mean 1/2
    rewards = torch.tensor([[1.0, 0, 0], [0.0, 0, 0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 0, 0], [1.0, 1, 1]], dtype=torch.float64)
    adv, _ = compute_advantage("opo", rewards, mask, ["g", "g"])
    torch.testing.assert_close(
        adv, torch.tensor([[0.75, 0, 0], [-0.25, -0.25, -0.25]], dtype=torch.float64)
    )


def test_gpg_centres_by_group_and_scales_by_the_rows_with_a_score():
    rewards, mask = _batch()
    adv, ret = compute_advantage("gpg", rewards, mask, INDEX)
    # SCORES [1, 0, 0, 1, 0.5, 2, 0]: 7 rows, 4 of them non-zero -> alpha = 7 / 4 = 1.75.
    # group a: mean 0.5 -> +-0.5; singleton b: mean 0 -> 0.5; group c: mean 1 -> +-1. No std.
    expected = [1.75 * a for a in (0.5, -0.5, -0.5, 0.5, 0.5, 1.0, -1.0)]
    torch.testing.assert_close(adv, _expand(expected), rtol=0, atol=1e-12)
    torch.testing.assert_close(ret, adv)
    assert torch.all(adv[mask == 0] == 0)
    # norm_adv_by_std_in_grpo (the whole algorithm section is passed) does not apply to gpg
    again, _ = compute_advantage("gpg", rewards, mask, INDEX, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(again, adv, rtol=0, atol=0)


def test_gpg_all_equal_groups_and_an_all_zero_batch():
    # two groups, every score the same within each: centred to 0 whatever alpha is
    rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(4, 2, dtype=torch.float64)
    adv, _ = compute_advantage("gpg", rewards, mask, ["u", "u", "v", "v"])
    assert torch.all(adv == 0)
    # no row has a score: M = 0 is taken as 1 (alpha = B), and the advantages are 0
    adv, _ = compute_advantage("gpg", torch.zeros(3, 2), torch.ones(3, 2), ["u", "u", "w"])
    assert torch.all(adv == 0)
    # one non-zero score out of 4 rows: alpha = 4; group [1, 0] has mean 0.5 -> +-2; the
    # masked-out token of row 1 stays 0
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    adv, _ = compute_advantage("gpg", rewards, mask, ["u", "u", "v", "v"])
    torch.testing.assert_close(
        adv, torch.tensor([[2.0, 2.0], [-2.0, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    )


def test_grpo_passk_only_the_best_sample_learns():
    # group a scores [1, 0, 0, 1] tie at the top: lead 0, so all 0; group c [2, 0]: lead 2.
    # A third group d [0.2, 0.9, 0.5]: row 1 gets (0.9 - 0.5) / (std + eps).
    scores = [1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.2, 0.9, 0.5]
    index = ["a", "a", "a", "a", "c", "c", "d", "d", "d"]
    lengths = [3, 1, 4, 2, 2, 3, 1, 2, 4]
    rewards = torch.zeros(len(scores), T, dtype=torch.float64)
    mask = torch.zeros(len(scores), T, dtype=torch.float64)
    for i, (sc, n) in enumerate(zip(scores, lengths)):
        mask[i, :n] = 1
        rewards[i, n - 1] = sc
    adv, ret = compute_advantage("grpo_passk", rewards, mask, index)
    sd = float(np.std([0.2, 0.9, 0.5], ddof=1))
    expected = [0, 0, 0, 0, 2 / (math.sqrt(2) + 1e-6), 0, 0, 0.4 / (sd + 1e-6), 0]
    torch.testing.assert_close(
        adv, torch.tensor(expected, dtype=torch.float64).unsqueeze(-1) * mask, rtol=0, atol=1e-12
    )
    torch.testing.assert_close(ret, adv)
    assert torch.all(adv[mask == 0] == 0)
    adv, _ = compute_advantage("grpo_passk", rewards, mask, index, norm_adv_by_std_in_grpo=False)
    expected = [0, 0, 0, 0, 2.0, 0, 0, 0.4, 0]
    torch.testing.assert_close(
        adv, torch.tensor(expected, dtype=torch.float64).unsqueeze(-1) * mask, rtol=0, atol=1e-12
    )


def test_grpo_passk_refuses_a_singleton_group():
    rewards, mask = _batch()  # group b is a singleton
    with pytest.raises(ValueError, match="group 'b' has 1"):
        compute_advantage("grpo_passk", rewards, mask, INDEX)


def test_remax_return_less_the_greedy_baseline():
    # row 0: rewards on two trained tokens, a tool token (mask 0) between; row 1: padding after t1.
    rewards = torch.tensor([[0.0, 0.5, 9.0, 1.0], [0.0, 2.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 0, 1], [1, 1, 0, 0]], dtype=torch.float64)
    baselines = torch.tensor([1.0, 0.5], dtype=torch.float64)
    adv, ret = compute_advantage("remax", rewards, mask, ["a", "b"], reward_baselines=baselines)
    # returns over the masked tokens only (the 9 on the tool token is not counted), 0 where mask is 0
    expected_returns = torch.tensor([[1.5, 1.5, 0, 1.0], [2.0, 2.0, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(ret, expected_returns, rtol=0, atol=1e-12)
    expected = torch.tensor([[0.5, 0.5, 0, 0.0], [1.5, 1.5, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="reward_baselines"):
        compute_advantage("remax", rewards, mask, ["a", "b"])


def _whiten_reference(values, mask):
    vals = np.array(
        [v for v, m in zip(values.flatten().tolist(), mask.flatten().tolist()) if m],
        dtype=np.float64,
    )
    mean, var = vals.mean(), vals.var(ddof=1)
    return (values.double() - mean) / math.sqrt(var + 1e-8) * mask.double()


def test_reinforce_plus_plus_discounted_returns_with_reset():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 0, 1]], dtype=torch.float64)
    adv, ret = compute_advantage("reinforce_plus_plus", rewards, mask, ["x", "y", "z"], gamma=0.5)
    # row 0: 1, .5, .25 backwards; row 1: padding at t=2; row 2: mask 0 at t=1 cuts the running sum
    expected_returns = torch.tensor(
        [[0.25, 0.5, 1.0], [1.0, 2.0, 0.0], [0.0, 1.5, 3.0]], dtype=torch.float64
    )
    torch.testing.assert_close(ret, expected_returns, rtol=0, atol=1e-12)
    torch.testing.assert_close(adv, _whiten_reference(expected_returns, mask), rtol=0, atol=1e-9)
    assert torch.all(adv[mask == 0] == 0)


def test_reinforce_plus_plus_baseline_centres_by_group_then_whitens():
    rewards, mask = _batch()
    adv, ret = compute_advantage("reinforce_plus_plus_baseline", rewards, mask, INDEX)
    centred = _expand([0.5, -0.5, -0.5, 0.5, 0.5, 1.0, -1.0])
    torch.testing.assert_close(adv, _whiten_reference(centred, mask), rtol=0, atol=1e-9)
    torch.testing.assert_close(ret, adv)


def test_index_length_mismatch_raises():
    rewards, mask = _batch()
    with pytest.raises(ValueError, match="index has 2 entries"):
        compute_advantage("grpo", rewards, mask, ["a", "b"])


def test_config_choices_match_registry():
    import typing

    from trainer.config import AlgorithmConfig

    choices = typing.get_args(typing.get_type_hints(AlgorithmConfig)["adv_estimator"])
    assert set(choices) <= set(adv_estimator_names())
