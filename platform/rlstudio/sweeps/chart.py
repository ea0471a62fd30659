"""The sweep page's charts as data: for each axis, every run's axis value against the metric the best
run is chosen by, so that a user sees how the metric moves with each knob (W&B's sweep scatter). Pure:
from the sweep's axes and its table; static/js/sweep_chart.js draws it with Plotly."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

LOG_SPAN = 100.0  # a positive numeric axis spanning at least this ratio is drawn on a log scale


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def axis_scale(axis: Mapping[str, Any], values: Sequence[Any]) -> str:
    """How an axis is drawn: "category" when any of its values is not a finite number (strings,
    booleans, null), "log" for a random axis drawn on a log scale or positive numbers spanning
    LOG_SPAN or more, else "linear"."""
    numbers = [_number(v) for v in values]
    if not numbers or any(n is None for n in numbers):
        return "category"
    if axis.get("scale") == "log":
        return "log"
    if min(numbers) > 0 and max(numbers) / min(numbers) >= LOG_SPAN:
        return "log"
    return "linear"


def sweep_chart(*, axes: Sequence[Mapping[str, Any]], rows: Sequence[Any], metric_label: str) -> dict[str, Any]:
    """{"metric_label", "axes": [{"key", "scale"}], "runs": [{"id", "name", "status", "params", "value",
    "best"}]} from the page's rows ({"row": SweepRow, "metric_value": the figure the best run is chosen
    by, None where a run has none yet})."""
    runs = [{"id": r["row"].run.pk, "name": r["row"].run.name, "status": r["row"].run.status,
             "params": r["row"].params, "value": r["metric_value"], "best": bool(r["row"].best)} for r in rows]
    out_axes = []
    for axis in axes:
        key = axis["key"]
        out_axes.append({"key": key, "scale": axis_scale(axis, [run["params"].get(key) for run in runs])})
    return {"metric_label": metric_label, "axes": out_axes, "runs": runs}
