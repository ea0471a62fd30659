"""Fields and their types: the field makers the schema is written with, and the type machinery.

Owns ``ConfigError``, ``option`` / ``section`` (a field with its help text), checking a value against
a field's annotation (``coerce``: ints widen to float, Literal choices, lists, JSON objects, unions;
NaN, infinities and NUL characters refused), building a section from a nested dict (``build``:
unknown keys refused naming the known ones) and naming a type for the reference doc (``type_name``:
``int | None``) and in words for errors (``type_words``: "an integer or null"; ``shown``: the value
as JSON). Knows no section of the schema: it works on any frozen dataclass.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any, Literal, Mapping, Union


class ConfigError(ValueError):
    """A bad config value; ``key`` is the dotted key (verl's name), ``message`` says what is allowed."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def option(default: Any, help: str) -> Any:  # noqa: A002 - "help" reads best in the field table
    """A field with its help text; mutable defaults are copied per instance."""
    if isinstance(default, (list, dict)):
        return dataclasses.field(
            default_factory=lambda d=default: json.loads(json.dumps(d)), metadata={"help": help}
        )
    return dataclasses.field(default=default, metadata={"help": help})


def section(cls: type, help: str) -> Any:  # noqa: A002
    """A sub-section field (a nested frozen dataclass, built with its defaults)."""
    return dataclasses.field(default_factory=cls, metadata={"help": help})


def hints(cls: type) -> dict[str, Any]:
    """A section's field annotations, evaluated."""
    return typing.get_type_hints(cls)


def is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def type_name(tp: Any) -> str:
    """How a field's type reads in errors and the reference doc: ``int | None``, ``list[str]``."""
    if dataclasses.is_dataclass(tp):
        return "section"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(tp))
    if is_union(tp):
        return " | ".join("None" if a is type(None) else type_name(a) for a in typing.get_args(tp))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in typing.get_args(tp))}]"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


_WORDS = {int: ("an integer", "integers"), float: ("a number", "numbers"), bool: ("true or false", "booleans"),
          str: ("a string", "strings")}


def type_words(tp: Any, *, plural: bool = False) -> str:
    """How a field's type reads in an error, in the config's own (JSON) terms: ``int | None`` is "an
    integer or null", ``list[str]`` "a list of strings", a Literal 'one of "grpo", "gae"', ``list[int | None]``
    "a list whose items are each an integer or null", ``bool | None`` "true or false, or null"."""
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any values" if plural else "any value"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in typing.get_args(tp))
    if is_union(tp):
        words = [type_words(a, plural=plural) for a in typing.get_args(tp)]
        # a member that is itself an "or" ("true or false", a list of unions) is set off by commas
        return (", or " if any(" or " in w for w in words) else " or ").join(words)
    if origin is list:
        (item,) = typing.get_args(tp)
        head = "lists" if plural else "a list"
        if is_union(item) or typing.get_origin(item) is Literal:
            # not "a list of integers or null" (read as the list or null), nor "a list of one of ..."
            return f"{head} whose items are each {type_words(item)}"
        return f"{head} of {type_words(item, plural=True)}"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "objects" if plural else "an object"
    one, many = _WORDS.get(tp, (getattr(tp, "__name__", str(tp)),) * 2)
    return many if plural else one


def shown(value: Any, limit: int = 120) -> str:
    """A value as it reads in the config (JSON: true, null, "text"), cut to `limit` characters."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def choices(tp: Any) -> tuple[Any, ...] | None:
    """The allowed values of a Literal type; None for any other type."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    return None


def _coerce_union(tp: Any, value: Any, key: str) -> Any:
    args = typing.get_args(tp)
    if value is None:
        if type(None) in args:
            return None
        raise ConfigError(key, f"must not be null (expected {type_words(tp)})")
    for arg in args:  # the first member type that accepts the value wins
        if arg is type(None):
            continue
        try:
            return coerce(arg, value, key)
        except ConfigError:
            continue
    raise ConfigError(key, f"expected {type_words(tp)}, got {shown(value)}")


def _coerce_container(tp: Any, value: Any, key: str) -> Any:
    if typing.get_origin(tp) is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(
                key, f"expected {type_words(tp)}, got {shown(value)}"
            )
        (item_tp,) = typing.get_args(tp)
        return [coerce(item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, Mapping):
        raise ConfigError(key, f"expected an object, got {shown(value)}")
    try:
        text = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(key, f"expected a JSON object of finite numbers: {exc}") from None
    if "\\u0000" in text:
        raise ConfigError(key, "must not contain NUL characters")
    return json.loads(text)


def _coerce_scalar(tp: Any, value: Any, key: str) -> Any:
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {shown(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(key, f"expected an integer, got {shown(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {shown(value)}")
        if not math.isfinite(value):
            raise ConfigError(key, f"expected a finite number, got {shown(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {shown(value)}")
        if "\x00" in value:
            raise ConfigError(key, "must not contain NUL characters")
        return value
    raise ConfigError(key, f"unsupported type {tp!r}")  # a bug in the schema, not in the spec


def coerce(tp: Any, value: Any, key: str) -> Any:
    """Check ``value`` against annotation ``tp`` (ints widen to float); return the stored value."""
    if tp is Any:
        return value
    if is_union(tp):
        return _coerce_union(tp, value, key)
    allowed = choices(tp)
    if allowed is not None:
        if value not in allowed:
            raise ConfigError(
                key, f"{shown(value)} is not allowed; allowed values: {', '.join(map(str, allowed))}"
            )
        return value
    if typing.get_origin(tp) in (list, dict):
        return _coerce_container(tp, value, key)
    return _coerce_scalar(tp, value, key)


def build(cls: type, d: Mapping[str, Any], prefix: str) -> Any:
    """Section ``cls`` from a nested dict: missing keys take defaults, unknown keys raise ConfigError
    naming the key (``prefix`` is the section's dotted key plus a dot, or "" at the top)."""
    if not isinstance(d, Mapping):
        raise ConfigError(
            prefix.rstrip(".") or "<root>", f"expected an object (section), got {shown(d)}"
        )
    annotations = hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [str(k) for k in d if k not in annotations]
    if unknown:
        # All of a section's unknown keys at once: a verl YAML brings many (_target_, profiler, ...).
        others = f" (also unknown here: {', '.join(unknown[1:])})" if len(unknown) > 1 else ""
        raise ConfigError(
            f"{prefix}{unknown[0]}",
            f"unknown key{others}; known keys of {prefix.rstrip('.') or 'the top level'}: {', '.join(names)}",
        )
    kwargs: dict[str, Any] = {}
    for name in names:
        if name not in d:
            continue
        tp, key = annotations[name], f"{prefix}{name}"
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build(tp, d[name], key + ".")
        else:
            kwargs[name] = coerce(tp, d[name], key)
    return cls(**kwargs)
