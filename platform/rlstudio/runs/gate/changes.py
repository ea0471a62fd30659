"""The gate's rule applied to a config: refuse what a user changed unless it is theirs to set and
within its bound (`check`, with the trackers the operator enabled, `check_trackers`), every user value
of a stored config within its bound (`check_bounds`), and the user's view of a stored config
(`user_view`: the platform's keys reset to the schema defaults, so that nothing the platform once wrote
is ever read back as input)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from .bounds import GateRefused, check_value
from .flat import DEFAULTS, changed_keys, flatten, unflatten
from .keys import PLATFORM_KEYS, TRACKER_LOGGERS, USER_KEYS, USER_LOGGERS


def _refuse_key(key: str) -> GateRefused:
    if key in PLATFORM_KEYS:
        return GateRefused(key, f"set by the platform from {PLATFORM_KEYS[key]}; users cannot set it")
    return GateRefused(key, "not a key users may set (docs/security.md lists the ones they may)")


def check(
    *,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    reward_names: Iterable[str],
    tool_names: Iterable[str],
    trackers: Mapping[str, str | None] | None = None,
) -> None:
    """Refuse what a user changed from `before` to `after` unless it is theirs to set, within bounds.

    `reward_names` are the reward functions a user may pick (the trainer's built-ins and the operator's
    registered ones); `tool_names` the trainer's registered tools; `trackers` why each of
    TRACKER_LOGGERS may not be listed (None: it may; none given: none may).
    """
    rewards, tools = set(reward_names), set(tool_names)
    flat = flatten(after)
    for key in changed_keys(flatten(before), flat):
        bound = USER_KEYS.get(key)
        if bound is None:
            raise _refuse_key(key)
        check_value(key, flat[key], bound)
        if key == "reward.name" and flat[key] not in rewards:
            raise GateRefused(key, f"{flat[key]!r} is not a reward function; one of: {', '.join(sorted(rewards))}")
        if key == "tools.names":
            for name in flat[key]:
                if name not in tools:
                    raise GateRefused(key, f"{name!r} is not a registered tool; one of: {', '.join(sorted(tools))}")
        if key == "trainer.logger":
            check_trackers(after, trackers)


def check_trackers(config: Mapping[str, Any], trackers: Mapping[str, str | None] | None) -> None:
    """GateRefused on trainer.logger[i] when `config` lists a tracker (TRACKER_LOGGERS) that `trackers` gives a
    reason against (runs.trackers.refusal: the operator has not enabled it, or its package is missing);
    a tracker `trackers` does not name is refused as not enabled."""
    loggers = flatten(config).get("trainer.logger")
    for i, name in enumerate(loggers if isinstance(loggers, list) else ()):
        if name in TRACKER_LOGGERS:
            reason = (trackers or {}).get(name, f"{name!r} is not enabled on this platform")
            if reason:
                raise GateRefused(f"trainer.logger[{i}]", reason)


def check_bounds(config: Mapping[str, Any]) -> None:
    """Every user-settable value of a whole config inside its bound (a stored config read back)."""
    flat = flatten(config)
    for key, bound in USER_KEYS.items():
        if key in flat:
            check_value(key, flat[key], bound)


def user_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config with every platform key reset to the schema default: what its user owns."""
    flat = flatten(config)
    for key in PLATFORM_KEYS:
        if key in flat:
            flat[key] = DEFAULTS[key]
    if isinstance(flat.get("trainer.logger"), list):  # the sinks the platform added at submit (http)
        flat["trainer.logger"] = [name for name in flat["trainer.logger"] if name in USER_LOGGERS + TRACKER_LOGGERS]
    return unflatten(flat)
