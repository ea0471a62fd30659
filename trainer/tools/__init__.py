"""Tools the model can call during multi-turn rollout.

    base.py        BaseTool / ToolResult / ToolArgumentError, the registry (register_tool, get_tool)
    calculator.py  `calculator`: safe arithmetic (AST whitelist)
    gsm8k.py       `calc_gsm8k_reward`: verl's GSM8K answer tool

`build_tools(names, config_path=None)` gives the {name: instance} mapping the agent takes. A verl
tool_config YAML (`tools: [{class_name, config, tool_schema}]`) is accepted, but `class_name` only
selects a REGISTERED tool (by registered name or by class name, e.g. "verl.tools.gsm8k_tool.Gsm8kTool"
-> Gsm8kTool): classes are never imported from config.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from trainer.tools.base import (
    BaseTool,
    ToolArgumentError,
    ToolResult,
    get_tool,
    get_tool_class,
    register_tool,
    registered_tools,
)

__all__ = ["BaseTool", "ToolArgumentError", "ToolResult", "build_tools", "get_tool", "get_tool_class",
           "load_tool_config", "register_tool", "registered_tools"]


def _class_for(class_name: str) -> type[BaseTool]:
    registered = {name: get_tool_class(name) for name in registered_tools()}
    if class_name in registered:
        return registered[class_name]
    short = class_name.rsplit(".", 1)[-1]
    for cls in registered.values():
        if cls.__name__ == short:
            return cls
    raise KeyError(f"tool_config class_name {class_name!r} is not a registered tool; registered: "
                   f"{sorted(registered)} (classes {sorted(c.__name__ for c in registered.values())})")


def load_tool_config(path: str | Path) -> dict[str, BaseTool]:
    """Tools from a verl tool_config file (YAML, or JSON). Schema from the file when given."""
    text = Path(path).read_text()
    if str(path).endswith(".json"):
        doc = json.loads(text)
    else:
        import yaml

        doc = yaml.safe_load(text)
    entries = (doc or {}).get("tools") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a top-level 'tools' list")
    tools: dict[str, BaseTool] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{path}: tools[{i}] needs a class_name")
        cls = _class_for(str(entry["class_name"]))
        tool = cls(entry.get("config") or {})
        schema = entry.get("tool_schema")
        if schema:
            if not isinstance(schema, dict) or "function" not in schema or "name" not in schema["function"]:
                raise ValueError(f"{path}: tools[{i}].tool_schema must be an OpenAI function schema")
            tool.schema = schema  # instance attribute: the class default stays untouched
        tools[tool.schema["function"]["name"]] = tool
    return tools


def build_tools(names: Iterable[str] = (), config_path: str | Path | None = None) -> dict[str, BaseTool]:
    """{name: tool instance} for the registered `names` plus those of a tool_config file."""
    tools = {name: get_tool(name) for name in names}
    if config_path:
        for name, tool in load_tool_config(config_path).items():
            tools.setdefault(name, tool)
    return tools
