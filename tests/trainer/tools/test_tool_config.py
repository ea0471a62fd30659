"""The tool_config loader accepts registered tools only, by their registered name, class path or verl
path; anything else (an import path of any other class) is refused with the accepted names."""
import json
import subprocess
import sys

import pytest

from trainer.tools import ToolConfigError, accepted_class_names, load_tool_config, parse_tool_config
from trainer.tools.check import describe
from trainer.tools.gsm8k import Gsm8kTool

GSM8K_SCHEMA = ("    tool_schema:\n      type: function\n      function:\n        name: {name}\n"
                "        description: d\n        parameters: {{type: object, properties: {{answer: {{type: string}}}}}}\n")


@pytest.mark.parametrize("class_name", ["calc_gsm8k_reward", "trainer.tools.gsm8k.Gsm8kTool",
                                        "verl.tools.gsm8k_tool.Gsm8kTool"])
def test_registered_names_and_paths_are_accepted(class_name):
    tools = parse_tool_config(f"tools:\n  - class_name: {class_name}\n")
    assert list(tools) == ["calc_gsm8k_reward"]
    assert type(tools["calc_gsm8k_reward"]) is Gsm8kTool


@pytest.mark.parametrize("class_name", [
    "os.system",                     # never imported, whatever it is
    "evil.module.Gsm8kTool",         # a registered class's short name under another path
    "Gsm8kTool",                     # the bare class name is not one of the accepted paths either
    "verl.tools.sandbox_fusion_tools.SandboxFusionTool",  # a real verl tool the trainer does not have
])
def test_a_class_name_outside_the_registry_is_refused(class_name, tmp_path):
    cfg = tmp_path / "tools.yaml"
    cfg.write_text(f"tools:\n  - class_name: {class_name}\n")
    with pytest.raises(ToolConfigError, match="is not a registered tool") as err:
        load_tool_config(cfg)
    assert repr(class_name) in str(err.value)
    assert "calc_gsm8k_reward" in str(err.value) and "verl.tools.gsm8k_tool.Gsm8kTool" in str(err.value)


def test_accepted_names_cover_every_registered_tool():
    accepted = accepted_class_names()
    assert accepted["calculator"].name == "calculator"
    assert accepted["trainer.tools.calculator.CalculatorTool"] is accepted["calculator"]
    assert accepted["verl.tools.gsm8k_tool.Gsm8kTool"] is Gsm8kTool
    assert not any(name.startswith(("os.", "builtins.")) for name in accepted)


@pytest.mark.parametrize("text, words", [
    ("tools: calculator\n", "top-level 'tools' list"),
    ("[1, 2]\n", "top-level 'tools' list"),
    ("tools:\n  - config: {}\n", "needs a class_name"),
    ("tools:\n  - class_name: [calculator]\n", "needs a class_name"),
    ("tools:\n  - class_name: calculator\n    import: os\n", "unknown key(s) import"),
    ("tools:\n  - class_name: calculator\n    config: [1]\n", "config must be an object"),
    ("tools:\n  - class_name: calculator\n    tool_schema: {function: {}}\n", "OpenAI function schema"),
    ("tools:\n  - class_name: calculator\n  - class_name: calculator\n", "a second tool named 'calculator'"),
    ("tools: [\n", "not valid YAML"),
])
def test_malformed_tool_configs_are_refused(text, words):
    with pytest.raises(ToolConfigError, match=".*") as err:
        parse_tool_config(text, source="tools.yaml")
    assert words in str(err.value)


def test_a_schema_renames_the_tool_on_its_instance_only():
    tools = parse_tool_config("tools:\n  - class_name: calc_gsm8k_reward\n" + GSM8K_SCHEMA.format(name="check"))
    assert list(tools) == ["check"] and Gsm8kTool.schema["function"]["name"] == "calc_gsm8k_reward"


def test_the_check_command_reports_the_tools_or_the_error(tmp_path):
    good, bad, result = tmp_path / "good.yaml", tmp_path / "bad.yaml", tmp_path / "result.json"
    good.write_text("tools:\n  - class_name: calculator\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n")
    bad.write_text("tools:\n  - class_name: subprocess.Popen\n")
    proc = subprocess.run([sys.executable, "-m", "trainer.tools.check", str(good), str(result)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(result.read_text())
    assert out["ok"] is True
    assert [(t["name"], t["class_name"]) for t in out["tools"]] == [
        ("calculator", "calculator"), ("calc_gsm8k_reward", "calc_gsm8k_reward")]
    refused = describe(bad)
    assert refused["ok"] is False and "'subprocess.Popen' is not a registered tool" in refused["error"]
