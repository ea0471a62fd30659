"""Tool-call parsers (hermes / qwen25, llama3): well-formed calls, every malformed case as a structured
error, no raise; the registry; the reasoning split."""
import pytest

from trainer.rollout.parser import available_parsers, get_parser, parse_tool_calls, split_reasoning


def test_single_call_and_content():
    text = 'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "37*48"}}\n</tool_call>'
    r = parse_tool_calls(text)
    assert r.content == "Let me compute."
    assert [(c.name, c.arguments) for c in r.calls] == [("calculator", {"expression": "37*48"})]
    assert r.errors == [] and r.has_tool_call


def test_two_calls_and_string_arguments():
    text = ('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> mid '
            '<tool_call>{"name": "b", "arguments": "{\\"y\\": 2}"}</tool_call>')
    r = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in r.calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert r.content == "mid"


def test_no_call():
    r = parse_tool_calls("#### 42")
    assert not r.has_tool_call and r.content == "#### 42"


def test_malformed_cases_are_errors_not_exceptions():
    cases = {
        "<tool_call>{name: calculator}</tool_call>": "bad_json",
        "<tool_call>[1, 2]</tool_call>": "not_object",
        '<tool_call>{"arguments": {}}</tool_call>': "missing_name",
        '<tool_call>{"name": "  ", "arguments": {}}</tool_call>': "missing_name",
        '<tool_call>{"name": "calc", "arguments": [1]}</tool_call>': "bad_arguments",
        '<tool_call>{"name": "calc", "arguments": "not json"}</tool_call>': "bad_arguments",
        '<tool_call>{"name": "calc", "arguments": {}}': "unclosed_tag",
        "<tool_call></tool_call>": "bad_json",
    }
    for text, reason in cases.items():
        r = parse_tool_calls(text)
        assert r.calls == [], text
        assert [e.reason for e in r.errors] == [reason], text
        assert r.has_tool_call and r.errors[0].message


def test_mixed_valid_and_invalid_blocks():
    r = parse_tool_calls('<tool_call>{"name": "a"}</tool_call><tool_call>oops</tool_call>x<tool_call>{"name"')
    assert [c.name for c in r.calls] == ["a"] and r.calls[0].arguments == {}
    assert [e.reason for e in r.errors] == ["bad_json", "unclosed_tag"]
    assert r.content == "x"


# ---------------------------------------------------------------- the registry and the llama3 format
def test_registry_uses_sglang_names():
    assert available_parsers() == ["hermes", "llama3", "qwen25"]
    assert get_parser("qwen25").name == "qwen25" and get_parser("qwen25").close_token == "</tool_call>"
    assert get_parser("llama3").close_token is None
    with pytest.raises(KeyError, match="known"):
        get_parser("mistral")


def test_llama3_json_calls():
    p = get_parser("llama3")
    r = p.parse('{"name": "calculator", "parameters": {"expression": "37*48"}}')
    assert [(c.name, c.arguments) for c in r.calls] == [("calculator", {"expression": "37*48"})]
    assert r.content == "" and not r.errors
    # <|python_tag|> form, text before it is content, several calls separated by ';'
    r = p.parse('Let me see.<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": "{\\"y\\": 2}"}')
    assert [(c.name, c.arguments) for c in r.calls] == [("a", {"x": 1}), ("b", {"y": 2})]
    assert r.content == "Let me see."


def test_llama3_plain_text_and_json_answers_are_content():
    p = get_parser("llama3")
    for text in ("#### 42", "The answer is {x}.", '{"answer": 42}', "{not json at all"):
        r = p.parse(text)
        assert not r.has_tool_call and r.content == text.strip(), text


def test_llama3_malformed_calls_are_errors():
    p = get_parser("llama3")
    cases = {
        '{"name": "calc", "parameters": {"x": 1}': "bad_json",
        "<|python_tag|>calc(x=1)": "bad_json",
        '<|python_tag|>{"parameters": {}}': "missing_name",
        '{"name": "calc", "parameters": [1]}': "bad_arguments",
        "<|python_tag|>[1, 2]": "not_object",
    }
    for text, reason in cases.items():
        r = p.parse(text)
        assert r.calls == [] and [e.reason for e in r.errors] == [reason], text


def test_reasoning_is_split_off_before_parsing():
    assert split_reasoning("<think>\nI could write <tool_call> here\n</think>\n\nok") == (
        "<think>\nI could write <tool_call> here\n</think>", "\n\nok")
    assert split_reasoning("<think>\nunfinished") == ("", "<think>\nunfinished")
