"""A run's metric rows at most `max_points` at a time: the run page's charts and GET metrics/overview/.

A step range holding at most `max_points` stored rows is answered row for row, as the metrics API pages
them. A longer one is answered in buckets of `w` consecutive rows, `w` the smallest power of two that
needs at most `max_points` of them, aligned on the run's rows: row i of the run (in step order) is in
bucket i // w, and a range's first and last buckets hold only its own rows. Each bucket is one row:

- `step`, `time`, `t`: its last row's (the last step stays where it is);
- `from_step`: its first row's step, `rows`: how many rows it stands for;
- `metrics`: per key any of its rows reported, the mean of the numbers (to 7 significant digits),
  except a statistic's minimum (`critic/score/min`, verl's mismatch metrics' `rollout_corr/..._min`)
  is their minimum and a maximum their maximum, so that a chart's min-max band still spans every
  step's; null when the key was reported only as null.

Aligned buckets do not move as a live run grows, so they are cached (Django's cache: per process
unless the deployment configures a shared one) CHUNK at a time, each chunk under its rows' positions
and a digest of their steps, times and row versions (PostgreSQL's xmin: a merge of later metrics
changes it): a downsampled read counts the rows before its range (an index-only scan), reads each of
the range's rows' step, time and version (no metrics) and the metrics of the chunks that changed,
usually only the last one. The metrics come as JSON text read by orjson and are
combined in Python (five times faster on 3,000 rows x 80 keys than jsonb_each and GROUP BY in
PostgreSQL). A 30,000-step run's page carries at most 1,000 rows, not 30,000.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import selectors as sel
from .compare import CACHE_S

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


def width(lo: int, hi: int, max_points: int) -> int:
    """The bucket width for the run's rows lo..hi-1: the smallest power of two whose aligned buckets
    touching them are at most `max_points`."""
    w = 1
    while (hi - 1) // w - lo // w + 1 > max_points:
        w *= 2
    return w


def bucket_rows(rows: Iterable[tuple[int, dict[str, Any]]], w: int) -> list[dict[str, Any]]:
    """`rows` ((the row's index in the run, the row {step, time, t, metrics}) in step order) combined
    into buckets of the run's rows i // w."""
    out: list[dict[str, Any]] = []
    current, index = None, None
    for i, row in rows:
        b = i // w
        if b != index:
            if current is not None:
                out.append(current.row())
            current, index = _Bucket(row), b
        else:
            current.add(row)
    if current is not None:
        out.append(current.row())
    return out


def columns(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`rows` (an overview's) in the run page's compact form: each metric name once, not once a row
    (80 names a row were half of a long run's page). `values[i][j]` is row i's value of `keys[j]`,
    `false` where the row has no such metric (a metric's value is a number or null, never false);
    `from`/`n` are a bucket's from_step and rows, null on a row of its own. static/js/run_live.js
    reads it back into rows."""
    keys = sorted({k for r in rows for k in r["metrics"]})
    return {"keys": keys, "step": [r["step"] for r in rows], "t": [r["t"] for r in rows],
            "from": [r.get("from_step") for r in rows], "n": [r.get("rows") for r in rows],
            "values": [[r["metrics"].get(k, False) for k in keys] for r in rows]}


@dataclass(frozen=True)
class Overview:
    """The rows of a step range at most `max_points` of them; `points`: the stored rows they stand for."""

    steps: list[dict[str, Any]]
    points: int
    downsampled: bool

    def as_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "points": self.points, "downsampled": self.downsampled}


CHUNK = 32  # buckets cached under one key (a live run's new step recomputes one chunk)


def _index(run, after: int, until: int) -> list[tuple[int, Any, str]]:
    """(step, time, row version) of the range's rows in step order: no metrics read. The version is
    PostgreSQL's xmin, new at every write of the row (a merge of later metrics with the same time too)."""
    from django.db.models.expressions import RawSQL

    from .models import MetricRow

    return list(MetricRow.objects.filter(run=run, step__gt=after, step__lte=until).order_by("step")
                .annotate(version=RawSQL("xmin::text", [])).values_list("step", "time", "version"))


def _buckets(run, index: list[tuple[int, Any, str]], lo: int, w: int) -> list[dict[str, Any]]:
    """The buckets of the run's rows lo.. (`index`: theirs, from position lo of the run), from the
    cache where a chunk's rows are unchanged."""
    from django.core.cache import cache

    hi = lo + len(index)
    spans = []  # (cache key, first row, end row) per chunk, by position in the run
    for c in range(lo // (w * CHUNK), (hi - 1) // (w * CHUNK) + 1):
        a, b = max(lo, c * w * CHUNK), min(hi, (c + 1) * w * CHUNK)
        digest = hashlib.blake2b(repr(index[a - lo:b - lo]).encode(), digest_size=16).hexdigest()
        spans.append((f"rlstudio:overview:{run.pk}:{w}:{a}:{b}:{digest}", a, b))
    got = cache.get_many([key for key, _, _ in spans])
    fresh: dict[str, list[dict[str, Any]]] = {}
    runs: list[list[tuple[str, int, int]]] = []  # consecutive chunks not cached: one read each
    for span in spans:
        if span[0] in got:
            continue
        if runs and runs[-1][-1][2] == span[1]:
            runs[-1].append(span)
        else:
            runs.append([span])
    for chunks in runs:
        a, b = chunks[0][1], chunks[-1][2]
        position = {index[i - lo][0]: i for i in range(a, b)}  # a row stored since the index waits for the next request
        key_of = {start // (w * CHUNK): key for key, start, _ in chunks}
        for key, _, _ in chunks:
            fresh[key] = []
        rows = sel.metrics_rows(run=run, after_step=index[a - lo][0] - 1, until_step=index[b - lo - 1][0])
        for bucket in bucket_rows(((position[r["step"]], r) for r in rows if r["step"] in position), w):
            fresh[key_of[position[bucket["from_step"]] // (w * CHUNK)]].append(bucket)
    if fresh:
        cache.set_many(fresh, CACHE_S)
    return [row for key, _, _ in spans for row in (got[key] if key in got else fresh[key])]


def overview(*, run, after_step: int | None = None, until_step: int | None = None,
             max_points: int = POINTS_DEFAULT) -> Overview:
    """The run's metric rows with after_step < step <= until_step (absent: every step), at most
    `max_points` of them."""
    after = -1 if after_step is None else after_step
    until = sel.STEP_MAX if until_step is None else until_step
    if until <= after:
        return Overview(steps=[], points=0, downsampled=False)
    from .models import MetricRow

    index = _index(run, after, until)
    if len(index) <= max_points:
        rows, _ = sel.metrics_page(run=run, after_step=after, until_step=until, limit=max_points)
        return Overview(steps=rows, points=len(rows), downsampled=False)
    # the range's first row's position in the run (its buckets are aligned on the run's rows)
    lo = MetricRow.objects.filter(run=run, step__lte=after).count() if after >= 0 else 0
    w = width(lo, lo + len(index), max_points)
    return Overview(steps=_buckets(run, index, lo, w), points=len(index), downsampled=True)
