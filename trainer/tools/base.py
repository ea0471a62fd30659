"""Tool base class, the tool result record, and the registry of tool classes.

A tool is stateful per trajectory: the agent calls, for each request id (instance_id),
`create` once, `execute` per call, `calc_reward` at the end, then `release`. All four are async so
tools of many trajectories run concurrently. A subclass must set `name` and `schema` (OpenAI
function format: {"type": "function", "function": {"name", "description", "parameters"}}) and
implement `execute`; `create` / `calc_reward` / `release` default to no state and reward 0.0; it may
set `verl_class_name` (the path verl's tool_config files name it by).
Argument problems should raise `ToolArgumentError` (the agent turns any exception into an error
message the model sees, but this one reads better).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar


class ToolArgumentError(ValueError):
    """The model called a tool with arguments it cannot use."""


@dataclass
class ToolResult:
    text: str  # what the model sees as the tool message content
    step_reward: float = 0.0  # per-call shaping reward (verl's tool_reward)
    metrics: dict[str, Any] = field(default_factory=dict)


class BaseTool:
    name: ClassVar[str] = ""
    schema: ClassVar[dict[str, Any]] = {}
    verl_class_name: ClassVar[str] = ""
    """The dotted class path verl's tool_config files use for the same tool, accepted as its
    `class_name` (never imported); "" when verl has no such tool."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})

    def required_args(self) -> list[str]:
        return list(self.schema.get("function", {}).get("parameters", {}).get("required", []))

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        """Raise ToolArgumentError for missing required or unknown arguments (per the schema)."""
        params = self.schema.get("function", {}).get("parameters", {})
        props = params.get("properties", {})
        missing = [k for k in self.required_args() if k not in arguments]
        if missing:
            raise ToolArgumentError(f"missing required argument(s): {', '.join(missing)}")
        if props and params.get("additionalProperties", False) is False:
            unknown = [k for k in arguments if k not in props]
            if unknown:
                raise ToolArgumentError(
                    f"unknown argument(s): {', '.join(unknown)}; expected: {', '.join(props)}")

    async def create(self, instance_id: str, **kwargs: Any) -> None:
        return None

    async def execute(self, instance_id: str, arguments: dict[str, Any], **kwargs: Any) -> ToolResult:
        raise NotImplementedError

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        return None


_TOOLS: dict[str, type[BaseTool]] = {}


def register_tool(cls: type[BaseTool]) -> type[BaseTool]:
    """Class decorator: register a tool class under its `name`."""
    if not (isinstance(cls, type) and issubclass(cls, BaseTool)) or not cls.name:
        raise TypeError(f"{cls!r} must be a BaseTool subclass with a name")
    if cls.name in _TOOLS and _TOOLS[cls.name] is not cls:
        raise ValueError(f"tool {cls.name!r} is already registered to {_TOOLS[cls.name]!r}")
    _TOOLS[cls.name] = cls
    return cls


def get_tool_class(name: str) -> type[BaseTool]:
    if name not in _TOOLS:
        raise KeyError(f"unknown tool {name!r}; registered: {sorted(_TOOLS)}")
    return _TOOLS[name]


def get_tool(name: str, config: dict[str, Any] | None = None) -> BaseTool:
    """A new instance of the registered tool `name`."""
    return get_tool_class(name)(config)


def registered_tools() -> list[str]:
    return sorted(_TOOLS)


ToolFactory = Callable[[dict[str, Any] | None], BaseTool]
