"""Does a tokenizer's chat template work for multi-turn tool-calling RL? ``check_template`` says, with why.

    report = check_template(tokenizer, tools=[schema, ...])   # never raises on a bad template
    report.ok, report.family, report.parser, report.stop_token_ids, report.problems

It plays one tool conversation through the template the way a rollout does: the prompt with the tool
schemas and the generation prompt; the assistant's tool call as the template renders it (what a model
of this format emits), read back with the tool-call parser; the tool reply and the next generation
prompt as a delta (``trainer.chat.deltas``); a final answer. It fails (``problems``, each "what: why")
when a delta cannot be taken, when the parser cannot read the call the template renders, when the
reply or the generation prompt is missing from the delta, or when no stop token ends a turn. Whether
re-rendering the whole transcript gives the same tokens (``prefix_stable``) is reported, not required:
Qwen3's template, for one, re-renders earlier turns, and trajectories are built from deltas.

Standard library plus the tokenizer object: no torch, no Django (the platform's model registration
calls it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.chat.deltas import BASE_MESSAGES, ChatDeltas, TemplateError, encode
from trainer.chat.families import Family, closing_token_ids, detect_family, stop_token_ids, template_text

SAMPLE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.",
                 "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                                "required": ["expression"]}},
}


@dataclass
class TemplateReport:
    """What ``check_template`` found. ``problems`` empty <=> ``ok``."""

    ok: bool
    family: str | None  # qwen2.5 | qwen3 | llama3 | chatml | None (none of ours)
    parser: str | None  # tool-call parser (SGLang's name) the check used; None: no tool calls
    supports_tools: bool  # the template renders tool schemas and tool calls
    parser_ok: bool | None = None  # the parser reads the call the template renders (None: not checked)
    end_of_turn: str = ""  # text closing an assistant turn, e.g. "<|im_end|>\n"
    end_of_turn_ids: list[int] = field(default_factory=list)
    stop_tokens: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    generation_prompt: str = ""
    prefix_stable: bool | None = None  # re-rendering the transcript gives the trajectory's tokens
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tool_name(tools: list[dict[str, Any]]) -> str:
    fn = tools[0].get("function", tools[0]) if tools else {}
    return str(fn.get("name") or "calculator")


def check_template(tokenizer: Any, *, tools: list[dict[str, Any]] | None = None, parser: str | None = None,
                   template_kwargs: dict[str, Any] | None = None) -> TemplateReport:
    """Check the template for multi-turn rollout and SFT (module docstring). ``parser``: the
    tool-call parser to check (default: the family's); ``template_kwargs``: extra template variables
    (``data.apply_chat_template_kwargs``)."""
    from trainer.rollout.parser import get_parser, split_reasoning

    family: Family | None = detect_family(tokenizer)
    report = TemplateReport(ok=False, family=family.name if family else None,
                            parser=parser or (family.parser if family else "hermes"), supports_tools=False)
    if not template_text(tokenizer):
        report.problems.append("chat template: the tokenizer has none (tokenizer_config.json / chat_template.jinja)")
        return report
    if family is None:
        report.notes.append("the template is none of qwen2.5, qwen3, llama3, chatml; checked as it is")
    try:
        deltas = ChatDeltas(tokenizer, closing_ids=closing_token_ids(tokenizer, family),
                            template_kwargs=template_kwargs)
    except TemplateError as exc:
        report.problems.append(f"token deltas: {exc}")
        return report
    report.end_of_turn, report.end_of_turn_ids = deltas.turn_end_text, list(deltas.turn_end_ids)
    report.generation_prompt = deltas.generation_prompt_text
    report.stop_token_ids = stop_token_ids(tokenizer, family, extra=deltas.closing_ids)
    report.stop_tokens = [tokenizer.convert_ids_to_tokens(i) for i in report.stop_token_ids]
    if not deltas.closing_ids:
        report.problems.append(f"end of turn: the template closes an assistant turn with "
                               f"{deltas.turn_end_text!r}, which starts with no special token to stop on")
    if not report.generation_prompt:
        report.problems.append("generation prompt: add_generation_prompt=True adds nothing")

    tools = list(tools or [SAMPLE_TOOL])
    name = _tool_name(tools)
    args = {"expression": "12+34"}
    prompt_msgs = [dict(BASE_MESSAGES[0]), {"role": "user", "content": "What is 12+34?"}]
    try:
        prompt_text = deltas.render(prompt_msgs, tools=tools, add_generation_prompt=True)
        call_msg = {"role": "assistant", "content": "",
                    "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}]}
        call_text = deltas.assistant_text(call_msg, tools=tools)
    except TemplateError as exc:
        report.problems.append(f"tool call: {exc}")
        report.ok = not report.problems
        return report
    report.supports_tools = name in prompt_text and name in call_text
    if not report.supports_tools:
        report.parser = parser
        report.notes.append("the template renders no tool schemas or tool calls: for conversations without tools")
    reply = {"role": "tool", "tool_call_id": "call_0", "name": name, "content": "46"}
    answer = {"role": "assistant", "content": "#### 46"}
    try:
        reply_text = deltas.messages_text([reply], tools=tools)
        answer_ids, _ = deltas.assistant_delta(answer, tools=tools)
    except TemplateError as exc:
        report.problems.append(f"tool reply: {exc}")
        report.ok = not report.problems
        return report
    if "46" not in reply_text:
        report.problems.append(f"tool reply: the delta {reply_text!r} does not contain the reply")
    if not reply_text.endswith(deltas.generation_prompt_text):
        report.problems.append(f"tool reply: the delta {reply_text!r} does not end with the generation prompt "
                               f"{deltas.generation_prompt_text!r}")

    # What the engine would generate for the call: the template's text up to the closing token.
    call_ids, generated = deltas.assistant_delta(call_msg, tools=tools)
    engine_ids = call_ids[:generated]
    if report.supports_tools and report.parser:
        try:
            p = get_parser(report.parser)
        except KeyError as exc:
            report.problems.append(f"tool-call parser: {exc.args[0]}")
        else:
            text_ids = [i for i in engine_ids if i not in deltas.closing_ids]
            _, visible = split_reasoning(tokenizer.decode(text_ids, skip_special_tokens=False))
            parsed = p.parse(visible)
            got = [(c.name, c.arguments) for c in parsed.calls]
            report.parser_ok = got == [(name, args)]
            if not report.parser_ok:
                why = "; ".join(e.message for e in parsed.errors) or f"found {got}"
                report.problems.append(f"tool-call parser {report.parser!r}: cannot read the call this template "
                                       f"renders ({visible.strip()!r}): {why}")

    # The trajectory a rollout would build, against the template's rendering of the whole transcript.
    trajectory = (encode(tokenizer, prompt_text) + engine_ids
                  + deltas.after_turn(engine_ids, [reply], tools=tools) + answer_ids)
    try:
        full = deltas.render([*prompt_msgs, call_msg, reply, answer], tools=tools)
        report.prefix_stable = encode(tokenizer, full) == trajectory
    except TemplateError as exc:
        report.prefix_stable = False
        report.notes.append(f"whole transcript: {exc}")
    if report.prefix_stable is False:
        report.notes.append("re-rendering a whole transcript differs from the turn-by-turn tokens (the template "
                            "rewrites earlier turns): trajectories and SFT examples are built from deltas")
    report.ok = not report.problems
    return report
