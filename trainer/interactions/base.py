"""The interaction base class (verl's BaseInteraction), its reply record and the registry.

An interaction is the other side of a conversation: after an assistant turn that calls no tool, the
multi-turn rollout asks the interaction what the user says next. Per request id (instance_id) the
rollout calls `start_interaction` once (with the row's `extra_info.interaction_kwargs`), then
`generate_response(instance_id, messages)` after each such turn, and `finalize_interaction` at the
end. A reply either continues the conversation (its text becomes a user message, the model answers
it) or ends it; its `score` is the turn's score (the trajectory's `turn_scores`, which the reward
function reads as `extra_info["turn_scores"]`).

Interactions are code, so they come from this registry only (`register_interaction`): a config names
one by its registered name, never a class path or a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class InteractionReply:
    """What the interaction says after an assistant turn."""

    should_terminate_sequence: bool  # True: the conversation ends here (verl's name)
    content: str  # the user message (shown in the transcript; fed to the model when it continues)
    score: float | None = None  # this turn's score (None: no score)
    metrics: dict[str, Any] = field(default_factory=dict)


class BaseInteraction:
    """One kind of simulated user. Subclasses set `name` and implement `generate_response`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.config = dict(config or {})

    async def start_interaction(self, instance_id: str, **kwargs: Any) -> None:
        """Begin the conversation of one request (kwargs: the row's interaction_kwargs)."""

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]],
                                **kwargs: Any) -> InteractionReply:
        raise NotImplementedError

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        """End the conversation of one request (free its state)."""


_REGISTRY: dict[str, type[BaseInteraction]] = {}


def register_interaction(cls: type[BaseInteraction]) -> type[BaseInteraction]:
    """Class decorator: make `cls` selectable by its `name`."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    if _REGISTRY.get(cls.name, cls) is not cls:
        raise ValueError(f"an interaction named {cls.name!r} is already registered")
    _REGISTRY[cls.name] = cls
    return cls


def registered_interactions() -> list[str]:
    return sorted(_REGISTRY)


def get_interaction(name: str, config: dict[str, Any] | None = None) -> BaseInteraction:
    """A new instance of the registered interaction `name` (KeyError naming the registered ones)."""
    cls = _REGISTRY.get(name)
    if cls is None:
        raise KeyError(f"no interaction named {name!r}; registered: {', '.join(registered_interactions()) or 'none'}")
    return cls(config)

