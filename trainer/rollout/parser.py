"""Tool-call parsers, one per format, in a registry named with SGLang's ``tool_call_parser`` names.

    hermes, qwen25  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Qwen2.5, Qwen3,
                    the tiny models); several blocks per turn; ``</tool_call>`` closes one call
    llama3          Llama 3.1 / 3.2 JSON calls: ``{"name": ..., "parameters": {...}}``, optionally after
                    ``<|python_tag|>``, several separated by ``;``

Chosen by ``actor_rollout_ref.rollout.multi_turn.format`` (verl's key; ``get_parser(name)``).
``parse(text)`` never raises: every call attempt becomes either a ``ToolCall`` or a ``ToolCallError``
(bad JSON, not an object, missing/empty name, arguments not an object, unclosed tag), so the agent can
show the model what went wrong. ``content`` is the text outside the calls (the assistant message).
Arguments are always an object (a dict): given as a JSON string that decodes to an object (the OpenAI
wire form) they are decoded; anything else non-object is an error. ``parameters`` is accepted for
``arguments`` (and the other way round) in every format, as SGLang does.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
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


def call_from_object(obj: Any, raw: str) -> ToolCall | ToolCallError:
    """A decoded JSON value as a call: an object with a non-empty "name" and object arguments."""
    if not isinstance(obj, dict):
        return ToolCallError("not_object", f"tool call must be a JSON object, got {type(obj).__name__}", raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCallError("missing_name", "tool call has no \"name\" string", raw)
    args = obj.get("arguments", obj.get("parameters", {}))
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


def _parse_block(raw: str) -> ToolCall | ToolCallError:
    try:
        obj = json.loads(raw.strip())
    except (json.JSONDecodeError, ValueError) as exc:
        return ToolCallError("bad_json", f"tool call is not valid JSON ({exc.msg} at char {exc.pos})", raw)
    return call_from_object(obj, raw)


class ToolCallParser:
    """One tool-call format. ``close_token``: the token that ends one call, a stop token when a turn
    may hold one call only (None when the format has none)."""

    name = ""
    close_token: str | None = None

    def parse(self, text: str) -> ParseResult:
        raise NotImplementedError


class HermesParser(ToolCallParser):
    """``<tool_call>{json}</tool_call>`` blocks anywhere in the text."""

    name = "hermes"
    close_token = CLOSE_TAG

    def parse(self, text: str) -> ParseResult:
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


class Llama3Parser(ToolCallParser):
    """Llama 3.1 / 3.2 JSON calls. After ``<|python_tag|>`` the rest of the turn is calls (text before
    the tag is content); without the tag, a turn is a call when it starts with a JSON object that has
    a "name" (or starts with ``{`` and mentions "name" but is not valid JSON: a malformed call);
    any other text is plain content."""

    name = "llama3"

    def parse(self, text: str) -> ParseResult:
        if PYTHON_TAG in text:
            cut = text.index(PYTHON_TAG)
            content, body, tagged = text[:cut], text[cut + len(PYTHON_TAG):], True
        elif text.lstrip().startswith("{"):
            content, body, tagged = "", text.lstrip(), False
        else:
            return ParseResult(content=text.strip())
        decoder = json.JSONDecoder()
        calls: list[ToolCall] = []
        errors: list[ToolCallError] = []
        pos, rest = 0, ""
        while True:
            while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
                pos += 1
            if pos >= len(body):
                break
            if body[pos] != "{" and (calls or errors):
                rest = body[pos:]  # text after the calls is content
                break
            try:
                obj, end = decoder.raw_decode(body, pos)
            except json.JSONDecodeError as exc:
                if not tagged and not (calls or errors) and '"name"' not in body:
                    return ParseResult(content=text.strip())
                errors.append(ToolCallError("bad_json", f"tool call is not valid JSON ({exc.msg} at char "
                                                        f"{exc.pos - pos})", body[pos:]))
                break
            item = call_from_object(obj, body[pos:end])
            if not tagged and not (calls or errors) and not (isinstance(obj, dict) and "name" in obj):
                return ParseResult(content=text.strip())  # a JSON answer, not a call
            (calls if isinstance(item, ToolCall) else errors).append(item)
            pos = end
        return ParseResult(content=(content + rest).strip(), calls=calls, errors=errors)


_PARSERS: dict[str, Callable[[], ToolCallParser]] = {}


def register_parser(*names: str) -> Callable[[type[ToolCallParser]], type[ToolCallParser]]:
    """Class decorator: make a ToolCallParser subclass choosable under each of ``names``."""

    def deco(cls: type[ToolCallParser]) -> type[ToolCallParser]:
        for n in names:
            if n in _PARSERS:
                raise ValueError(f"tool-call parser {n!r} is already registered")
            _PARSERS[n] = cls
        return cls

    return deco


register_parser("hermes", "qwen25")(HermesParser)
register_parser("llama3")(Llama3Parser)


def get_parser(name: str) -> ToolCallParser:
    """The parser registered as ``name`` (a KeyError names the known ones)."""
    if name not in _PARSERS:
        raise KeyError(f"unknown tool-call parser {name!r}; known: {available_parsers()}")
    parser = _PARSERS[name]()
    parser.name = name
    return parser


def available_parsers() -> list[str]:
    return sorted(_PARSERS)


def parse_tool_calls(text: str) -> ParseResult:
    """Hermes blocks in ``text`` (the ``hermes`` parser). Never raises."""
    return HermesParser().parse(text)


def split_reasoning(text: str) -> tuple[str, str]:
    """(the ``<think>...</think>`` part a reasoning model wrote first, the rest): tool calls are read
    from the rest only. No closing ``</think>``: no reasoning part."""
    end = text.find("</think>")
    if end < 0:
        return "", text
    end += len("</think>")
    return text[:end], text[end:]
