"""What differs between two stored run configs, key by key, in the user's keys only.

Both configs are read as their users' views (`gate.user_view`: the platform's keys, i.e. paths,
resources and the sinks it adds, reset), filled to the trainer's whole schema (`Config.from_dict`, so a
config stored before a key existed reads as its default), then flattened to dotted keys. A fork is
checked with it (only `trainer.config.fork.FORK_CHANGEABLE` keys may differ from its parent's) and its
run page lists what it changed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from trainer.config import Config, ConfigError

from .gate.changes import user_view
from .gate.flat import changed_keys, flatten


@dataclass(frozen=True)
class ConfigChange:
    """One dotted user key whose value differs: `old` in the first config, `new` in the second."""

    key: str
    old: Any
    new: Any

    def as_dict(self) -> dict[str, Any]:
        """{"key", "old", "new"}: as a fork keeps it (`Run.fork_changes`) and its page and API show it."""
        return {"key": self.key, "old": self.old, "new": self.new}


def user_keys(config: Mapping[str, Any]) -> dict[str, Any]:
    """The user's keys of a stored config, dotted, over the whole schema (ConfigError when it no longer
    reads as a config)."""
    return flatten(Config.from_dict(user_view(config)).to_dict())


def config_changes(*, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[ConfigChange]:
    """The user keys whose values differ from `before` to `after`, in the schema's order."""
    old, new = user_keys(before), user_keys(after)
    return [ConfigChange(key, old.get(key), new[key]) for key in changed_keys(old, new)]


def stored_changes(*, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[ConfigChange] | None:
    """`config_changes` of two configs read from the database, None when one no longer reads as a config
    (a page shows nothing rather than fail)."""
    try:
        return config_changes(before=before, after=after)
    except (ConfigError, TypeError, ValueError):
        return None
