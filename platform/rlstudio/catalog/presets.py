"""Presets: convert one uploaded row into the trainer's row format (verl's shape), or refuse it.

Owns the field checks each layout needs (names, types, chat roles, message shape) and the
conversion. The output is what `trainer.data` reads (its "verl" row shape):

    {"data_source": str, "prompt": [messages], "ability": str,
     "reward_model": {"style": "rule", "ground_truth": str | None},
     "extra_info": {"index": int, "tools": [tool names], "tools_kwargs": {...}, ...}}

gsm8k: `question` / `answer` → system + user messages offering the `calc_gsm8k_reward` tool, ground
truth = the text after the last "#### " with commas removed (as verl's gsm8k_multiturn_w_tool.py).
messages: `messages` (+ `ground_truth`) → the prompt is every message up to the last user message.
verl: rows already in that shape, passed through as they are after checking.
auto: picks one of the three from the first row's fields. No Django here.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from .formats import RowError

ROLES = ("system", "user", "assistant", "tool")
PRESETS = ("auto", "gsm8k", "messages", "verl")
GSM8K_TOOL = "calc_gsm8k_reward"
GSM8K_DATA_SOURCE = "openai/gsm8k"
# verl's examples/data_preprocess/gsm8k_multiturn_w_tool.py prompt, in our own words where it allows.
GSM8K_SYSTEM = (
    "You are a math expert. You are given a question and you need to solve it step by step. "
    "Reasoning step by step before any tool call. You should use the `calc_gsm8k_reward` tool after "
    "step by step solving the question, before generate final answer at least once and refine your "
    "answer if necessary. Put your final answer in the format of `#### <answer>`."
)
GSM8K_INSTRUCTION = "Let's think step by step and output the final answer after `####`."


def _field_text(row: dict[str, Any], key: str, *, line: int, unit: str, required: bool = True) -> str | None:
    if key not in row or row[key] is None:
        if required:
            raise RowError(f"missing (the preset needs it; the row has {sorted(row)})",
                           line=line, field=key, unit=unit)
        return None
    value = row[key]
    if not isinstance(value, str):
        raise RowError(f"must be text, got {type(value).__name__}", line=line, field=key, unit=unit)
    if "\x00" in value:
        raise RowError("contains a NUL byte", line=line, field=key, unit=unit)
    return value


def gsm8k_ground_truth(answer: str) -> str | None:
    """The text after the last "#### " with commas removed (None when there is no "#### ")."""
    marker = answer.rfind("#### ")
    if marker < 0:
        return None
    return answer[marker + 5:].strip().replace(",", "")


def convert_gsm8k(row: dict[str, Any], *, index: int, line: int, unit: str, split: str) -> dict[str, Any]:
    question = _field_text(row, "question", line=line, unit=unit)
    answer = _field_text(row, "answer", line=line, unit=unit)
    if not question.strip():
        raise RowError("is empty", line=line, field="question", unit=unit)
    truth = gsm8k_ground_truth(answer)
    if not truth:
        raise RowError("has no final answer after '#### '", line=line, field="answer", unit=unit)
    return {
        "data_source": GSM8K_DATA_SOURCE,
        "prompt": [
            {"role": "system", "content": GSM8K_SYSTEM},
            {"role": "user", "content": question + " " + GSM8K_INSTRUCTION},
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {
            "split": split, "index": index, "answer": answer, "question": question,
            "need_tools_kwargs": True, "tools": [GSM8K_TOOL],
            "tools_kwargs": {GSM8K_TOOL: {"create_kwargs": {"ground_truth": truth}}},
        },
    }


def _maybe_json(value: Any, *, line: int, field: str, unit: str) -> Any:
    """CSV cells are text: a list/object field may arrive as its JSON text."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise RowError(f"holds text that is not valid JSON ({exc.msg})", line=line, field=field, unit=unit) from None
        except RecursionError:
            raise RowError("holds JSON nested too deeply", line=line, field=field, unit=unit) from None
    return value


def check_messages(value: Any, *, line: int, field: str, unit: str) -> list[dict[str, Any]]:
    """A list of chat messages with known roles and text content (None-valued keys dropped)."""
    value = _maybe_json(value, line=line, field=field, unit=unit)
    if not isinstance(value, list):
        raise RowError(f"must be a list of chat messages, got {type(value).__name__}", line=line, field=field, unit=unit)
    if not value:
        raise RowError("is an empty list of messages", line=line, field=field, unit=unit)
    out = []
    for i, msg in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(msg, dict):
            raise RowError(f"must be an object with 'role' and 'content', got {type(msg).__name__}",
                           line=line, field=where, unit=unit)
        msg = {k: v for k, v in msg.items() if v is not None}  # Arrow fills absent struct keys with None
        role = msg.get("role")
        if role not in ROLES:
            raise RowError(f"unknown chat role {role!r} (allowed: {', '.join(ROLES)})",
                           line=line, field=f"{where}.role", unit=unit)
        content = msg.get("content")
        if content is None and not (role == "assistant" and msg.get("tool_calls")):
            raise RowError("missing message content", line=line, field=f"{where}.content", unit=unit)
        if content is not None and not isinstance(content, str):
            raise RowError(f"message content must be text, got {type(content).__name__}",
                           line=line, field=f"{where}.content", unit=unit)
        if content is not None and "\x00" in content:
            raise RowError("contains a NUL byte", line=line, field=f"{where}.content", unit=unit)
        out.append(msg)
    return out


def _ground_truth(value: Any, *, line: int, field: str, unit: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise RowError(f"must be text or a number, got {type(value).__name__}", line=line, field=field, unit=unit)
    return str(value)


def convert_messages(row: dict[str, Any], *, index: int, line: int, unit: str, split: str) -> dict[str, Any]:
    if "messages" not in row or row["messages"] is None:
        raise RowError(f"missing (the preset needs it; the row has {sorted(row)})", line=line, field="messages", unit=unit)
    convo = check_messages(row["messages"], line=line, field="messages", unit=unit)
    last_user = max((i for i, m in enumerate(convo) if m["role"] == "user"), default=-1)
    if last_user < 0:
        raise RowError("has no user message", line=line, field="messages", unit=unit)
    if "ground_truth" not in row:
        raise RowError(f"missing (the preset needs it; the row has {sorted(row)})", line=line, field="ground_truth", unit=unit)
    truth = _ground_truth(row["ground_truth"], line=line, field="ground_truth", unit=unit)
    source = row.get("data_source") or ""
    if not isinstance(source, str):
        raise RowError("must be text", line=line, field="data_source", unit=unit)
    extra: dict[str, Any] = {"index": index, "split": split}
    tools = _maybe_json(row.get("tools"), line=line, field="tools", unit=unit)
    if tools:
        if not isinstance(tools, list) or not all(isinstance(t, (str, dict)) for t in tools):
            raise RowError("must be a list of tool names or schemas", line=line, field="tools", unit=unit)
        extra["tools"] = tools
    return {"data_source": source, "prompt": convo[: last_user + 1], "ability": str(row.get("ability") or ""),
            "reward_model": {"style": "rule", "ground_truth": truth}, "extra_info": extra}


def convert_verl(row: dict[str, Any], *, index: int, line: int, unit: str, split: str) -> dict[str, Any]:
    if "prompt" not in row or row["prompt"] is None:
        raise RowError(f"missing (the preset needs it; the row has {sorted(row)})", line=line, field="prompt", unit=unit)
    out = dict(row)
    prompt = _maybe_json(row["prompt"], line=line, field="prompt", unit=unit)
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    out["prompt"] = check_messages(prompt, line=line, field="prompt", unit=unit)
    if "data_source" in row and row["data_source"] is not None and not isinstance(row["data_source"], str):
        raise RowError("must be text", line=line, field="data_source", unit=unit)
    reward_model = _maybe_json(row.get("reward_model"), line=line, field="reward_model", unit=unit)
    if reward_model is not None:
        if not isinstance(reward_model, dict):
            raise RowError("must be an object such as {\"ground_truth\": ...}", line=line, field="reward_model", unit=unit)
        _ground_truth(reward_model.get("ground_truth"), line=line, field="reward_model.ground_truth", unit=unit)
        out["reward_model"] = reward_model
    extra = _maybe_json(row.get("extra_info"), line=line, field="extra_info", unit=unit)
    if extra is not None and not isinstance(extra, dict):
        raise RowError("must be an object", line=line, field="extra_info", unit=unit)
    if extra is not None:
        out["extra_info"] = extra
    return out


CONVERTERS: dict[str, Callable[..., dict[str, Any]]] = {
    "gsm8k": convert_gsm8k, "messages": convert_messages, "verl": convert_verl,
}


def recognise(row: dict[str, Any], *, line: int, unit: str) -> str:
    """The preset for a layout (auto): verl, then messages, then gsm8k; RowError otherwise."""
    if "prompt" in row:
        return "verl"
    if "messages" in row:
        return "messages"
    if "question" in row and "answer" in row:
        return "gsm8k"
    raise RowError(f"cannot recognise the layout from the columns {sorted(row)}: expected `question` + "
                   "`answer` (gsm8k), `messages` + `ground_truth` (messages) or `prompt` (verl)",
                   line=line, unit=unit)


def ground_truth_of(converted: dict[str, Any]) -> Any:
    rm = converted.get("reward_model")
    return rm.get("ground_truth") if isinstance(rm, dict) else converted.get("ground_truth")
