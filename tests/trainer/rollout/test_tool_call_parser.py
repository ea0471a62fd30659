"""Hermes tool-call parser: well-formed blocks, every malformed case as a structured error, no raise."""
from trainer.rollout.parser import parse_tool_calls


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
