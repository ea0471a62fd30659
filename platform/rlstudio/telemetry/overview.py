"""A run's metric rows at most `max_points` at a time: the run page's charts and GET metrics/overview/.

A run of up to `max_points` stored rows (in the step range asked for) is answered row for row, as the
metrics API pages them. A longer one is cut into `max_points` runs of consecutive rows (row i of n goes
to bucket i * max_points // n, so the runs differ in length by at most one, as the compare page's
`downsample`), each answered as one row:

- `step`, `time`, `t`: its last row's (the last step stays where it is);
- `from_step`: its first row's step, `rows`: how many rows it stands for;
- `metrics`: per key any of its rows reported, the mean of the numbers, except a statistic's minimum
  (`critic/score/min`, verl's mismatch metrics' `rollout_corr/..._min`) is their minimum and a
  maximum their maximum, so that a chart's min-max band still spans every step's; null when the key
  was reported only as null.

`bucket_rows` is the definition; `overview` computes the same in PostgreSQL (`_BUCKETS_SQL`), so only
the buckets leave the database, and caches a run's answer per state of its rows (`compare.cached_per_run`).
A 30,000-step run's page carries 1,000 rows, not 30,000.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import selectors as sel
from .compare import cached_per_run

POINTS_DEFAULT = 1000
POINTS_MIN, POINTS_MAX = 10, 5000
# The mismatch metrics end their statistic with an underscore (rollout_corr/rollout_is_min), as the
# run page's panels read them (static/js/run_live.js).
_MISMATCH_PREFIXES = ("rollout_corr/", "training/rollout_")


def statistic(key: str) -> str:
    """How a bucket combines the key's values: "min", "max" or "mean"."""
    for stat in ("min", "max"):
        if key.endswith("/" + stat) or (key.startswith(_MISMATCH_PREFIXES) and key.endswith("_" + stat)):
            return stat
    return "mean"


def _combine(key: str, values: Sequence[float | None]) -> float | None:
    numbers = [v for v in values if v is not None]
    if not numbers:
        return None
    stat = statistic(key)
    if stat == "min":
        return min(numbers)
    if stat == "max":
        return max(numbers)
    return sum(numbers) / len(numbers)


def bucket_rows(rows: Sequence[dict[str, Any]], max_points: int) -> list[dict[str, Any]]:
    """The definition: `rows` ({step, time, t, metrics} in step order) as at most `max_points` rows."""
    n = len(rows)
    if n <= max_points:
        return [dict(r) for r in rows]
    buckets: list[list[dict[str, Any]]] = [[] for _ in range(max_points)]
    for i, row in enumerate(rows):
        buckets[i * max_points // n].append(row)
    out = []
    for chunk in buckets:
        values: dict[str, list[float | None]] = {}
        for row in chunk:
            for key, value in row["metrics"].items():
                values.setdefault(key, []).append(value)
        last = chunk[-1]
        out.append({"step": last["step"], "time": last["time"], "t": last["t"], "from_step": chunk[0]["step"],
                    "rows": len(chunk), "metrics": {k: _combine(k, vs) for k, vs in sorted(values.items())}})
    return out


@dataclass(frozen=True)
class Overview:
    """The rows of a step range at most `max_points` of them; `points`: the stored rows they stand for."""

    steps: list[dict[str, Any]]
    points: int
    downsampled: bool

    def as_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "points": self.points, "downsampled": self.downsampled}


_RANGE = "run_id = %(run)s AND step > %(after)s AND step <= %(until)s"

# `bucket_rows` in SQL: the range's rows numbered in step order (i of n), bucket i * max_points / n; per
# bucket its bounds, and per key it carries the mean, min and max of its numbers (nulls skipped);
# Python picks the one the key's statistic asks for. Ordered so that a bucket's keys come sorted.
_BUCKETS_SQL = f"""
WITH r AS MATERIALIZED (
  SELECT step, time, metrics,
         (row_number() OVER (ORDER BY step) - 1) * %(mp)s / count(*) OVER () AS b
  FROM telemetry_metricrow WHERE {_RANGE}
), bounds AS (
  SELECT b, min(step) AS lo, max(step) AS hi, count(*) AS n, (array_agg(time ORDER BY step DESC))[1] AS t
  FROM r GROUP BY b
), vals AS (
  SELECT r.b, kv.key, avg(v.x) AS mean, min(v.x) AS lo, max(v.x) AS hi
  FROM r CROSS JOIN LATERAL jsonb_each(r.metrics) AS kv(key, value)
  CROSS JOIN LATERAL (SELECT CASE WHEN jsonb_typeof(kv.value) = 'number'
                                  THEN (kv.value #>> '{{}}')::float8 END) AS v(x)
  GROUP BY r.b, kv.key
)
SELECT bounds.b, bounds.lo, bounds.hi, bounds.n, bounds.t, vals.key, vals.mean, vals.lo, vals.hi
FROM bounds LEFT JOIN vals ON vals.b = bounds.b
ORDER BY bounds.b, vals.key COLLATE "C"
"""


def _buckets(run_id: int, after: int, until: int, max_points: int) -> list[dict[str, Any]]:
    from django.db import connection

    out: list[dict[str, Any]] = []
    with connection.cursor() as cur:
        cur.execute(_BUCKETS_SQL, {"run": run_id, "after": after, "until": until, "mp": max_points})
        current = None
        for b, lo, hi, n, time, key, mean, vmin, vmax in cur.fetchall():
            if current is None or current[0] != b:
                row = {"step": hi, "time": time.isoformat(), "t": time.timestamp(), "from_step": lo, "rows": n,
                       "metrics": {}}
                current = (b, row)
                out.append(row)
            if key is not None:
                current[1]["metrics"][key] = {"min": vmin, "max": vmax}.get(statistic(key), mean)
    return out


def _compute(run, after: int, until: int, max_points: int) -> Overview:
    from .models import MetricRow

    n = MetricRow.objects.filter(run=run, step__gt=after, step__lte=until).count()
    if n <= max_points:
        rows, _ = sel.metrics_page(run=run, after_step=after, until_step=until, limit=max(n, 1))
        return Overview(steps=rows, points=n, downsampled=False)
    return Overview(steps=_buckets(run.pk, after, until, max_points), points=n, downsampled=True)


def overview(*, run, after_step: int | None = None, until_step: int | None = None,
             max_points: int = POINTS_DEFAULT) -> Overview:
    """The run's metric rows with after_step < step <= until_step (absent: every step), at most
    `max_points` of them; cached per state of the run's rows."""
    after = -1 if after_step is None else after_step
    until = sel.STEP_MAX if until_step is None else until_step
    if until <= after:
        return Overview(steps=[], points=0, downsampled=False)
    got = cached_per_run(f"overview:{max_points}:{after}:{until}", [run.pk],
                         lambda ids: {run.pk: _compute(run, after, until, max_points)})
    return got.get(run.pk) or Overview(steps=[], points=0, downsampled=False)
