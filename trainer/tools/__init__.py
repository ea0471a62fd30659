"""Tools the model can call during multi-turn rollout.

    base.py        BaseTool / ToolResult / ToolArgumentError, the registry (register_tool, get_tool)
    calculator.py  `calculator`: safe arithmetic (AST whitelist)
    gsm8k.py       `calc_gsm8k_reward`: verl's GSM8K answer tool

    check.py       `python -m trainer.tools.check CONFIG RESULT`: build a tool_config's tools in a
                   process of their own (the platform's tool-set registration check)

`build_tools(names, config_path=None)` gives the {name: instance} mapping the agent takes. A verl
tool_config YAML (`tools: [{class_name, config, tool_schema}]`) is accepted, but `class_name` only
selects a REGISTERED tool: by its registered name ("calc_gsm8k_reward"), its class's dotted path
("trainer.tools.gsm8k.Gsm8kTool") or the verl path it declares ("verl.tools.gsm8k_tool.Gsm8kTool").
Any other name is refused with `ToolConfigError` listing the accepted ones: classes are never
imported from config.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from trainer.tools import calculator as _calculator  # noqa: F401  (registers `calculator`)
from trainer.tools import gsm8k as _gsm8k  # noqa: F401  (registers `calc_gsm8k_reward`)
from trainer.tools.base import (
    BaseTool,
    ToolArgumentError,
    ToolResult,
    get_tool,
    get_tool_class,
    register_tool,
    registered_tools,
)

__all__ = ["BaseTool", "ToolArgumentError", "ToolConfigError", "ToolResult", "accepted_class_names",
           "build_tools", "get_tool", "get_tool_class", "load_tool_config", "parse_tool_config",
           "register_tool", "registered_tools", "tools_from_config"]


class ToolConfigError(ValueError):
    """A tool_config document the trainer refuses (the message names the entry and says why)."""


def accepted_class_names() -> dict[str, type[BaseTool]]:
    """Every `class_name` a tool_config may use: a registered tool's name, its class's own dotted
    path (trainer.tools.gsm8k.Gsm8kTool) and its verl path when it has one
    (verl.tools.gsm8k_tool.Gsm8kTool). Nothing else: a class_name never imports anything."""
    accepted: dict[str, type[BaseTool]] = {}
    for name in registered_tools():
        cls = get_tool_class(name)
        accepted[name] = cls
        accepted[f"{cls.__module__}.{cls.__qualname__}"] = cls
        if cls.verl_class_name:
            accepted[cls.verl_class_name] = cls
    return accepted


def _class_for(class_name: str, *, where: str) -> type[BaseTool]:
    accepted = accepted_class_names()
    if class_name in accepted:
        return accepted[class_name]
    raise ToolConfigError(f"{where}.class_name {class_name!r} is not a registered tool; a tool_config may "
                          f"only name one of: {', '.join(sorted(accepted))}")


def tools_from_config(doc: Any, *, source: str = "tool_config") -> dict[str, BaseTool]:
    """{function name: tool} from a parsed tool_config document (`{"tools": [...]}`).

    Each entry is {class_name, config?, tool_schema?}: `class_name` must be one of
    `accepted_class_names()`, `config` an object (the tool's constructor argument), `tool_schema` an
    OpenAI function schema that replaces the class's own on this instance. Two entries exposing the
    same function name are refused (the model could not tell them apart).
    """
    entries = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise ToolConfigError(f"{source}: expected a top-level 'tools' list")
    tools: dict[str, BaseTool] = {}
    for i, entry in enumerate(entries):
        where = f"{source}: tools[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise ToolConfigError(f"{where} needs a class_name (a string)")
        unknown = sorted(set(entry) - {"class_name", "config", "tool_schema"})
        if unknown:
            raise ToolConfigError(f"{where} has unknown key(s) {', '.join(map(str, unknown))}; "
                                  "expected class_name, config, tool_schema")
        cls = _class_for(entry["class_name"], where=where)
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise ToolConfigError(f"{where}.config must be an object")
        tool = cls(config)
        schema = entry.get("tool_schema")
        if schema:
            function = schema.get("function") if isinstance(schema, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                raise ToolConfigError(f"{where}.tool_schema must be an OpenAI function schema "
                                      "({type: function, function: {name, description, parameters}})")
            tool.schema = schema  # instance attribute: the class default stays untouched
        name = tool.schema["function"]["name"]
        if name in tools:
            raise ToolConfigError(f"{where}: a second tool named {name!r}")
        tools[name] = tool
    return tools


def parse_tool_config(text: str, *, source: str = "tool_config", as_json: bool = False) -> dict[str, BaseTool]:
    """Tools from the text of a verl tool_config (YAML, or JSON with `as_json`)."""
    try:
        if as_json:
            doc = json.loads(text)
        else:
            import yaml

            doc = yaml.safe_load(text)
    except ValueError as exc:  # json.JSONDecodeError
        raise ToolConfigError(f"{source}: not valid JSON: {exc}") from None
    except Exception as exc:  # yaml.YAMLError
        raise ToolConfigError(f"{source}: not valid YAML: {exc}") from None
    return tools_from_config(doc, source=source)


def load_tool_config(path: str | Path) -> dict[str, BaseTool]:
    """Tools from a verl tool_config file (YAML, or JSON by its .json suffix)."""
    return parse_tool_config(Path(path).read_text(encoding="utf-8"), source=str(path),
                             as_json=str(path).endswith(".json"))


def build_tools(names: Iterable[str] = (), config_path: str | Path | None = None) -> dict[str, BaseTool]:
    """{name: tool instance} for the registered `names` plus those of a tool_config file."""
    tools = {name: get_tool(name) for name in names}
    if config_path:
        for name, tool in load_tool_config(config_path).items():
            tools.setdefault(name, tool)
    return tools
