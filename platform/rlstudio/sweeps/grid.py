"""The pure parts of a sweep: its axes checked for shape, the grid they span, each run's name, and the
form's comma-separated values read as YAML scalars.

A grid is every combination of the axes' values, the first axis varying slowest (as nested loops
written in the axes' order): axes [{"key": "a", "values": [1, 2]}, {"key": "b", "values": ["x", "y"]}]
give (a=1, b=x), (a=1, b=y), (a=2, b=x), (a=2, b=y). Whether a key may be swept and a value is
allowed is the config gate's and the trainer schema's decision (`services.sweep_launch`), not this
module's.
"""
from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_AXES = 4
MAX_KEY_LENGTH = 200
MAX_VALUES_TEXT = 2000  # the form's comma-separated values of one axis
MAX_RUN_NAME = 200  # runs.Run.name


class AxesInvalid(ValueError):
    """The axes are malformed; `field` names where (`axes`, `axes[1].key`, `axes[0].values[2]`)."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Axis:
    """One axis of a sweep: a dotted config key and the values it takes, in order."""

    key: str
    values: tuple[Any, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "values": list(self.values)}


@dataclass(frozen=True)
class GridPoint:
    """One run of the grid: its place (from 0) and its values, {key: value} in the axes' order."""

    index: int
    params: dict[str, Any]


MAX_VALUE_LENGTH = 200  # a string value


def _is_scalar(value: Any) -> bool:
    """A value an axis may take: a finite number, a boolean, null, or a short string without NUL or a
    lone surrogate (PostgreSQL stores neither in JSON)."""
    from rlstudio.text import has_surrogate

    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return len(value) <= MAX_VALUE_LENGTH and "\x00" not in value and not has_surrogate(value)
    return value is None or isinstance(value, (int, bool))


def clean_axes(raw: Any) -> list[Axis]:
    """`raw` (a list of {"key", "values"}) as Axis objects, or AxesInvalid naming the field: 1 to
    MAX_AXES axes, each key a non-empty dotted name used once, each with at least one value, values
    JSON scalars (string, number, boolean, null), none twice on one axis; a range ({"min", "max"}) is
    refused on its axis: it is for random search (`sample.clean_random_axes`)."""
    if not isinstance(raw, (list, tuple)):
        raise AxesInvalid('must be a list of {"key": ..., "values": [...]}', field="axes")
    if not raw:
        raise AxesInvalid("give at least one axis", field="axes")
    if len(raw) > MAX_AXES:
        raise AxesInvalid(f"at most {MAX_AXES} axes, got {len(raw)}", field="axes")
    out: list[Axis] = []
    for i, item in enumerate(raw):
        where = f"axes[{i}]"
        if isinstance(item, Mapping) and ("min" in item or "max" in item):
            raise AxesInvalid('a range ({"min", "max"}) is for random search only ("mode": "random"); a grid '
                              "axis lists its values", field=where)
        if not isinstance(item, Mapping) or set(item) != {"key", "values"}:
            raise AxesInvalid('must be an object with exactly "key" and "values"', field=where)
        out.append(clean_list_axis(item, where=where, taken=[a.key for a in out]))
    return out


def clean_key(item: Mapping[str, Any], *, where: str, taken: Sequence[str]) -> str:
    """An axis object's "key" stripped, or AxesInvalid on `<where>.key`: a non-empty dotted name of at
    most MAX_KEY_LENGTH characters, not one of `taken` (the keys of the axes before it)."""
    key = item.get("key")
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY_LENGTH:
        raise AxesInvalid(f"must be a dotted config key (1 to {MAX_KEY_LENGTH} characters)", field=f"{where}.key")
    key = key.strip()
    if key in taken:
        raise AxesInvalid(f"{key} is swept by two axes", field=f"{where}.key")
    return key


def clean_list_axis(item: Mapping[str, Any], *, where: str, taken: Sequence[str]) -> Axis:
    """An axis object {"key", "values"} as an Axis, or AxesInvalid naming the field under `where`: the
    key (`clean_key`), at least one value, values JSON scalars, none twice."""
    key = clean_key(item, where=where, taken=taken)
    values = item["values"]
    if not isinstance(values, (list, tuple)) or not values:
        raise AxesInvalid(f"{key}: give a non-empty list of values", field=f"{where}.values")
    seen: list[str] = []
    for j, value in enumerate(values):
        if not _is_scalar(value):
            raise AxesInvalid(f"{key}: a value must be a string, a number, true/false or null, got "
                              f"{json.dumps(value, default=str)[:80]}", field=f"{where}.values[{j}]")
        canon = json.dumps(value)
        if canon in seen:
            raise AxesInvalid(f"{key}: the value {value_text(value)} is given twice", field=f"{where}.values[{j}]")
        seen.append(canon)
    return Axis(key=key, values=tuple(values))


def grid_size(axes: Sequence[Axis]) -> int:
    """How many runs the grid makes: the product of the axes' lengths."""
    return math.prod(len(a.values) for a in axes) if axes else 0


def expand_grid(axes: Sequence[Axis]) -> list[GridPoint]:
    """Every combination of the axes' values, the first axis varying slowest (module docstring)."""
    if not axes:
        return []
    keys = [a.key for a in axes]
    return [GridPoint(index=i, params=dict(zip(keys, combo)))
            for i, combo in enumerate(itertools.product(*(a.values for a in axes)))]


def value_text(value: Any) -> str:
    """A value as the run's name and the pages write it: YAML's words for booleans and null, numbers
    as Python writes them (1e-06, 0.5), strings as they are."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    return str(value)


def run_name(sweep_name: str, params: Mapping[str, Any]) -> str:
    """`<sweep name>/<key=value,...>`, cut to MAX_RUN_NAME characters (an ellipsis marks the cut)."""
    name = f"{sweep_name}/" + ",".join(f"{k}={value_text(v)}" for k, v in params.items())
    return name if len(name) <= MAX_RUN_NAME else name[: MAX_RUN_NAME - 1] + "…"


def sweep_tag(sweep_name: str) -> str:
    """The tag each run carries for its sweep: the name with every character a tag may not hold (runs'
    tags are letters, digits and _ . : + / -) made "-", cut to 40 characters ("sweep" when nothing is left)."""
    tag = re.sub(r"[^\w.:+/-]", "-", sweep_name.strip(), flags=re.ASCII)[:40].strip("-")
    return tag or "sweep"


def parse_values_text(text: str, *, field: str) -> list[Any]:
    """The form's comma-separated values of one axis, each read as a YAML scalar (`1e-6` a float,
    `true` a boolean, `cpu_smoke` a string) by the user-YAML parser; AxesInvalid on `field` for an
    empty list, a value that is not a scalar, or text past MAX_VALUES_TEXT."""
    import yaml

    from rlstudio.runs.user_yaml import load_user_yaml

    if len(text) > MAX_VALUES_TEXT:
        raise AxesInvalid(f"at most {MAX_VALUES_TEXT} characters of values", field=field)
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise AxesInvalid("give the values, separated by commas", field=field)
    out = []
    for part in parts:
        if not part:
            raise AxesInvalid("an empty value between two commas", field=field)
        try:
            value = load_user_yaml(part)
        except yaml.YAMLError:
            raise AxesInvalid(f"{part[:60]!r} is not a YAML scalar", field=field) from None
        if not _is_scalar(value):
            raise AxesInvalid(f"{part[:60]!r} is not a single value (a string, a number, true/false)", field=field)
        out.append(value)
    return out
