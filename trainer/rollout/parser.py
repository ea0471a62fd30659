"""Hermes-style tool-call parsing: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks.

`parse_tool_calls(text)` never raises: every block becomes either a `ToolCall` or a `ToolCallError`
(bad JSON, not an object, missing/empty name, arguments not an object, unclosed tag), so the agent
can show the model what went wrong. `content` is the text outside the blocks (the assistant message).
Arguments given as a JSON string that itself decodes to an object are accepted (some models emit the
OpenAI wire form); anything else non-object is an error.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    raw: str = ""


@dataclass
class ToolCallError:
    reason: str  # bad_json | not_object | missing_name | bad_arguments | unclosed_tag
    message: str  # human/model-readable explanation
    raw: str = ""


@dataclass
class ParseResult:
    content: str  # text outside tool-call blocks, stripped
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ToolCallError] = field(default_factory=list)

    @property
    def has_tool_call(self) -> bool:
        return bool(self.calls or self.errors)


def _parse_block(raw: str) -> ToolCall | ToolCallError:
    body = raw.strip()
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, ValueError) as exc:
        return ToolCallError("bad_json", f"tool call is not valid JSON ({exc.msg} at char {exc.pos})", raw)
    if not isinstance(obj, dict):
        return ToolCallError("not_object", f"tool call must be a JSON object, got {type(obj).__name__}", raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCallError("missing_name", "tool call has no \"name\" string", raw)
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (json.JSONDecodeError, ValueError):
            return ToolCallError("bad_arguments", f"arguments of {name!r} are a string that is not JSON", raw)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCallError("bad_arguments", f"arguments of {name!r} must be a JSON object", raw)
    return ToolCall(name.strip(), args, raw)


def parse_tool_calls(text: str) -> ParseResult:
    """Split `text` into content and tool calls. Never raises."""
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    pieces: list[str] = []
    pos = 0
    for m in _BLOCK.finditer(text):
        pieces.append(text[pos:m.start()])
        item = _parse_block(m.group(1))
        (calls if isinstance(item, ToolCall) else errors).append(item)
        pos = m.end()
    tail = text[pos:]
    if OPEN_TAG in tail:
        cut = tail.index(OPEN_TAG)
        errors.append(ToolCallError("unclosed_tag", f"{OPEN_TAG} without a closing {CLOSE_TAG}",
                                    tail[cut + len(OPEN_TAG):]))
        tail = tail[:cut]
    pieces.append(tail)
    return ParseResult(content="".join(pieces).strip(), calls=calls, errors=errors)
