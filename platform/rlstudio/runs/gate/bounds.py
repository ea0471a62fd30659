"""A `Bound` (what a user-settable key accepts beyond its schema type), the check of one value
against it (`check_value`), and `GateRefused`, the refusal every check of the config gate raises."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping


class GateRefused(ValueError):
    """A config key a user may not set, or a value outside its bounds; `key` names it."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


@dataclass(frozen=True)
class Bound:
    """What a user-settable key accepts beyond its schema type.

    lo / hi bound numbers (and every number of a list); `choices` the strings (or list items) allowed;
    `pattern` a regular expression a string must match in full (`pattern_text` says in words what it
    allows; the default is a name's); `max_items` the length of a list; `max_json_bytes` the encoded
    size of an object.
    """

    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    pattern: str | None = None
    max_items: int | None = None
    max_json_bytes: int | None = None
    pattern_text: str | None = None


def _check_number(key: str, value: Any, bound: Bound) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        raise GateRefused(key, f"must be a finite number, got {value!r}")
    if bound.lo is not None and value < bound.lo:
        raise GateRefused(key, f"must be >= {bound.lo:g}, got {value!r}")
    if bound.hi is not None and value > bound.hi:
        raise GateRefused(key, f"must be <= {bound.hi:g}, got {value!r}")


def _check_string(key: str, value: str, bound: Bound) -> None:
    if "\x00" in value:
        raise GateRefused(key, "must not contain NUL characters")
    if bound.choices is not None and value not in bound.choices:
        raise GateRefused(key, f"{value!r} is not allowed; allowed values: {', '.join(bound.choices)}")
    if bound.pattern is not None and not re.fullmatch(bound.pattern, value):
        if bound.pattern_text:
            raise GateRefused(key, f"{value!r} is not allowed: {bound.pattern_text}")
        raise GateRefused(key, f"{value!r} is not allowed: letters, digits, '.', '_' and '-' only "
                               "(no path separators), at most 64 characters")


def _check_json(key: str, value: Any, bound: Bound, depth: int = 0) -> None:
    """Objects and lists inside a value: finite numbers, strings without NUL, bounded depth."""
    if depth > 8:
        raise GateRefused(key, "nested too deeply")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str) or "\x00" in k:
                raise GateRefused(key, f"keys must be strings without NUL characters, got {k!r}")
            _check_json(f"{key}.{k}", v, bound, depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(f"{key}[{i}]", v, bound, depth + 1)
    elif isinstance(value, str):
        if "\x00" in value:
            raise GateRefused(key, "must not contain NUL characters")
    elif value is not None:
        _check_number(key, value, Bound(lo=bound.lo, hi=bound.hi))


def check_value(key: str, value: Any, bound: Bound) -> None:
    """One user-settable value against its bound."""
    if isinstance(value, str):
        _check_string(key, value, bound)
    elif isinstance(value, (list, tuple)):
        if bound.max_items is not None and len(value) > bound.max_items:
            raise GateRefused(key, f"at most {bound.max_items} items, got {len(value)}")
        for i, item in enumerate(value):
            if isinstance(item, str):
                _check_string(f"{key}[{i}]", item, bound)
            else:
                _check_number(f"{key}[{i}]", item, bound)
    elif isinstance(value, Mapping):
        _check_json(key, value, bound)
        size = len(json.dumps(value, allow_nan=False))
        if bound.max_json_bytes is not None and size > bound.max_json_bytes:
            raise GateRefused(key, f"at most {bound.max_json_bytes} bytes as JSON, got {size}")
    else:
        _check_number(key, value, bound)
