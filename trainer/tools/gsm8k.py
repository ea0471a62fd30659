"""The `calc_gsm8k_reward` tool (verl's Gsm8kTool semantics, docs/design.md §4.4).

State per instance id (= request id): the last answer, the ground truth, the best reward so far.
execute: the answer gets a "#### " prefix when missing and is scored with the flexible GSM8K method;
step reward 0.0 when it improved over the previous best, else -0.05; reply
"Current parsed answer=... reward=...". calc_reward: flexible score of the stored answer.
"""
from __future__ import annotations

from typing import Any

from trainer.rewards.gsm8k import compute_score
from trainer.tools.base import BaseTool, ToolArgumentError, ToolResult, register_tool


@register_tool
class Gsm8kTool(BaseTool):
    name = "calc_gsm8k_reward"
    verl_class_name = "verl.tools.gsm8k_tool.Gsm8kTool"
    schema: dict[str, Any] = {
        "type": "function",
        "function": {
            "name": "calc_gsm8k_reward",
            "description": "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is "
                           "correct, 0.0 if parsed answer is incorrect or not correctly parsed)",
            "parameters": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string", "description": "The model's answer to the GSM8K math problem, must be a digits"},
                },
                "required": ["answer"],
            },
        },
    }

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__(config)
        self._state: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id: str, ground_truth: Any = None, **kwargs: Any) -> None:
        self._state[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}

    def _state_of(self, instance_id: str) -> dict[str, Any]:
        if instance_id not in self._state:
            raise KeyError(f"{self.name}: no instance {instance_id!r} (create() was not called)")
        return self._state[instance_id]

    async def execute(self, instance_id: str, arguments: dict[str, Any], **kwargs: Any) -> ToolResult:
        self.check_arguments(arguments)
        state = self._state_of(instance_id)
        answer = arguments["answer"]
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise ToolArgumentError("answer must be a string")
        answer = str(answer)
        state["response"] = answer if answer.startswith("#### ") else "#### " + answer
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else -0.05
        state["reward"] = reward  # verl overwrites (a worse answer lowers the bar)
        return ToolResult(f"Current parsed answer={answer!r} reward={reward}", step_reward, {})

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._state_of(instance_id)
        return compute_score(state["response"], state["ground_truth"], method="flexible",
                             format_score=0.0, score=1.0)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._state.pop(instance_id, None)
