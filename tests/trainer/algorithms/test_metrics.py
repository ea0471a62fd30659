"""verl data metrics and the reduction of metric lists."""

import pytest
import torch

from trainer.algorithms.metrics import compute_count_metrics, compute_data_metrics, reduce_metrics

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
