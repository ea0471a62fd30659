"""Changing and loading a config: verl-style dotted overrides and run-spec files.

Owns ``apply_overrides`` (``["actor_rollout_ref.rollout.n=8", ...]`` or ``{"a.b": value}``: each key
looked up in the schema, each string parsed by the field's type with ``parse_value`` as Hydra reads
it, the result type-checked, errors naming the key as it was typed), ``KEY_ALIASES`` (verl's names for
keys that live elsewhere here) and ``load_config`` (JSON, or YAML when PyYAML is installed).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence

from .fields import ConfigError, build, choices, coerce, hints, is_union, type_words
from .schema import Config

# verl key names that live elsewhere here, accepted in overrides so verl command lines work as typed
# (docs/design.md §4.11). An error on an aliased key names the key as it was typed.
KEY_ALIASES: dict[str, str] = {
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "tools.config_path",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns":
        "actor_rollout_ref.rollout.multi_turn.max_turns",
    # verl's later names (its earlier ones are the keys here).
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes":
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "actor_rollout_ref.actor.optim.warmup_style",
    "critic.optim.lr_scheduler_type": "critic.optim.warmup_style",
    # verl binds a custom reward function's kwargs there; here they bind to any reward function.
    "custom_reward_function.reward_kwargs": "reward.reward_kwargs",
    # Validation generations logged: verl's to the tracker, ours as sample events.
    "trainer.log_val_generations": "report.val_samples",
}

_NULLS = {"none", "null", "~"}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _field_type(key: str) -> Any:
    """Annotation of a dotted key, or ConfigError naming the key and its section's known keys."""
    cls: Any = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            raise ConfigError(key, f"{'.'.join(parts[:i])} is not a section")
        annotations = hints(cls)
        if part not in annotations:
            where = ".".join(parts[:i]) or "the top level"
            known = ", ".join(f.name for f in dataclasses.fields(cls))
            raise ConfigError(key, f"unknown key; known keys of {where}: {known}")
        cls = annotations[part]
    return cls


def _unquote(text: str) -> str:
    """A value in one pair of matching quotes without them, as Hydra reads 'x' and "x" (a verl
    command line often quotes names: trainer.project_name='gsm8k')."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _split_list(text: str) -> list[str]:
    """'[a, "b"]' / "['a','b']" / 'a,b' -> items (quotes stripped); '' or '[]' -> []."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    return [_unquote(t) for t in items]


def _parse_union(tp: Any, text: str, key: str) -> Any:
    stripped = text.strip()
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if type(None) in typing.get_args(tp) and stripped.lower() in _NULLS:
        return None
    list_args = [a for a in args if typing.get_origin(a) is list]
    if list_args and stripped.startswith("["):
        return parse_value(list_args[0], stripped, key)
    for arg in args:  # first type that parses wins (int before float, str last in our unions)
        try:
            return coerce(arg, parse_value(arg, text, key), key)
        except (ConfigError, ValueError):
            continue
    raise ConfigError(key, f"cannot read {text!r} as {type_words(tp)}")


def _parse_container(tp: Any, text: str, key: str) -> Any:
    stripped = text.strip()
    if typing.get_origin(tp) is list:
        (item_tp,) = typing.get_args(tp)
        try:
            loaded = json.loads(stripped)
            if isinstance(loaded, list):
                return loaded
        except ValueError:
            pass
        return [parse_value(item_tp, item, key) for item in _split_list(stripped)]
    try:
        loaded = json.loads(stripped)
    except ValueError as exc:
        raise ConfigError(key, f"expected a JSON object, got {text!r}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(key, f"expected a JSON object, got {text!r}")
    return loaded


def _parse_scalar(tp: Any, text: str, key: str) -> Any:
    stripped = text.strip()
    if tp is bool:
        low = stripped.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ConfigError(key, f"expected true/false/1/0, got {text!r}")
    if tp is int:
        try:
            return int(stripped)
        except ValueError:
            try:
                as_float = float(stripped)  # "1e3" is a fine way to write 1000
            except ValueError as exc:
                raise ConfigError(key, f"expected an integer, got {text!r}") from exc
            if not as_float.is_integer():
                raise ConfigError(key, f"expected an integer, got {text!r}") from None
            return int(as_float)
    if tp is float:
        try:
            return float(stripped)
        except ValueError as exc:
            raise ConfigError(key, f"expected a number, got {text!r}") from exc
    if tp is str:
        unquoted = _unquote(stripped)
        return unquoted if unquoted != stripped else text
    raise ConfigError(key, f"unsupported type {tp!r}")


def parse_value(tp: Any, text: str, key: str) -> Any:
    """Parse an override string by the field's type (int, float, bool, null, lists, JSON objects)."""
    stripped = text.strip()
    if tp is Any:
        try:
            return json.loads(stripped)
        except ValueError:
            return text
    if is_union(tp):
        return _parse_union(tp, text, key)
    if tp is not str and stripped.lower() in _NULLS:
        raise ConfigError(key, f"must not be null (expected {type_words(tp)})")
    if choices(tp) is not None:
        return _unquote(stripped)
    if typing.get_origin(tp) in (list, dict):
        return _parse_container(tp, text, key)
    return _parse_scalar(tp, text, key)


def _pairs(overrides: Sequence[str] | Mapping[str, Any]) -> list[tuple[str, str, Any, bool]]:
    """(key as typed, key with aliases applied, value, whether the value is text to parse) per override;
    a leading ``+`` or ``++`` (Hydra's "add" / "add or set") is dropped from the key, kept in the typed one."""
    pairs: list[tuple[str, Any, bool]] = []
    if isinstance(overrides, Mapping):
        for k, v in overrides.items():
            if not isinstance(k, str):
                raise ConfigError(str(k), "an override key must be a dotted string")
            pairs.append((k.strip(), v, isinstance(v, str)))
    else:
        for i, item in enumerate(overrides):
            if not isinstance(item, str):
                raise ConfigError(f"overrides[{i}]", f"an override must be a 'key=value' string, got {item!r}")
            if "=" not in item:
                raise ConfigError(item, "an override must look like key=value")
            k, v = item.split("=", 1)
            pairs.append((k.strip(), v, True))
    return [(k, KEY_ALIASES.get(k.lstrip("+"), k.lstrip("+")), v, t) for k, v, t in pairs]


def _named_as_typed(exc: ConfigError, typed: str, key: str) -> ConfigError:
    """The error of override `typed` (resolved to `key`) naming the key as the user typed it: an
    alias says which key it sets here, and a Hydra "+" on an unknown key says keys cannot be added."""
    plain = typed.lstrip("+")
    inside = exc.key == key or exc.key.startswith(key + ".")
    message = exc.message
    if plain != key and inside:
        message = f"{message} (verl's name for {key})"
    if typed.startswith("+") and "unknown key" in message:
        message = f"{message} (the schema is fixed: a Hydra '+' sets a known key, it cannot add one)"
    return ConfigError(plain + exc.key[len(key):] if inside else exc.key, message)


def apply_overrides(cfg: Config, overrides: Sequence[str] | Mapping[str, Any]) -> Config:
    """A new Config with dotted-key overrides applied.

    ``overrides`` is a list of ``"a.b.c=value"`` strings (values parsed by the field's type, a string
    in one pair of quotes unquoted and a leading ``+`` accepted, as in Hydra) or a mapping
    ``{"a.b.c": value}`` (strings parsed, other values type-checked). verl's names in
    ``KEY_ALIASES`` set the key they name here. Setting a section key takes a mapping (or a JSON
    object string). Errors name the key as it was given.
    """
    d = cfg.to_dict()
    for typed, key, value, is_text in _pairs(overrides):
        try:
            _apply_one(d, key, value, is_text)
        except ConfigError as exc:
            raise _named_as_typed(exc, typed, key) from None
    return Config.from_dict(d)


def _apply_one(d: dict[str, Any], key: str, value: Any, is_text: bool) -> None:
    """Set dotted `key` in the config dict `d` to `value`, parsed and type-checked by its field."""
    tp = _field_type(key)
    if dataclasses.is_dataclass(tp):
        if is_text:
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ConfigError(key, "a section takes a JSON object") from exc
        build(tp, value, key + ".")  # checks unknown keys / types with full dotted names
    elif is_text:
        value = parse_value(tp, value, key)
    *head, last = key.split(".")
    node = d
    for part in head:
        node = node[part]
    if dataclasses.is_dataclass(tp):
        node[last] = {**node[last], **value}
    else:
        node[last] = coerce(tp, value, key)


def load_config(path: str | Path) -> Config:
    """Read a run spec: JSON, or YAML (.yaml / .yml) when PyYAML is importable."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in {".yaml", ".yml"}:
        try:
            import yaml  # lazy: optional dependency, and the web side may not need it
        except ImportError as exc:
            raise ConfigError(
                str(path), "YAML specs need PyYAML installed; use JSON instead"
            ) from exc
        data = yaml.safe_load(text)
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(str(path), f"not valid JSON: {exc}") from exc
    return Config.from_dict(data)
