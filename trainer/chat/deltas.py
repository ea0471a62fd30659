"""Token deltas of a chat template: the ids a conversation grows by, without re-rendering its history.

A rollout keeps the engine's generated ids verbatim. What a turn adds around them (the rest of the
assistant turn's end, the tool replies, the next generation prompt) comes from the model's own chat
template. Re-rendering the whole conversation and cutting at the old length works only for templates
that render every prefix of a conversation as a prefix of the whole ("prefix-stable"); Qwen3's is not
(it wraps the last assistant turn in a ``<think>`` block and drops the blocks of turns before the last
user query), nor is a template that stamps today's date. So every delta is taken against one fixed,
short base conversation, as verl's multi-turn rollout does (its ``BASE_CHAT_HISTORY``):

    messages_delta(msgs)   = render(BASE + msgs, generation prompt) - render(BASE)
    assistant_delta(msg)   = render(BASE + [msg]) - render(BASE, generation prompt)
    turn_end               = what render(BASE + [assistant "MARK"]) puts after "MARK"

``-`` is "the text after this prefix", checked every time (a template that renders the base
differently once something follows it raises ``TemplateError``), then tokenized on its own. The
template only ever renders the new messages after the fixed base, never the request's own history, so
what it would do to earlier turns cannot matter. A trajectory is then exactly the ids the engine saw:
prompt, generated ids (loss mask 1), deltas (loss mask 0), generated ids, ...

``ChatDeltas.conversation`` builds an SFT example the same way: the prompt, then each assistant turn
as its own delta (trained on up to and including the token that closes the turn), then the messages
up to the next assistant turn as a delta ending in the generation prompt (not trained on).

Pure functions over a tokenizer (``apply_chat_template``, ``encode``): no torch, no Django. The
platform's model check reaches them through ``trainer.chat.check``.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable, Sequence

# The fixed conversation every delta is rendered after (verl's BASE_CHAT_HISTORY).
BASE_MESSAGES: tuple[dict[str, Any], ...] = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "I am a user."},
)
# Content of a probe assistant message: whatever the template renders after it closes the turn.
MARK = "RLSTUDIO-CONTENT-MARK"


# Names apply_chat_template binds itself (or the template's own tokens): not template variables.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "messages", "conversation", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
    "return_assistant_tokens_mask", "tokenizer_kwargs", "chat_template", "bos_token", "eos_token",
    "pad_token", "unk_token", "raise_exception", "strftime_now",
})


def template_kwargs_errors(kwargs: Any) -> list[str]:
    """Why ``kwargs`` cannot be extra chat-template variables (empty when they can): an object of
    lower-case names to booleans, numbers, short strings or null, none of apply_chat_template's own."""
    if not isinstance(kwargs, dict):
        return [f"must be an object of template variables, got {type(kwargs).__name__}"]
    errors = []
    for key, value in kwargs.items():
        if not isinstance(key, str) or not re.fullmatch(r"[a-z_][a-z0-9_]{0,63}", key):
            errors.append(f"{key!r} is not a template variable name (lower-case letters, digits, '_')")
        elif key in RESERVED_TEMPLATE_KWARGS:
            errors.append(f"{key!r} is set by the trainer, not by this option")
        elif not (value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 256)):
            errors.append(f"{key!r} must be a boolean, a number, a string of at most 256 characters or null")
    return errors


class TemplateError(ValueError):
    """The chat template cannot give token deltas. ``reason`` is a short code for the failed check."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def render(tokenizer: Any, messages: Sequence[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
           add_generation_prompt: bool = False, template_kwargs: dict[str, Any] | None = None) -> str:
    """The chat template's text for ``messages`` (with ``tools`` schemas when given; ``template_kwargs``
    are extra template variables, verl's ``data.apply_chat_template_kwargs``, e.g. enable_thinking)."""
    try:
        text = tokenizer.apply_chat_template(list(messages), tools=tools or None, tokenize=False,
                                             add_generation_prompt=add_generation_prompt,
                                             **(template_kwargs or {}))
    except Exception as exc:  # jinja's TemplateError, raise_exception(...) of the template itself
        roles = ", ".join(str(m.get("role")) for m in messages)
        raise TemplateError("render_failed", f"the chat template cannot render [{roles}]: "
                                             f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(text, str):
        raise TemplateError("render_failed", f"apply_chat_template returned {type(text).__name__}, not text")
    return text


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` with no BOS/EOS added (templates write their own)."""
    return list(tokenizer.encode(text, add_special_tokens=False)) if text else []


def strip_prefix(prefix: str, full: str, what: str) -> str:
    """``full`` without ``prefix``; TemplateError when ``full`` does not start with it."""
    if not full.startswith(prefix):
        at = next((i for i, (a, b) in enumerate(zip(prefix, full)) if a != b), min(len(prefix), len(full)))
        raise TemplateError("base_rewritten", f"the chat template renders the base conversation differently "
                                              f"once {what} follows it (first difference at character {at}: "
                                              f"{prefix[at:at + 40]!r} vs {full[at:at + 40]!r})")
    return full[len(prefix):]


def special_token_ids(tokenizer: Any) -> set[int]:
    """Ids of the tokenizer's added and special tokens (never produced by merging plain text)."""
    ids = set(int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []))
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(int(i) for i in decoder)
    return ids


class ChatDeltas:
    """The deltas of one tokenizer's chat template (see the module docstring).

    ``closing_ids``: ids that may close an assistant turn in place of the template's own end token
    (Llama 3's ``<|eom_id|>`` where the template writes ``<|eot_id|>``); the first token of
    ``turn_end_ids`` always does when it is a special token.
    """

    def __init__(self, tokenizer: Any, *, closing_ids: Iterable[int] = (),
                 template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self._base: dict[tuple[str, bool], str] = {}
        probe = self.render([*BASE_MESSAGES, {"role": "assistant", "content": MARK}])
        if MARK not in probe:
            raise TemplateError("no_content", "the chat template does not render an assistant message's content")
        # What closes an assistant turn after its content, e.g. "<|im_end|>\n" or "<|eot_id|>".
        self.turn_end_text = probe[probe.rindex(MARK) + len(MARK):]
        self.turn_end_ids = encode(tokenizer, self.turn_end_text)
        specials = special_token_ids(tokenizer)
        self.closing_ids = set(int(i) for i in closing_ids)
        if self.turn_end_ids and self.turn_end_ids[0] in specials:
            self.closing_ids.add(self.turn_end_ids[0])
        base = self.base_text(None, add_generation_prompt=False)
        self.generation_prompt_text = strip_prefix(base, self.base_text(None, add_generation_prompt=True),
                                                   "the generation prompt")
        # Fail now, not in the middle of a rollout: both kinds of delta must be takeable.
        self.assistant_text({"role": "assistant", "content": MARK})
        self.messages_text([{"role": "user", "content": MARK}])

    def render(self, messages: Sequence[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = False) -> str:
        """``render`` with this object's template kwargs."""
        return render(self.tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt,
                      template_kwargs=self.template_kwargs)

    # ------------------------------------------------------------------ the base conversation
    def base_text(self, tools: list[dict[str, Any]] | None, *, add_generation_prompt: bool,
                  fresh: bool = False) -> str:
        """render(BASE) for these tools, cached (``fresh`` renders it again: the date may have changed)."""
        key = (json.dumps(tools or [], sort_keys=True, ensure_ascii=False), add_generation_prompt)
        if fresh or key not in self._base:
            self._base[key] = self.render(BASE_MESSAGES, tools=tools, add_generation_prompt=add_generation_prompt)
        return self._base[key]

    def _after_base(self, full: str, tools: list[dict[str, Any]] | None, *, add_generation_prompt: bool,
                    what: str) -> str:
        base = self.base_text(tools, add_generation_prompt=add_generation_prompt)
        if not full.startswith(base):
            base = self.base_text(tools, add_generation_prompt=add_generation_prompt, fresh=True)
        return strip_prefix(base, full, what)

    # ------------------------------------------------------------------ deltas
    def messages_text(self, messages: Sequence[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                      add_generation_prompt: bool = True) -> str:
        """The text ``messages`` add after a closed turn (tool replies, a user turn), plus the
        generation prompt when asked."""
        roles = "/".join(str(m.get("role")) for m in messages) or "nothing"
        full = self.render([*BASE_MESSAGES, *messages], tools=tools, add_generation_prompt=add_generation_prompt)
        return self._after_base(full, tools, add_generation_prompt=False, what=f"a {roles} message")

    def messages_delta(self, messages: Sequence[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                       add_generation_prompt: bool = True) -> list[int]:
        """Token ids of ``messages_text``."""
        return encode(self.tokenizer, self.messages_text(messages, tools=tools,
                                                         add_generation_prompt=add_generation_prompt))

    def assistant_text(self, message: dict[str, Any], *, tools: list[dict[str, Any]] | None = None) -> str:
        """What the model emits for ``message`` after the generation prompt, the turn's end included
        (e.g. ``<tool_call>...</tool_call><|im_end|>\\n``)."""
        full = self.render([*BASE_MESSAGES, message], tools=tools)
        return self._after_base(full, tools, add_generation_prompt=True, what="an assistant message")

    def assistant_delta(self, message: dict[str, Any], *,
                        tools: list[dict[str, Any]] | None = None) -> tuple[list[int], int]:
        """(ids of ``assistant_text``, how many of them the model generates): every id up to and
        including the token that closes the turn; the template's glue after it (a newline) is not."""
        ids = encode(self.tokenizer, self.assistant_text(message, tools=tools))
        end = self.turn_end_ids
        if end and len(ids) >= len(end) and ids[-len(end):] == end and end[0] in self.closing_ids:
            return ids, len(ids) - len(end) + 1
        return ids, len(ids)

    def turn_end_completion(self, generated: Sequence[int]) -> list[int]:
        """The part of the turn end the engine did not emit itself: all of it after a stop on
        ``</tool_call>``, the glue after ``<|im_end|>``, nothing after Llama's ``<|eot_id|>``."""
        end = self.turn_end_ids
        generated = list(generated)
        for k in range(min(len(end), len(generated)), 0, -1):
            if generated[-k:] == end[:k]:
                return list(end[k:])
        if generated and generated[-1] in self.closing_ids:  # closed by an alternative end token
            return list(end[1:])
        return list(end)

    def after_turn(self, generated: Sequence[int], messages: Sequence[dict[str, Any]], *,
                   tools: list[dict[str, Any]] | None = None) -> list[int]:
        """Ids that follow an assistant turn's generated ids: the rest of its end, ``messages`` (tool
        replies) and the next generation prompt. All of it has loss mask 0."""
        return self.turn_end_completion(generated) + self.messages_delta(messages, tools=tools)

    # ------------------------------------------------------------------ SFT
    def conversation(self, messages: Sequence[dict[str, Any]], *,
                     tools: list[dict[str, Any]] | None = None) -> tuple[list[int], list[int]]:
        """(input ids, loss mask) of a whole conversation, built from deltas like a rollout: the prompt
        up to the first assistant turn with the generation prompt (mask 0), each assistant turn's
        delta (mask 1 up to its closing token), the messages between assistant turns with the next
        generation prompt (mask 0). Messages after the last assistant turn are left out."""
        first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), None)
        if first is None:
            raise ValueError("the conversation has no assistant turn to train on")
        if first == 0:
            raise ValueError("the conversation starts with an assistant turn: there is no prompt before it")
        ids = encode(self.tokenizer, self.render(messages[:first], tools=tools, add_generation_prompt=True))
        mask = [0] * len(ids)
        i = first
        while i < len(messages):
            if messages[i].get("role") == "assistant":
                turn, trained = self.assistant_delta(messages[i], tools=tools)
                ids += turn
                mask += [1] * trained + [0] * (len(turn) - trained)
                i += 1
                continue
            j = i
            while j < len(messages) and messages[j].get("role") != "assistant":
                j += 1
            if j == len(messages):
                break
            between = self.messages_delta(messages[i:j], tools=tools)
            ids += between
            mask += [0] * len(between)
            i = j
        return ids, mask
