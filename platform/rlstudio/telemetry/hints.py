"""What the run page's Summary card says in plain words when a run's latest steps show that it cannot
learn: the two ways new users meet first, both read from verl's metrics of the last steps.

- every response hits the length limit (`response_length/clip_ratio`): a response cut off before its
  answer scores 0 with a rule-based reward, whatever the policy does;
- no learning signal (`critic/zero_adv_group_ratio`): every group's samples scored the same, so each
  advantage is 0 and the policy gradient of the reward is 0 (all too hard, or all too easy).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

WINDOW = 3  # the last steps a hint looks at; it needs at least two of them
LENGTH_SHARE = 0.95
NO_SIGNAL_SHARE = 0.999


def _all_at_least(rows: Sequence[Mapping[str, Any]], key: str, bound: float) -> bool:
    values = [row.get(key) for row in rows]
    return all(isinstance(v, (int, float)) and v >= bound for v in values)


def run_hints(rows: Sequence[Mapping[str, Any]], *, max_response_length: Any = None) -> list[dict[str, str]]:
    """[{"kind", "text"}] for the metric dicts of a run's steps in step order (the last WINDOW
    looked at, at least two needed); `max_response_length` the run's data.max_response_length."""
    last = list(rows)[-WINDOW:]
    if len(last) < 2:
        return []
    steps = f"the last {len(last)} steps"
    limit = f"{max_response_length} tokens, " if isinstance(max_response_length, int) else ""
    hints = []
    if _all_at_least(last, "response_length/clip_ratio", LENGTH_SHARE):
        hints.append({"kind": "length", "text": (
            f"Nearly every response of {steps} hit the length limit ({limit}data.max_response_length): a "
            "response cut off before its answer usually scores 0. Raise data.max_response_length (a "
            "key=value override on the new-run form, or Run again with changes), or use a dataset whose "
            "answers are shorter.")})
    if _all_at_least(last, "critic/zero_adv_group_ratio", NO_SIGNAL_SHARE):
        hints.append({"kind": "no_signal", "text": (
            f"In {steps} every group's samples scored the same (critic/zero_adv_group_ratio 1.0): with a "
            "group-relative advantage (GRPO, RLOO and the like) every advantage is 0, so the reward teaches "
            "the policy nothing. Prompts all too hard (or all too "
            "easy) for the model do this: start from a model that solves some of them, or raise "
            "actor_rollout_ref.rollout.n so that a group is more likely to differ.")})
    return hints
