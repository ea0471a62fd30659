"""Reward check before launch: score made-up answers on a few converted rows with the trainer's
reward function and tools, so a user sees 1 for the right answer and 0 for a wrong one before
spending GPU time.

For each row: the ground truth as "#### <truth>" (correct), a wrong number, the truth without the
"####" marker, and, per chosen tool, a Hermes tool call answering the truth (scored by the reward
function on the text, and by the tool itself: create → execute → calc_reward → release). Refuses
(CheckError) when the dataset and the reward do not fit. No Django here.
"""
from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Any

from .presets import ground_truth_of


class CheckError(ValueError):
    """The dataset and the chosen reward or tools do not fit (the message says why)."""


@dataclass
class Scored:
    row: int
    kind: str  # correct | wrong | no_marker | tool_call:<name>
    answer: str
    score: float | None
    tool_score: float | None = None
    error: str = ""


def _wrong(truth: str) -> str:
    try:
        return str(int(float(truth)) + 1)
    except ValueError:
        return truth + "0" if truth else "1"


def candidates(truth: str, tools: list[str]) -> list[tuple[str, str]]:
    out = [("correct", f"The answer is computed above.\n#### {truth}"),
           ("wrong", f"The answer is computed above.\n#### {_wrong(truth)}"),
           ("no_marker", f"The answer is {truth}.")]
    for tool in tools:
        call = json.dumps({"name": tool, "arguments": {"answer": truth}})
        out.append((f"tool_call:{tool}", f"<tool_call>{call}</tool_call>"))
    return out


def _score_value(value: Any) -> float:
    if isinstance(value, dict):
        value = value.get("score")
    return float(value)


async def _tool_score(tool: Any, *, truth: str, kwargs: dict[str, Any]) -> float:
    instance = uuid.uuid4().hex
    create = dict((kwargs.get("create_kwargs") or {}))
    create.setdefault("ground_truth", truth)
    await tool.create(instance, **create)
    try:
        await tool.execute(instance, {"answer": truth}, **(kwargs.get("execute_kwargs") or {}))
        return float(await tool.calc_reward(instance, **(kwargs.get("calc_reward_kwargs") or {})))
    finally:
        await tool.release(instance)


def reward_check(rows: list[dict[str, Any]], *, reward_name: str, tool_names: list[str]) -> list[Scored]:
    """Score the candidates of each converted row; CheckError when they cannot be scored at all."""
    from trainer.rewards import get_reward_fn, registered_rewards
    from trainer.tools.base import get_tool, registered_tools

    if reward_name not in registered_rewards():
        raise CheckError(f"unknown reward {reward_name!r}; known: {', '.join(registered_rewards())}")
    unknown = [t for t in tool_names if t not in registered_tools()]
    if unknown:
        raise CheckError(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(registered_tools())}")
    if not rows:
        raise CheckError("the dataset has no rows to check")
    if all(ground_truth_of(r) in (None, "") for r in rows):
        raise CheckError("the dataset has no ground truth (reward_model.ground_truth is empty on every "
                         "checked row): a rule-based reward has nothing to compare against")
    fn = get_reward_fn({"reward": {"name": reward_name}})
    out: list[Scored] = []
    for i, row in enumerate(rows):
        truth = ground_truth_of(row)
        if truth in (None, ""):
            out.append(Scored(i, "correct", "", None, error="no ground truth on this row"))
            continue
        truth = str(truth)
        source = row.get("data_source") or ""
        tools_kwargs = (row.get("extra_info") or {}).get("tools_kwargs") or {}
        for kind, answer in candidates(truth, tool_names):
            try:
                score = _score_value(fn(source, answer, truth, row.get("extra_info")))
            except NotImplementedError as exc:
                raise CheckError(f"reward {reward_name!r} cannot score this dataset: {exc}") from None
            item = Scored(i, kind, answer, score)
            if kind.startswith("tool_call:"):
                name = kind.split(":", 1)[1]
                try:
                    item.tool_score = asyncio.run(_tool_score(get_tool(name), truth=truth,
                                                              kwargs=tools_kwargs.get(name) or {}))
                except Exception as exc:  # a tool refusing the row is a finding, shown per row
                    item.error = f"tool {name} failed: {type(exc).__name__}: {exc}"
            out.append(item)
    return out
