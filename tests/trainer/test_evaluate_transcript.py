"""An evaluation's transcript (trainer.evaluate.transcript): the turns after the prompt, a turn's tool
calls kept as {"name", "arguments"} (the OpenAI form or the flat one) for the page to show as the
sample page does, not as a JSON list in the text; texts cut to the limit."""
from types import SimpleNamespace

from trainer.evaluate import transcript


def test_tool_calls_are_kept_apart_from_the_text():
    prompt = SimpleNamespace(messages=[{"role": "user", "content": "2+3?"}])
    tr = SimpleNamespace(prompt=prompt, response_text="", messages=[
        {"role": "user", "content": "2+3?"},
        {"role": "assistant", "content": "Let me compute.", "tool_calls": [
            {"id": "call_1_0", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}},
            {"name": "calculator", "arguments": {"expression": "x" * 50}}]},
        {"role": "tool", "content": "5"},
        {"role": "assistant", "content": "#### 5"}])
    turns = transcript(tr, max_chars=30)
    assert [t["role"] for t in turns] == ["assistant", "tool", "assistant"]
    assert turns[0]["content"] == "Let me compute."
    assert turns[0]["tool_calls"] == [{"name": "calculator", "arguments": '{"expression": "2+3"}'},
                                      {"name": "calculator", "arguments": '{"expression": "xxxxxxxxxxxxxx'}]
    assert "tool_calls" not in turns[1] and turns[2] == {"role": "assistant", "content": "#### 5"}
