"""The `gsm8k` interaction (verl's Gsm8kInteraction semantics): a user who checks the answer.

After each assistant turn without a tool call, the last assistant message is scored against the
row's ground truth as verl's Gsm8kInteraction scores it: "#### " is put before the message unless it
starts with it, then the GSM8K score's flexible method reads its last number (trainer.rewards.gsm8k;
so "it is 46" is right for 46, and "#### 45, no: 46" too). Correct (1.0): "Your response is correct!"
and the conversation ends. Otherwise the score (0.0) and verl's request to reflect and try again, and
the model gets another turn (until `multi_turn.max_user_turns`, which counts tool rounds and replies
alike, or the turn / length budgets end it).

The ground truth is `interaction_kwargs.ground_truth` when the row gives it (verl's rows do), else the
row's own `reward_model.ground_truth`.
"""
from __future__ import annotations

from typing import Any

from trainer.interactions.base import BaseInteraction, InteractionReply, register_interaction
from trainer.rewards.gsm8k import compute_score

CORRECT = "Your response is correct!"
INCORRECT = "Your response is incorrect! You need to reflect on your answer and try again."


def last_assistant_text(messages: list[dict[str, Any]]) -> str:
    """The content of the last assistant message ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            return content if isinstance(content, str) else ""
    return ""


@register_interaction
class Gsm8kInteraction(BaseInteraction):
    name = "gsm8k"
    description = "checks the last answer's last number against the GSM8K ground truth; asks for another try until it is right"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self._truth: dict[str, Any] = {}

    async def start_interaction(self, instance_id: str, ground_truth: Any = None, **kwargs: Any) -> None:
        if ground_truth is None:
            raise ValueError("the gsm8k interaction needs a ground truth (interaction_kwargs.ground_truth or "
                             "the row's reward_model.ground_truth)")
        self._truth[instance_id] = ground_truth

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]],
                                **kwargs: Any) -> InteractionReply:
        if instance_id not in self._truth:
            raise KeyError(f"gsm8k interaction: no instance {instance_id!r} (start_interaction was not called)")
        answer = last_assistant_text(messages)
        if not answer.startswith("#### "):
            answer = "#### " + answer
        score = compute_score(answer, self._truth[instance_id], method="flexible", format_score=0.0, score=1.0)
        if score == 1.0:
            return InteractionReply(True, CORRECT, score)
        return InteractionReply(False, INCORRECT, score)

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        self._truth.pop(instance_id, None)
