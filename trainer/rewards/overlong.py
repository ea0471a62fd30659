"""DAPO's overlong reward shaping (verl's `dapo` reward manager, `reward_model.overlong_buffer`).

A response may use `max_response_length` tokens; the last `buffer_len` of them are the buffer. A
response that ends inside the buffer gets a penalty growing linearly from 0 at its start to
`-penalty_factor` at the limit, added to the reward function's score:

    penalty = min(-(length - (max_response_length - buffer_len)) / buffer_len * penalty_factor, 0)

`length` counts every response token (assistant turns, tool replies and templates), as verl's valid
response length does. Pure functions; trainer.scoring.score_trajectories applies them.
"""
from __future__ import annotations

from typing import Any


def overlong_penalty(length: int, *, max_response_length: int, buffer_len: int, penalty_factor: float) -> float:
    """The penalty (<= 0) of a response of `length` tokens; 0 before the buffer starts."""
    if buffer_len < 1:
        raise ValueError(f"buffer_len must be >= 1, got {buffer_len}")
    exceed = length - (max_response_length - buffer_len)
    return min(-exceed / buffer_len * penalty_factor, 0.0) + 0.0  # + 0.0: no -0.0


def shape(score: float, length: int, buffer: Any, max_response_length: int) -> tuple[float, dict[str, Any]]:
    """(reward, reward parts) for a score and a response length under `buffer`
    (reward_model.overlong_buffer): the score unchanged when the buffer is off; the parts are verl's
    `overlong_reward` and `overlong` when `buffer.log` is on."""
    if not buffer.enable:
        return score, {}
    penalty = overlong_penalty(length, max_response_length=max_response_length, buffer_len=buffer.len,
                               penalty_factor=buffer.penalty_factor)
    parts = {"overlong_reward": penalty, "overlong": penalty < 0} if buffer.log else {}
    return score + penalty, parts
