"""DAPO's overlong reward shaping (trainer.rewards.overlong) against values worked out by hand."""
from __future__ import annotations

import pytest

from trainer.config import OverlongBufferConfig
from trainer.rewards.overlong import overlong_penalty, shape


@pytest.mark.parametrize("length, want", [
    (0, 0.0), (10, 0.0), (16, 0.0),  # up to max - len = 16: no penalty
    (17, -0.25), (18, -0.5), (19, -0.75), (20, -1.0),  # linear over the last 4 tokens
])
def test_penalty_is_linear_in_the_buffer(length, want):
    assert overlong_penalty(length, max_response_length=20, buffer_len=4, penalty_factor=1.0) == want


def test_penalty_factor_scales_it_and_no_negative_zero():
    assert overlong_penalty(18, max_response_length=20, buffer_len=4, penalty_factor=0.5) == -0.25
    # the paper's sizes: 20,480 tokens with a 4,096-token buffer; 18,432 tokens is half way in
    assert overlong_penalty(18432, max_response_length=20480, buffer_len=4096, penalty_factor=1.0) == -0.5
    zero = overlong_penalty(16, max_response_length=20, buffer_len=4, penalty_factor=1.0)
    assert str(zero) == "0.0"
    with pytest.raises(ValueError):
        overlong_penalty(1, max_response_length=20, buffer_len=0, penalty_factor=1.0)


def test_shape_adds_the_penalty_and_logs_verls_fields():
    on = OverlongBufferConfig(enable=True, len=4, penalty_factor=1.0, log=True)
    assert shape(1.0, 19, on, 20) == (0.25, {"overlong_reward": -0.75, "overlong": True})
    assert shape(1.0, 12, on, 20) == (1.0, {"overlong_reward": 0.0, "overlong": False})
    quiet = OverlongBufferConfig(enable=True, len=4, penalty_factor=1.0, log=False)
    assert shape(1.0, 20, quiet, 20) == (0.0, {})
    assert shape(1.0, 20, OverlongBufferConfig(), 20) == (1.0, {})  # off: the score unchanged
