"""Dotted keys over the trainer's config schema: `flatten` / `unflatten` a config between its nested
sections and verl's dotted key names, the schema's defaults so flattened (`DEFAULTS`), and the keys
whose values differ between two configs (`changed_keys`)."""
from __future__ import annotations

from typing import Any, Mapping

from trainer.config import Config


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1} over the config's sections (leaf objects such as reward_kwargs
    stay whole: `sections` says where the schema's sections are)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and key in _SECTIONS:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _sections() -> frozenset[str]:
    from trainer.config import describe_sections

    return frozenset(key for key, _help in describe_sections())


_SECTIONS = _sections()
DEFAULTS = flatten(Config().to_dict())  # the schema's defaults, flattened


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}: a flattened config nested back into its sections."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *head, last = key.split(".")
        node = out
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The leaf keys whose value differs between two flattened configs, in schema order."""
    return [k for k in after if before.get(k, DEFAULTS.get(k)) != after[k]]


def int_at(flat: Mapping[str, Any], key: str) -> int | None:
    """The integer at `key` of a flattened config (the schema's default where it is not set); None
    where it is not an integer."""
    value = flat.get(key, DEFAULTS.get(key))
    return value if isinstance(value, int) and not isinstance(value, bool) else None
