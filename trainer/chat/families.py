"""Chat-format families: how a tokenizer's chat template is recognised, and each family's tokens.

    qwen2.5  ChatML turns, tools in the system turn, Hermes-style ``<tool_call>{json}</tool_call>``,
             replies in ``<tool_response>`` inside a user turn; parser ``qwen25`` (SGLang's name)
    qwen3    the same plus ``<think>`` blocks (thinking and instruct variants: a template without
             ``<think>`` over Qwen3's vocabulary is its instruct variant); parser ``qwen25``
    llama3   Llama 3.1 / 3.2 headers, JSON tool calls ``{"name", "parameters"}`` (``<|python_tag|>``
             optional), replies in the ``ipython`` role; turns end with ``<|eot_id|>`` (or
             ``<|eom_id|>`` after a call in ipython mode); parser ``llama3``
    chatml   plain ChatML without tools; no parser

A family is recognised from the template's text (its role headers and tool markup) and the
vocabulary; nothing here loads a model. ``stop_token_ids`` is what generation stops on: the
tokenizer's EOS, the family's end-of-turn tokens present in the vocabulary and the token the template
itself closes an assistant turn with.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Family:
    """One chat format."""

    name: str
    parser: str | None  # default tool-call parser (SGLang's tool_call_parser name); None: no tools
    stop_tokens: tuple[str, ...]  # end generation (when in the vocabulary)
    closing_tokens: tuple[str, ...]  # may close an assistant turn (as the engine emits it)
    description: str


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("qwen2.5", "qwen25", ("<|im_end|>", "<|endoftext|>"), ("<|im_end|>",),
           "ChatML with Hermes-style <tool_call> JSON (Qwen2.5)"),
    Family("qwen3", "qwen25", ("<|im_end|>", "<|endoftext|>"), ("<|im_end|>",),
           "ChatML with <think> blocks and Hermes-style <tool_call> JSON (Qwen3)"),
    Family("llama3", "llama3", ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"), ("<|eot_id|>", "<|eom_id|>"),
           "Llama 3.1 / 3.2 headers, JSON tool calls, the ipython role"),
    Family("chatml", None, ("<|im_end|>", "<|endoftext|>"), ("<|im_end|>",),
           "plain ChatML without tools"),
)}


def template_text(tokenizer: Any) -> str:
    """The tokenizer's chat template source ('' when it has none; named templates joined)."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        return "\n".join(str(v) for v in tpl.values())
    return tpl if isinstance(tpl, str) else ""


def token_id(tokenizer: Any, token: str) -> int | None:
    """The id of ``token`` when it is one token of the vocabulary, else None (a lookup, not
    ``get_vocab()``, which copies a 150k-entry vocabulary on every call)."""
    tid = tokenizer.convert_tokens_to_ids(token)
    if tid is None or isinstance(tid, list):
        return None
    return int(tid) if tokenizer.convert_ids_to_tokens(int(tid)) == token else None


def detect_family(tokenizer: Any) -> Family | None:
    """The family of the tokenizer's chat template, or None when it is none of ours."""
    tpl = template_text(tokenizer)
    if "<|start_header_id|>" in tpl and token_id(tokenizer, "<|eot_id|>") is not None:
        return FAMILIES["llama3"]
    if "<|im_start|>" in tpl:
        if "<think>" in tpl or "reasoning_content" in tpl:
            return FAMILIES["qwen3"]
        if "<tool_call>" in tpl:
            # Qwen3's instruct-only releases render no <think> but keep Qwen3's vocabulary.
            return FAMILIES["qwen3" if token_id(tokenizer, "<think>") is not None else "qwen2.5"]
        return FAMILIES["chatml"]
    return None


def _eos_ids(tokenizer: Any) -> list[int]:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return []
    return [int(i) for i in eos] if isinstance(eos, (list, tuple)) else [int(eos)]


def closing_token_ids(tokenizer: Any, family: Family | None) -> list[int]:
    """Ids of the family's turn-closing tokens present in the vocabulary."""
    names: Iterable[str] = family.closing_tokens if family else ()
    return sorted({tid for tid in (token_id(tokenizer, t) for t in names) if tid is not None})


def stop_token_ids(tokenizer: Any, family: Family | None = None, *, extra: Iterable[int] = ()) -> list[int]:
    """What generation stops on: EOS, the family's stop tokens present in the vocabulary, and
    ``extra`` (``ChatDeltas.closing_ids``: the token the template itself closes a turn with)."""
    family = family if family is not None else detect_family(tokenizer)
    ids = set(_eos_ids(tokenizer))
    ids.update(tid for tid in (token_id(tokenizer, t) for t in (family.stop_tokens if family else ()))
               if tid is not None)
    ids.update(int(i) for i in extra)
    return sorted(ids)
