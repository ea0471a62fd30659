"""The sink registry: the `Sink` base class and `register_sink`, which the sink modules (trainer.sinks,
trainer.sinks_http) use to add themselves without importing each other."""
from __future__ import annotations

from typing import Any, Callable


class Sink:
    """A destination for events. Subclasses implement `write`; `flush`/`close` are optional."""

    def write(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.flush()


SinkFactory = Callable[..., Sink]
_SINKS: dict[str, SinkFactory] = {}


def register_sink(name: str) -> Callable[[SinkFactory], SinkFactory]:
    """Decorator: make a sink class/factory selectable as `name` in trainer.logger.

    The factory is called as `factory(out_dir=Path, config=Config)`.
    """

    def deco(factory: SinkFactory) -> SinkFactory:
        _SINKS[name] = factory
        return factory

    return deco


def available_sinks() -> list[str]:
    return sorted(_SINKS)
