"""verl data metrics and the reduction of metric lists."""

import pytest
import torch

from trainer.algorithms.metrics import compute_count_metrics, compute_data_metrics, reduce_metrics, verl_num_turns

torch.set_num_threads(1)


def test_reduce_metrics_mean_max_min():
    out = reduce_metrics(
        {
            "actor/pg_loss": [1.0, 2.0, 6.0],
            "response_length/max": [3, 9, 4],
            "response_length/min": [3, 9, 4],
            "actor/lr": 0.5,
            "empty": [],
        }
    )
    assert out == {
        "actor/pg_loss": 3.0,
        "response_length/max": 9.0,
        "response_length/min": 3.0,
        "actor/lr": 0.5,
    }


def test_compute_data_metrics_by_hand():
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 1, 1, 1]])
    scores = torch.tensor([[0.0, 0, 1, 0], [0, 0, 0, 0]])
    rewards = scores - 0.1 * mask
    adv = torch.tensor([[0.5, 0.5, 0.5, 0], [-0.5, -0.5, -0.5, -0.5]])
    m = compute_data_metrics(
        token_level_scores=scores,
        token_level_rewards=rewards,
        advantages=adv,
        returns=adv,
        response_mask=mask,
        prompt_lengths=torch.tensor([10, 20]),
        max_response_length=4,
        max_prompt_length=20,
    )
    assert m["critic/score/mean"] == pytest.approx(0.5)
    assert m["critic/score/max"] == 1.0 and m["critic/score/min"] == 0.0
    assert m["critic/rewards/mean"] == pytest.approx(((1 - 0.3) + (-0.4)) / 2)
    assert m["critic/advantages/mean"] == pytest.approx((1.5 - 2.0) / 7)
    assert m["critic/advantages/max"] == 0.5 and m["critic/returns/min"] == -0.5
    assert (
        m["response_length/mean"] == 3.5
        and m["response_length/max"] == 4
        and m["response_length/min"] == 3
    )
    assert m["response_length/clip_ratio"] == 0.5
    assert m["prompt_length/mean"] == 15 and m["prompt_length/clip_ratio"] == 0.5


def test_count_metrics():
    assert compute_count_metrics("num_turns", [1, 2, 3, 2]) == {
        "num_turns/mean": 2.0,
        "num_turns/max": 3.0,
        "num_turns/min": 1.0,
    }
    assert compute_count_metrics("tool_call_counts", []) == {}


def test_data_metrics_take_advantages_over_the_loss_mask_and_lengths_over_the_response():
    response = torch.tensor([[1.0, 1, 1, 1]])
    trained = torch.tensor([[1.0, 0, 0, 1]])  # a tool reply in the middle (verl: response_mask)
    adv = torch.tensor([[2.0, 9, 9, 4]])
    m = compute_data_metrics(token_level_scores=torch.zeros(1, 4), token_level_rewards=torch.zeros(1, 4),
                             advantages=adv, returns=adv, response_mask=response, loss_mask=trained,
                             prompt_lengths=torch.tensor([3]), max_response_length=8)
    assert m["critic/advantages/mean"] == 3.0 and m["critic/advantages/max"] == 4.0
    assert m["response_length/mean"] == 4.0 and m["response_length/clip_ratio"] == 0.0
    assert "prompt_length/clip_ratio" not in m


def _msgs(*roles):
    return [{"role": r, "content": ""} for r in roles]


def test_verl_num_turns_is_user_plus_assistant_turns_plus_one():
    prompt = _msgs("system", "user")
    # Single turn: 1 + 1 assistant = 2 (verl's single-turn loop reports 2).
    assert verl_num_turns(1, prompt + _msgs("assistant"), 2, "stop") == 2
    # Two tool rounds (one with two parallel calls): 1 + 3 assistant + 2 tool rounds.
    convo = _msgs("assistant", "tool", "tool", "assistant", "tool", "assistant")
    assert verl_num_turns(3, prompt + convo, 2, "stop") == 6
    # Stopped at max_turns while calling tools: the calls never ran, no reply round.
    assert verl_num_turns(2, prompt + _msgs("assistant", "tool", "assistant"), 2, "tool_calls") == 4
    # The last round of replies did not fit the response budget: verl does not count it.
    assert verl_num_turns(1, prompt + _msgs("assistant", "tool"), 2, "length") == 2
    # A few-shot prompt's own turns are the prompt's, not the trajectory's.
    few_shot = _msgs("user", "assistant", "tool", "assistant", "user")
    assert verl_num_turns(1, few_shot + _msgs("assistant"), len(few_shot), "stop") == 2


def test_zero_adv_group_ratio_counts_groups_whose_rewards_are_all_equal():
    from trainer.algorithms.metrics import zero_adv_group_ratio

    uids = ["a", "a", "b", "b", "c", "c", "d"]
    rewards = [1.0, 1.0, 0.0, 1.0, 0.1, 0.1, 0.5]  # a flat, b varies, c flat (0.1: std not exactly 0), d alone
    assert zero_adv_group_ratio(uids, rewards) == 0.5
    assert zero_adv_group_ratio([], []) == 0.0
    assert zero_adv_group_ratio(["x"] * 4, [0.0] * 4) == 1.0
