"""Reward check before launch: score made-up answers on a few converted rows with the trainer's
reward function and tools, so a user sees 1 for the right answer and 0 for a wrong one before
spending GPU time.

For each row: the ground truth as "\\boxed{<truth>}" then "#### <truth>" (correct: the answer forms
of GSM8K's marker and of MATH's box, so gsm8k, arith, math_boxed, exact_match and multiple_choice all
read it), a wrong number written the same way, the truth without either marker, and, per chosen
tool, a tool call answering the truth in the model's format (Hermes by default; `parser`: the
tool-call parser of the model the runs will use) (scored by the reward function on the text, and by
the tool itself: create → execute → calc_reward → release). Refuses
(CheckError) when the dataset and the reward do not fit.

The reward is a built-in (trainer.rewards' registry, scored in this process) or an operator-registered
reward function (rlstudio.registry, by name): that one is operator code, so all its answers are scored
in one separate process with the registry's time limit, exactly as the trainer would load and call it.
`reward_names()` lists both.
"""
from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from typing import Any

from .presets import ground_truth_of


class CheckError(ValueError):
    """The dataset and the chosen reward or tools do not fit (the message says why); `field` names the
    request field at fault (`reward`, or `tools` for a tool that does not exist) and `code` the API's
    error code for it."""

    def __init__(self, message: str, *, field: str = "reward", code: str = "reward_mismatch"):
        super().__init__(message)
        self.field, self.code = field, code


@dataclass
class Scored:
    row: int
    kind: str  # correct | wrong | no_marker | tool_call:<name>
    answer: str
    score: float | None
    tool_score: float | None = None
    error: str = ""


def _wrong(truth: str) -> str:
    """An answer other than `truth`: the number after it where it is one (a 400-digit integer too,
    which as a float is infinite), else `truth` with a 0 added."""
    for parse in (int, float):
        try:
            return str(int(parse(truth)) + 1)
        except (ValueError, OverflowError):
            continue
    return truth + "0" if truth else "1"


def tool_call_text(tool: str, arguments: dict[str, Any], *, parser: str = "hermes") -> str:
    """A tool call as a model of `parser`'s format writes it (SGLang's parser names): Llama 3's bare JSON
    object with `parameters`, else a Hermes `<tool_call>` block (Qwen2.5, Qwen3, ChatML)."""
    if parser == "llama3":
        return json.dumps({"name": tool, "parameters": arguments})
    return f"<tool_call>{json.dumps({'name': tool, 'arguments': arguments})}</tool_call>"


def candidates(truth: str, tools: list[str], *, parser: str = "hermes") -> list[tuple[str, str]]:
    wrong = _wrong(truth)
    out = [("correct", f"The answer is computed above: \\boxed{{{truth}}}\n#### {truth}"),
           ("wrong", f"The answer is computed above: \\boxed{{{wrong}}}\n#### {wrong}"),
           ("no_marker", f"The answer is {truth}.")]
    for tool in tools:
        out.append((f"tool_call:{tool}", tool_call_text(tool, {"answer": truth}, parser=parser)))
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


def reward_names() -> list[str]:
    """What a reward check (and a run's `reward.name`) may use: the built-ins, then the operator's ready
    reward functions (rlstudio.registry), each list sorted."""
    from rlstudio.registry.services import reward_function_names
    from trainer.rewards import registered_rewards

    builtins = registered_rewards()
    return builtins + [name for name in reward_function_names() if name not in builtins]


def _registered_scorer(reward_name: str):
    """A batch scorer for the operator's reward function `reward_name`: [(source, answer, truth,
    extra_info)] -> [score or the row's error text], in a separate process with a time limit."""
    from django.conf import settings

    from rlstudio.registry.checks import check_reward_rows
    from rlstudio.registry.services import RegistryRefused, reward_function_resolve

    try:
        resolved = reward_function_resolve(name=reward_name)
    except RegistryRefused as exc:
        raise CheckError(f"unknown reward {reward_name!r}: {exc.message}; known: {', '.join(reward_names())}") from None

    def score(items: list[tuple[str, str, str, Any]]) -> list[float | str]:
        rows = [{"data_source": source, "solution_str": answer, "ground_truth": truth,
                 "extra_info": extra if isinstance(extra, dict) else {}} for source, answer, truth, extra in items]
        result = check_reward_rows(path=resolved.path, function=resolved.function, rows=rows,
                                   timeout_s=float(settings.RLSTUDIO_REGISTRY_CHECK_TIMEOUT_S))
        if not result.ok:
            raise CheckError(f"reward {reward_name!r} failed: {result.error}")
        results = result.data.get("results") or []
        if len(results) != len(items):
            raise CheckError(f"reward {reward_name!r} returned {len(results)} scores for {len(items)} answers")
        return [r["score"] if "score" in r else str(r.get("error")) for r in results]

    return score


def _builtin_scorer(reward_name: str):
    from trainer.rewards import get_reward_fn

    fn = get_reward_fn({"reward": {"name": reward_name}})

    def score(items: list[tuple[str, str, str, Any]]) -> list[float | str]:
        out: list[float | str] = []
        for source, answer, truth, extra in items:
            try:
                out.append(_score_value(fn(source, answer, truth, extra)))
            except NotImplementedError as exc:
                raise CheckError(f"reward {reward_name!r} cannot score this dataset: {exc}") from None
        return out

    return score


def reward_check(rows: list[dict[str, Any]], *, reward_name: str, tool_names: list[str],
                 parser: str = "hermes") -> list[Scored]:
    """Score the candidates of each converted row; CheckError when they cannot be scored at all."""
    from trainer.rewards import registered_rewards
    from trainer.tools.base import get_tool, registered_tools

    builtin = reward_name in registered_rewards()  # else the operator's registry, by name
    score = _builtin_scorer(reward_name) if builtin else _registered_scorer(reward_name)
    unknown = [t for t in tool_names if t not in registered_tools()]
    if unknown:
        raise CheckError(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(registered_tools())}",
                         field="tools", code="invalid")
    if not rows:
        raise CheckError("the dataset has no rows to check")
    if all(ground_truth_of(r) in (None, "") for r in rows):
        raise CheckError("the dataset has no ground truth (reward_model.ground_truth is empty on every "
                         "checked row): a rule-based reward has nothing to compare against")
    out: list[Scored] = []
    items: list[tuple[str, str, str, Any]] = []
    for i, row in enumerate(rows):
        truth = ground_truth_of(row)
        if truth in (None, ""):
            out.append(Scored(i, "correct", "", None, error="no ground truth on this row"))
            continue
        truth = str(truth)
        for kind, answer in candidates(truth, tool_names, parser=parser):
            out.append(Scored(i, kind, answer, None))
            items.append((row.get("data_source") or "", answer, truth, row.get("extra_info")))
    scored = iter(score(items))
    for item in out:
        if item.error:
            continue
        value = next(scored)
        if isinstance(value, str):  # the registered function failed on this answer: shown per row
            item.error = f"reward {reward_name} failed: {value}"
        else:
            item.score = float(value)
        if item.kind.startswith("tool_call:"):
            name = item.kind.split(":", 1)[1]
            row = rows[item.row]
            tools_kwargs = (row.get("extra_info") or {}).get("tools_kwargs") or {}
            try:
                item.tool_score = asyncio.run(_tool_score(get_tool(name), truth=str(ground_truth_of(row)),
                                                          kwargs=tools_kwargs.get(name) or {}))
            except Exception as exc:  # a tool refusing the row is a finding, shown per row
                item.error = "; ".join(filter(None, [item.error, f"tool {name} failed: {type(exc).__name__}: {exc}"]))
    return out
