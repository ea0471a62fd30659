"""Calculator safety and results, the GSM8K tool's verl semantics, the registry and tool_config loading."""
import asyncio

import pytest

from trainer.tools import (ToolArgumentError, ToolConfigError, build_tools, get_tool, load_tool_config,
                           registered_tools)
from trainer.tools.calculator import CalculatorError, calculate


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("expr,want", [
    ("37*48", "1776"), ("1 + 2 * 3", "7"), ("(1+2)*3", "9"), ("-5 + 2", "-3"), ("7/2", "3.5"),
    ("8/2", "4"), ("7//2", "3"), ("7 % 3", "1"), ("2**10", "1024"), ("0.1+0.2", "0.3"), ("--4", "4"),
    ("12 × 3", "36"),
])
def test_calculator_values(expr, want):
    assert calculate(expr) == want


@pytest.mark.parametrize("expr", [
    "__import__('os').system('true')", "().__class__", "x + 1", "abs(-1)", "[1, 2]", "'a' * 3",
    "1 if 1 else 2", "1 < 2", "2 ** 1000", "10 ** 400", "(10**100) ** 5", "1/0", "5 % 0", "",
    "1 +", "lambda: 1", "9**9**9", "1e308 * 10",
])
def test_calculator_rejects(expr):
    with pytest.raises(CalculatorError):
        calculate(expr)


def test_calculator_tool_errors_are_argument_errors():
    tool = get_tool("calculator")
    assert run(tool.execute("i", {"expression": "37*48"})).text == "1776"
    with pytest.raises(ToolArgumentError):
        run(tool.execute("i", {"expression": "__import__('os')"}))
    with pytest.raises(ToolArgumentError, match="missing"):
        run(tool.execute("i", {}))
    with pytest.raises(ToolArgumentError, match="unknown"):
        run(tool.execute("i", {"expression": "1", "extra": 2}))


def test_calculator_schema_matches_demo_task():
    from trainer.tasks.arith import CALCULATOR_SCHEMA

    assert get_tool("calculator").schema == CALCULATOR_SCHEMA


def test_gsm8k_tool_lifecycle_and_step_rewards():
    tool = get_tool("calc_gsm8k_reward")

    async def scenario():
        await tool.create("r1", ground_truth="72")
        first = await tool.execute("r1", {"answer": "70"})  # wrong: no improvement over 0
        second = await tool.execute("r1", {"answer": "72"})  # right: improved
        third = await tool.execute("r1", {"answer": "#### 72"})  # same score again: not improved
        final = await tool.calc_reward("r1")
        await tool.release("r1")
        return first, second, third, final

    first, second, third, final = run(scenario())
    assert (first.step_reward, second.step_reward, third.step_reward) == (-0.05, 0.0, -0.05)
    assert "reward=0.0" in first.text and "reward=1.0" in second.text
    assert final == 1.0
    with pytest.raises(KeyError):  # released
        run(tool.calc_reward("r1"))


def test_registry_and_tool_config(tmp_path):
    assert {"calculator", "calc_gsm8k_reward"} <= set(registered_tools())
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(
        "tools:\n"
        "  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n"
        "    config: {type: native}\n"
        "    tool_schema:\n"
        "      type: function\n"
        "      function:\n"
        "        name: calc_gsm8k_reward\n"
        "        description: custom text\n"
        "        parameters: {type: object, properties: {answer: {type: string}}, required: [answer]}\n")
    tools = load_tool_config(cfg)
    assert list(tools) == ["calc_gsm8k_reward"]
    assert tools["calc_gsm8k_reward"].schema["function"]["description"] == "custom text"
    assert get_tool("calc_gsm8k_reward").schema["function"]["description"] != "custom text"
    both = build_tools(["calculator"], cfg)
    assert sorted(both) == ["calc_gsm8k_reward", "calculator"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - class_name: os.system\n")
    with pytest.raises(ToolConfigError, match="not a registered tool"):
        load_tool_config(bad)
    with pytest.raises(KeyError):
        get_tool("nope")
