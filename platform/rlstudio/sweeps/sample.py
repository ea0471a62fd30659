"""The pure parts of a random-search sweep: its axes (a list of values, or a numeric range) checked for
shape, its `runs` and `seed` checked, and the points drawn from them.

A random sweep draws `runs` points; each point takes, axis by axis in the axes' order, one value: from
a list axis uniformly (`random.Random.choice`), from a range axis {"min", "max", "scale", "type"}
uniformly between the ends on its scale (`linear`: the value itself; `log`: its logarithm, so 1e-7..1e-5
gives as many draws in 1e-7..1e-6 as in 1e-6..1e-5). A float is rounded to SIG_DIGITS significant
digits (and kept within the ends), so a run's name and config say `3.162e-06`, not 17 digits; an int
range draws whole numbers, both ends included (linear: each equally likely; log: drawn on the log
scale, then rounded to the nearest). Points are distinct: a draw equal to an earlier
one is drawn again, and a space with fewer distinct points than `runs` is refused. Everything comes
from one `random.Random(seed)`, so the same seed, axes and runs draw the same points. Whether a key may
be swept and a value is allowed is the config gate's and the trainer schema's decision
(`services.sweep_launch`), not this module's.
"""
from __future__ import annotations

import json
import math
import random
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .grid import MAX_AXES, AxesInvalid, Axis, GridPoint, clean_key, clean_list_axis, value_text

SIG_DIGITS = 4  # a drawn float is rounded to this many significant digits
MAX_SEED = 2**31 - 1
SCALES = ("linear", "log")
TYPES = ("float", "int")
MAX_BOUND = 1e15  # the largest magnitude of a range's end
TRIES_PER_RUN = 200  # draws per run, all told, spent looking for points not drawn before
# Draws in a row that found no new point before giving up early: a space that rounding leaves a handful
# of points is refused after these, not after TRIES_PER_RUN x runs. Wide enough that a rare point (the
# top of `1..16 log int`, drawn 1.1% of the time) is still found: 0.989^2000 ~ 1e-10.
MISSES_IN_A_ROW = 2000
RANGE_KEYS = {"key", "min", "max", "scale", "type"}


@dataclass(frozen=True)
class RangeAxis:
    """One axis of a random sweep drawn from a numeric range: the ends (both inclusive), the scale it is
    uniform on (`linear` or `log`) and the type of its values (`float`, or `int`: whole numbers)."""

    key: str
    low: float | int
    high: float | int
    scale: str = "linear"
    type: str = "float"

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "min": self.low, "max": self.high, "scale": self.scale, "type": self.type}

    def draw(self, rng: random.Random) -> float | int:
        """One value of the range from `rng` (module docstring)."""
        if self.type == "int":
            if self.scale == "linear":
                return rng.randint(int(self.low), int(self.high))
            # drawn on the log scale between the ends, then rounded: the ends are included
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
            return min(max(math.floor(x + 0.5), int(self.low)), int(self.high))
        if self.scale == "log":
            x = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            x = rng.uniform(self.low, self.high)
        return min(max(round_sig(x), self.low), self.high)


SweepAxis = Union[Axis, RangeAxis]


def round_sig(x: float, digits: int = SIG_DIGITS) -> float:
    """`x` rounded to `digits` significant digits (3.14159e-06 -> 3.142e-06)."""
    return float(f"{x:.{digits}g}") if x else 0.0


def _number(value: Any) -> bool:
    """Whether `value` is a JSON number (not a boolean) that is finite. An int is finite however large:
    `math.isfinite` would convert it to a float and raise OverflowError past ~1e308 (a 500, not a 400)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def clean_range_axis(item: Mapping[str, Any], *, where: str, taken: Sequence[str]) -> RangeAxis:
    """An axis object {"key", "min", "max", optional "scale", optional "type"} as a RangeAxis, or
    AxesInvalid naming the field (`axes[1].min`): the ends finite numbers with min < max (whole numbers
    for `int`), `scale` linear (default) or log (min > 0), `type` float (default) or int."""
    unknown = sorted(set(item) - RANGE_KEYS)
    if unknown:
        raise AxesInvalid(f'a range axis has "key", "min", "max", "scale", "type"; not {", ".join(unknown)}',
                          field=where)
    key = clean_key(item, where=where, taken=taken)
    for end in ("min", "max"):
        if end not in item:
            raise AxesInvalid(f"{key}: a range needs both min and max", field=f"{where}.{end}")
    scale, kind = item.get("scale", "linear"), item.get("type", "float")
    if scale not in SCALES:
        raise AxesInvalid(f"{key}: scale is linear or log, not {value_text(scale)[:40]}", field=f"{where}.scale")
    if kind not in TYPES:
        raise AxesInvalid(f"{key}: type is float or int, not {value_text(kind)[:40]}", field=f"{where}.type")
    ends = {}
    for end in ("min", "max"):
        value = item[end]
        if not _number(value) or abs(value) > MAX_BOUND:
            raise AxesInvalid(f"{key}: {end} must be a finite number (at most {MAX_BOUND:g} in size)",
                              field=f"{where}.{end}")
        if kind == "int":
            if value != int(value):
                raise AxesInvalid(f"{key}: an int range's {end} must be a whole number, got {value_text(value)}",
                                  field=f"{where}.{end}")
            value = int(value)
        ends[end] = value if kind == "int" else float(value)
    low, high = ends["min"], ends["max"]
    if not low < high:
        raise AxesInvalid(f"{key}: min ({value_text(low)}) must be below max ({value_text(high)})",
                          field=f"{where}.min")
    if scale == "log" and low <= 0:
        raise AxesInvalid(f"{key}: a log scale needs min > 0, got {value_text(low)}", field=f"{where}.min")
    return RangeAxis(key=key, low=low, high=high, scale=scale, type=kind)


def clean_random_axes(raw: Any) -> list[SweepAxis]:
    """`raw` (a list of axis objects: {"key", "values"} or a range {"key", "min", "max", ...}) as Axis
    and RangeAxis objects, or AxesInvalid naming the field: 1 to MAX_AXES axes, each key used once."""
    if not isinstance(raw, (list, tuple)):
        raise AxesInvalid('must be a list of {"key": ..., "values": [...]} or {"key": ..., "min": ..., '
                          '"max": ...}', field="axes")
    if not raw:
        raise AxesInvalid("give at least one axis", field="axes")
    if len(raw) > MAX_AXES:
        raise AxesInvalid(f"at most {MAX_AXES} axes, got {len(raw)}", field="axes")
    out: list[SweepAxis] = []
    for i, item in enumerate(raw):
        where, taken = f"axes[{i}]", [a.key for a in out]
        if not isinstance(item, Mapping):
            raise AxesInvalid('must be an object: {"key", "values"} or {"key", "min", "max"}', field=where)
        if "values" in item:
            if set(item) != {"key", "values"}:
                raise AxesInvalid('an axis has either "values" or a range ("min", "max"), not both or more',
                                  field=where)
            out.append(clean_list_axis(item, where=where, taken=taken))
        elif "min" in item or "max" in item:
            out.append(clean_range_axis(item, where=where, taken=taken))
        else:
            raise AxesInvalid('give the axis "values" or a range ("min" and "max")', field=where)
    return out


def clean_runs(raw: Any, *, cap: int) -> int:
    """How many runs a random sweep draws: a whole number from 1 to `cap`; AxesInvalid on `runs`."""
    if raw is None:
        raise AxesInvalid(f"a random sweep needs runs: how many points to draw (1 to {cap})", field="runs")
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= cap:
        raise AxesInvalid(f"runs is a whole number from 1 to {cap} (RLSTUDIO_MAX_SWEEP_RUNS), got "
                          f"{json.dumps(raw, default=str)[:40]}", field="runs")
    return raw


def clean_seed(raw: Any) -> int | None:
    """The seed a random sweep draws with: None (the server picks one) or a whole number from 0 to
    MAX_SEED; AxesInvalid on `seed`."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= MAX_SEED:
        raise AxesInvalid(f"seed is a whole number from 0 to {MAX_SEED}, got {json.dumps(raw, default=str)[:40]}", field="seed")
    return raw


def new_seed() -> int:
    """A seed for a sweep that gave none (stored with it, so its draws can be made again)."""
    return secrets.randbelow(MAX_SEED + 1)


def space_size(axes: Sequence[SweepAxis]) -> int | None:
    """How many distinct points the axes hold, or None when a float range makes it practically endless."""
    size = 1
    for axis in axes:
        if isinstance(axis, Axis):
            size *= len(axis.values)
        elif axis.type == "int":
            size *= int(axis.high) - int(axis.low) + 1
        else:
            return None
    return size


def draw_points(axes: Sequence[SweepAxis], runs: int, seed: int) -> list[GridPoint]:
    """`runs` distinct points drawn from `axes` with `random.Random(seed)` (module docstring), as grid
    points (index from 0, params {key: value} in the axes' order); AxesInvalid on `runs` when the axes
    hold fewer distinct points, or when TRIES_PER_RUN x runs draws, or MISSES_IN_A_ROW in a row, found no
    more (so a space that rounding leaves a handful of points costs a few thousand draws at most)."""
    size = space_size(axes)
    if size is not None and runs > size:
        raise AxesInvalid(f"the axes hold {size} distinct point{'s' if size != 1 else ''}, fewer than the "
                          f"{runs} runs asked for: ask for at most {size} (or sweep them all as a grid)",
                          field="runs")
    rng = random.Random(seed)
    points: list[GridPoint] = []
    seen: set[str] = set()
    misses = 0
    for _ in range(TRIES_PER_RUN * runs):
        if misses >= MISSES_IN_A_ROW:
            break
        params = {a.key: (rng.choice(a.values) if isinstance(a, Axis) else a.draw(rng)) for a in axes}
        canon = repr([(type(v).__name__, v) for v in params.values()])
        if canon in seen:
            misses += 1
            continue
        misses = 0
        seen.add(canon)
        points.append(GridPoint(index=len(points), params=params))
        if len(points) == runs:
            return points
    raise AxesInvalid(f"only {len(points)} of the {runs} distinct points asked for could be drawn "
                      f"(rounded to {SIG_DIGITS} significant digits, the ranges hold few): ask for fewer runs or widen them", field="runs")


RANGE_TEXT = re.compile(r"^\s*(?P<low>\S+?)\s*\.\.\s*(?P<high>\S+)(?P<words>(?:\s+\w+)*)\s*$")
INT_TEXT = re.compile(r"[+-]?\d+")


def _end(text: str, *, field: str) -> float | int:
    if INT_TEXT.fullmatch(text):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        raise AxesInvalid(f"{text[:40]!r} is not a number (a range is MIN..MAX, e.g. 1e-7..1e-5 log)",
                          field=field) from None
    if not math.isfinite(value):
        raise AxesInvalid(f"{text[:40]!r} is not a finite number", field=field)
    return value


def is_range_text(text: str) -> bool:
    """Whether the form's values box holds a range (`MIN..MAX ...`) rather than comma-separated values."""
    return ".." in text and "," not in text


def parse_range_text(text: str, *, field: str) -> dict[str, Any]:
    """The form's range `MIN..MAX` followed by optional words `log` / `linear` and `int` / `float`
    (`1e-7..1e-5 log`, `2..16 int`, `1..64 log int`) as {"min", "max", "scale", "type"}; AxesInvalid on
    `field` otherwise. The ends' values are checked by `clean_range_axis`."""
    m = RANGE_TEXT.match(text)
    if m is None:
        raise AxesInvalid("a range is MIN..MAX, then optionally log and/or int (e.g. 1e-7..1e-5 log)", field=field)
    out: dict[str, Any] = {"min": _end(m["low"], field=field), "max": _end(m["high"], field=field),
                           "scale": "linear", "type": "float"}
    for word in m["words"].split():
        if word in SCALES:
            out["scale"] = word
        elif word in TYPES:
            out["type"] = word
        else:
            raise AxesInvalid(f"{word[:40]!r} after a range: write log, linear, int or float", field=field)
    return out


def axis_text(axis: Mapping[str, Any]) -> str:
    """A stored axis as the pages write it: `1e-06, 3e-06` for values, `1e-07 .. 1e-05 (log, float)` for
    a range."""
    if "values" in axis:
        return ", ".join(value_text(v) for v in axis["values"])
    return f"{value_text(axis['min'])} .. {value_text(axis['max'])} ({axis['scale']}, {axis['type']})"
