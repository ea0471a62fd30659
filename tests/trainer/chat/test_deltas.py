"""trainer.chat: deltas against the base conversation, family detection and stop tokens, check_template.

Run on each family's tokenizer in its real format (tests/fixtures/families.py) and on hand-made
templates that break one rule each.
"""
from __future__ import annotations

import pytest

from tests.fixtures import families as F
from trainer.chat import ChatDeltas, TemplateError, check_template, detect_family
from trainer.chat.deltas import render
from trainer.chat.families import closing_token_ids, stop_token_ids

CALC = {"type": "function", "function": {"name": "calculator", "description": "Evaluate.",
                                         "parameters": {"type": "object",
                                                        "properties": {"expression": {"type": "string"}}}}}


def _deltas(tok):
    return ChatDeltas(tok, closing_ids=closing_token_ids(tok, detect_family(tok)))


def _text(tok, ids):
    return tok.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("family", F.FAMILIES)
def test_detection_stop_tokens_and_turn_end(family):
    tok = F.tokenizer(family)
    ids = F.special_ids(family)
    assert detect_family(tok).name == family
    d = _deltas(tok)
    if family == "llama3":
        assert d.turn_end_text == "<|eot_id|>" and d.turn_end_ids == [ids["<|eot_id|>"]]
        assert d.closing_ids == {ids["<|eot_id|>"], ids["<|eom_id|>"]}
        want = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"}
        assert d.generation_prompt_text == "<|start_header_id|>assistant<|end_header_id|>\n\n"
    else:
        assert d.turn_end_text == "<|im_end|>\n" and d.turn_end_ids[0] == ids["<|im_end|>"]
        assert d.closing_ids == {ids["<|im_end|>"]}
        want = {"<|im_end|>", "<|endoftext|>"}
        assert d.generation_prompt_text == "<|im_start|>assistant\n"
    assert stop_token_ids(tok) == sorted(ids[t] for t in want)


def test_qwen3_is_not_prefix_stable_yet_its_deltas_work():
    tok = F.tokenizer("qwen3")
    msgs = [{"role": "user", "content": "What is 12+34?"},
            {"role": "assistant", "content": "<think>\nAdd.\n</think>\n\nIt is 46."},
            {"role": "user", "content": "And 1+1?"}]
    head = render(tok, msgs[:1], add_generation_prompt=True)
    upto = render(tok, msgs[:2])
    full = render(tok, msgs, add_generation_prompt=True)
    assert upto.startswith(head) and not full.startswith(upto)  # the <think> of turn 1 is dropped later
    d = _deltas(tok)
    # The assistant turn as the model emits it after the generation prompt: its reasoning kept.
    turn, trained = d.assistant_delta(msgs[1])
    assert _text(tok, turn) == "<think>\nAdd.\n</think>\n\nIt is 46.<|im_end|>\n" and trained == len(turn) - 1
    # No reasoning: the template's empty think block, as Qwen3 writes its last turn.
    turn, _ = d.assistant_delta({"role": "assistant", "content": "#### 46"})
    assert _text(tok, turn) == "<think>\n\n</think>\n\n#### 46<|im_end|>\n"
    reply = d.messages_delta([{"role": "tool", "name": "calculator", "content": "46"}], tools=[CALC])
    assert _text(tok, reply) == "<|im_start|>user\n<tool_response>\n46\n</tool_response><|im_end|>\n" \
                                "<|im_start|>assistant\n"


def test_llama3_reply_is_an_ipython_turn_and_eom_closes_a_turn():
    tok = F.tokenizer("llama3")
    ids = F.special_ids("llama3")
    d = _deltas(tok)
    call = tok.encode('{"name": "calculator", "parameters": {"expression": "1+1"}}', add_special_tokens=False)
    reply = [{"role": "tool", "name": "calculator", "content": "2"}]
    after_eot = d.after_turn(call + [ids["<|eot_id|>"]], reply, tools=[CALC])
    assert _text(tok, after_eot) == ("<|start_header_id|>ipython<|end_header_id|>\n\n2<|eot_id|>"
                                     "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert d.after_turn(call + [ids["<|eom_id|>"]], reply, tools=[CALC]) == after_eot  # no <|eot_id|> added
    assert d.after_turn(call, reply, tools=[CALC]) == [ids["<|eot_id|>"]] + after_eot  # cut before the end


def test_turn_end_completion_on_chatml():
    tok = F.tokenizer("qwen2.5")
    ids = F.special_ids("qwen2.5")
    d = _deltas(tok)
    nl = tok.encode("\n", add_special_tokens=False)
    assert d.turn_end_completion([5, ids["</tool_call>"]]) == [ids["<|im_end|>"]] + nl  # stopped at the call
    assert d.turn_end_completion([5, ids["<|im_end|>"]]) == nl
    assert d.turn_end_completion([5, ids["<|im_end|>"]] + nl) == []


@pytest.mark.parametrize("family", F.FAMILIES)
def test_sft_conversation_equals_the_whole_rendering_where_the_template_is_prefix_stable(family):
    tok = F.tokenizer(family)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "#### 4"}]
    ids, mask = _deltas(tok).conversation(msgs)
    whole = tok.encode(render(tok, msgs), add_special_tokens=False)
    trained = [i for i, m in zip(ids, mask) if m]
    end = "<|eot_id|>" if family == "llama3" else "<|im_end|>"
    if family == "qwen3":  # each turn keeps its (empty) think block; the template drops turn 1's
        assert ids != whole
        assert _text(tok, trained) == f"<think>\n\n</think>\n\nHello!{end}<think>\n\n</think>\n\n#### 4{end}"
    else:
        assert ids == whole
        assert _text(tok, trained) == f"Hello!{end}#### 4{end}"


@pytest.mark.parametrize("family", F.FAMILIES)
def test_check_template_per_family(family):
    r = check_template(F.tokenizer(family))
    assert r.ok and not r.problems, r.problems
    assert r.family == family
    assert r.parser == {"qwen2.5": "qwen25", "qwen3": "qwen25", "llama3": "llama3", "chatml": None}[family]
    assert r.supports_tools == (family != "chatml")
    assert r.parser_ok is (None if family == "chatml" else True)
    assert r.prefix_stable is (family != "qwen3")
    assert set(r.stop_tokens) >= ({"<|eot_id|>", "<|eom_id|>"} if family == "llama3" else {"<|im_end|>"})
    assert r.to_dict()["stop_token_ids"] == r.stop_token_ids


def test_check_template_names_a_parser_that_cannot_read_the_calls():
    r = check_template(F.tokenizer("llama3"), parser="hermes")
    assert not r.ok and r.parser_ok is False
    assert any("tool-call parser 'hermes'" in p and '"parameters"' in p for p in r.problems), r.problems
    r = check_template(F.tokenizer("qwen2.5"), parser="llama3")
    assert not r.ok and r.parser_ok is False


def _with_template(family, template):
    tok = F.tokenizer(family)
    clone = type(tok)(tokenizer_object=tok.backend_tokenizer, eos_token=tok.eos_token, pad_token=tok.pad_token)
    clone.chat_template = template
    return clone


def test_a_template_that_rewrites_the_base_is_refused_with_why():
    # Counts the messages in the system turn: the base renders differently once anything follows it.
    tpl = ("{{- '<|im_start|>system\\n' + (messages | length | string) + '<|im_end|>\\n' -}}"
           "{%- for m in messages[1:] -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}"
           "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
    tok = _with_template("chatml", tpl)
    with pytest.raises(TemplateError) as err:
        ChatDeltas(tok)
    assert err.value.reason == "base_rewritten"
    r = check_template(tok)
    assert not r.ok and r.problems[0].startswith("token deltas: the chat template renders the base")


def test_no_template_no_content_no_end_token_are_problems():
    tok = _with_template("chatml", None)
    assert check_template(tok).problems == [
        "chat template: the tokenizer has none (tokenizer_config.json / chat_template.jinja)"]
    tok = _with_template("chatml", "{%- for m in messages -%}{{- m.role + ': ' -}}{%- endfor -%}")
    assert "does not render an assistant message's content" in check_template(tok).problems[0]
    plain = ("{%- for m in messages -%}{{- m.role + ': ' + m.content + '\\n' -}}{%- endfor -%}"
             "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}")
    r = check_template(_with_template("chatml", plain))
    assert r.family is None and any(p.startswith("end of turn:") for p in r.problems), r.problems


def test_a_raising_template_is_a_template_error():
    tok = _with_template("chatml", "{{ raise_exception('no tools here') }}")
    with pytest.raises(TemplateError, match="no tools here"):
        ChatDeltas(tok)


def test_qwen3_non_thinking_mode_through_template_kwargs():
    tok = F.tokenizer("qwen3")
    d = ChatDeltas(tok, closing_ids=closing_token_ids(tok, detect_family(tok)),
                   template_kwargs={"enable_thinking": False})
    assert d.generation_prompt_text == "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    turn, trained = d.assistant_delta({"role": "assistant", "content": "#### 46"})
    assert _text(tok, turn) == "#### 46<|im_end|>\n" and trained == len(turn) - 1  # the think block is prompt
    reply = d.messages_delta([{"role": "tool", "name": "calculator", "content": "46"}], tools=[CALC])
    assert _text(tok, reply).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    r = check_template(tok, template_kwargs={"enable_thinking": False})
    assert r.ok and r.generation_prompt.endswith("</think>\n\n"), r.problems


def test_qwen3_instruct_template_is_qwen3():
    from tests.fixtures.chat_templates import TEMPLATES

    # An instruct-only Qwen3 template renders no <think>; Qwen3's vocabulary still tells it apart.
    assert detect_family(_with_template("qwen3", TEMPLATES["qwen2.5"])).name == "qwen3"
    assert detect_family(_with_template("qwen2.5", TEMPLATES["qwen2.5"])).name == "qwen2.5"


def test_template_kwargs_are_checked():
    from trainer.chat.deltas import template_kwargs_errors
    from trainer.config import ConfigError, Config, apply_overrides, validate

    assert template_kwargs_errors({"enable_thinking": False, "date_string": "1 Jan 2025"}) == []
    assert len(template_kwargs_errors({"tools": [], "Bad-Name": 1, "x": {"a": 1}, "y": "z" * 300})) == 4
    assert template_kwargs_errors([1]) == ["must be an object of template variables, got list"]
    cfg = apply_overrides(Config(), {"data.apply_chat_template_kwargs": {"add_generation_prompt": False}})
    with pytest.raises(ConfigError, match="data.apply_chat_template_kwargs.*set by the trainer"):
        validate(cfg, require_paths=False)
