"""A run's metric rows at most `max_points` at a time: the run page's charts and GET metrics/overview/.

A run of up to `max_points` stored rows (in the step range asked for) is answered row for row, as the
metrics API pages them. A longer one is cut into `max_points` runs of consecutive rows (row i of n goes
to bucket i * max_points // n, so the runs differ in length by at most one, as the compare page's
`downsample`), each answered as one row:

- `step`, `time`, `t`: its last row's (the last step stays where it is);
- `from_step`: its first row's step, `rows`: how many rows it stands for;
- `metrics`: per key any of its rows reported, the mean of the numbers (to 7 significant digits),
  except a statistic's minimum (`critic/score/min`, verl's mismatch metrics' `rollout_corr/..._min`)
  is their minimum and a maximum their maximum, so that a chart's min-max band still spans every
  step's; null when the key was reported only as null.

The rows are read once, in step order, a chunk at a time (their metrics as JSON text, read by orjson:
five times faster on 3,000 rows x 80 keys than jsonb_each and GROUP BY in PostgreSQL), and combined as
they come, so memory holds one chunk and the buckets. A run's answer is cached per state of its rows
(`compare.cached_per_run`). A 30,000-step run's page carries 1,000 rows, not 30,000.
"""
from __future__ import annotations

from collections.abc import Iterable
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


MEAN_DIGITS = 7  # significant digits of a bucket's mean: a chart's precision, a third of the bytes


class _Bucket:
    """Consecutive rows being combined: per key the sum and count of its numbers, their min and max."""

    __slots__ = ("first", "last", "rows", "stats")

    def __init__(self, row: dict[str, Any]) -> None:
        self.first, self.last, self.rows = row, row, 0
        self.stats: dict[str, list] = {}  # key -> [sum, count, min, max]
        self.add(row)

    def add(self, row: dict[str, Any]) -> None:
        self.last = row
        self.rows += 1
        for key, value in row["metrics"].items():
            st = self.stats.get(key)
            if st is None:
                st = self.stats[key] = [0.0, 0, None, None]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                st[0] += value
                st[1] += 1
                st[2] = value if st[2] is None or value < st[2] else st[2]
                st[3] = value if st[3] is None or value > st[3] else st[3]

    def row(self) -> dict[str, Any]:
        metrics: dict[str, float | None] = {}
        for key in sorted(self.stats):
            total, count, lo, hi = self.stats[key]
            stat = statistic(key)
            if not count:
                metrics[key] = None
            elif stat == "min":
                metrics[key] = lo
            elif stat == "max":
                metrics[key] = hi
            else:
                metrics[key] = float(f"{total / count:.{MEAN_DIGITS}g}")
        last = self.last
        return {"step": last["step"], "time": last["time"], "t": last["t"], "from_step": self.first["step"],
                "rows": self.rows, "metrics": metrics}


def bucket_rows(rows: Iterable[dict[str, Any]], n: int, max_points: int) -> list[dict[str, Any]]:
    """`n` rows ({step, time, t, metrics} in step order; read one at a time) as `max_points` buckets:
    row i of n in bucket i * max_points // n. (At most `max_points` rows are answered as they are:
    `overview` does not call this for them.)"""
    out: list[dict[str, Any]] = []
    current, index = None, -1
    for i, row in enumerate(rows):
        if i >= n:
            break  # a row stored since the count: the next request has it
        b = i * max_points // n
        if b != index:
            if current is not None:
                out.append(current.row())
            current, index = _Bucket(row), b
        else:
            current.add(row)
    if current is not None:
        out.append(current.row())
    return out


@dataclass(frozen=True)
class Overview:
    """The rows of a step range at most `max_points` of them; `points`: the stored rows they stand for."""

    steps: list[dict[str, Any]]
    points: int
    downsampled: bool

    def as_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "points": self.points, "downsampled": self.downsampled}


def _compute(run, after: int, until: int, max_points: int) -> Overview:
    from .models import MetricRow

    n = MetricRow.objects.filter(run=run, step__gt=after, step__lte=until).count()
    if n <= max_points:
        rows, _ = sel.metrics_page(run=run, after_step=after, until_step=until, limit=max(n, 1))
        return Overview(steps=rows, points=n, downsampled=False)
    return Overview(steps=bucket_rows(sel.metrics_rows(run=run, after_step=after, until_step=until), n, max_points),
                    points=n, downsampled=True)


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
