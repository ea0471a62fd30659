"""A whole transcript in another model's chat template: what a reward model reads.

`render_transcript(tokenizer, messages)` renders a trajectory's messages (system, user, assistant
turns with their tool calls, tool replies) with `tokenizer`'s own chat template, no generation
prompt; only the keys chat templates know are passed (role, content, tool_calls, name,
tool_call_id), content always a string. `check_transcript_template(tokenizer)` renders a sample
conversation with a tool call and a tool reply and says what is wrong with the template, if anything
(the catalog's reward-model check). No torch here.
"""
from __future__ import annotations

from typing import Any

KEYS = ("role", "content", "tool_calls", "name", "tool_call_id")

SAMPLE = [
    {"role": "system", "content": "Use the calculator tool."},
    {"role": "user", "content": "What is 12 + 3?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1_0", "type": "function",
         "function": {"name": "calculator", "arguments": {"expression": "12+3"}}}]},
    {"role": "tool", "tool_call_id": "call_1_0", "name": "calculator", "content": "15"},
    {"role": "assistant", "content": "#### 15"},
]


def render_transcript(tokenizer: Any, messages: list[dict[str, Any]]) -> str:
    """One conversation in `tokenizer`'s chat template (no generation prompt)."""
    clean = []
    for m in messages:
        keep = {k: v for k, v in m.items() if k in KEYS}
        if not isinstance(keep.get("content"), str):
            keep["content"] = "" if keep.get("content") is None else str(keep["content"])
        clean.append(keep)
    return tokenizer.apply_chat_template(clean, tokenize=False, add_generation_prompt=False)


def check_transcript_template(tokenizer: Any) -> list[str]:
    """Problems of `tokenizer`'s template for scoring transcripts ([] when it works): it must render
    the sample conversation, tool call and tool reply included, as text containing both answers."""
    if not getattr(tokenizer, "chat_template", None):
        return ["the tokenizer has no chat template"]
    try:
        text = render_transcript(tokenizer, SAMPLE)
    except Exception as exc:  # a template that cannot render a tool conversation
        return [f"the chat template cannot render a conversation with a tool call: {type(exc).__name__}: {exc}"]
    problems = []
    if not isinstance(text, str) or "What is 12 + 3?" not in text:
        problems.append("the chat template does not render the user's message")
    elif "#### 15" not in text:
        problems.append("the chat template does not render the assistant's last message")
    elif "15" not in text.split("What is 12 + 3?", 1)[1].split("#### 15", 1)[0]:
        problems.append("the chat template does not render the tool's reply")
    return problems
