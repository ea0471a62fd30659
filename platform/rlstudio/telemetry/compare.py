"""Comparing runs: any metric overlaid across them, the config keys that differ, and a summary of each.

The compare page (`/runs/compare/?ids=1,2,3`) and `GET /api/v1/runs/compare/?ids=...` answer the same
dict, `compare_runs`'s:

- `runs`: per run (in the order asked) its name, owner, state, tags, note, dataset and model, steps,
  duration, GPU-hours (its GPUs x its duration; 0 on the CPU), the last training reward
  (`critic/score/mean`) and, per held-out metric, the best and last value with their steps;
- `held_out_metric`: the held-out metric the summary shows first: the trainer's validation score
  `val-core/<data_source>/reward/mean@<n>` (or `.../acc/mean@<n>`: trainer.val_metrics) that most of
  the runs report;
- `metrics`: every metric name any of the runs reported (the page's metric picker);
- `series`: per metric asked for, one series per run, `{run, step, t, value, points, downsampled}`,
  read from the stored metric rows (one indexed scan per metric, only that metric's value leaves
  PostgreSQL) and, past `max_points`, downsampled (`downsample`: the mean of consecutive steps);
- `config_diff`: the dotted verl keys whose values differ between the runs (or that some lack),
  each with its value per run; the run's own output folder (`trainer.default_local_dir`, different for
  every run by construction) is left out.

What reads every stored row of a run (its metric names, held-out figures, each series) is kept in Django's
cache per run under the state of its rows (`rows_state`, `cached_per_run`): a comparison viewed again, or
with another metric picked, reads only what changed since.

Only runs the user may read are compared (`runs_get_for`: owner, staff, shared with them); any other
id is a 404, like a run that does not exist. The pure parts (`config_diff`, `downsample`,
`held_out_stats`, `parse_ids`) are tested on their own.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db.models import Count, DecimalField, Func, Sum
from django.db.models.functions import Extract
from django.utils import timezone

from rlstudio.runs.gate.flat import flatten
from rlstudio.runs.selectors import latest_reward, run_configs_comparable_for, runs_get_for

from .models import MetricRow, RunIngestCount

MAX_RUNS = 20
MAX_POINTS_DEFAULT = 1000
MAX_POINTS_MIN, MAX_POINTS_MAX = 10, 5000
MAX_METRICS = 20  # metrics per request
TRAIN_REWARD = "critic/score/mean"
# The trainer's held-out score (trainer.val_metrics, as verl): the core variable's mean,
# val-core/<data_source>/reward/mean@<n>, or .../acc/mean@<n> when the reward function gives acc.
HELD_OUT = re.compile(r"^val-core/.+/(reward|acc)/mean@\d+$")
# Keys that differ between any two runs by construction, not by choice: never part of the diff.
PER_RUN_KEYS = frozenset({"trainer.default_local_dir"})


# ------------------------------------------------------------------------------------ pure parts
def parse_ids(values: Sequence[str]) -> list[int]:
    """Run ids from `?ids=1,2,3` (and/or repeated `?ids=`): in order, duplicates dropped.
    ValueError saying what is wrong: none given, not an integer, more than MAX_RUNS."""
    ids: list[int] = []
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                run_id = int(part)
            except ValueError:
                raise ValueError(f"ids must be run ids separated by commas, got {part[:40]!r}") from None
            if run_id < 1:
                raise ValueError(f"ids must be positive, got {run_id}")
            if run_id not in ids:
                ids.append(run_id)
    if not ids:
        raise ValueError("ids is required: the runs to compare, e.g. ids=1,2,3")
    if len(ids) > MAX_RUNS:
        raise ValueError(f"at most {MAX_RUNS} runs at once, got {len(ids)}")
    return ids


def _canon(value: Any) -> str:
    """A value's identity for the diff: its JSON text (keys sorted), so 1e-06 == 1e-06 and
    {"a": 1} == {"a": 1} whatever their order, while 1 and true stay different."""
    return json.dumps(value, sort_keys=True, default=str)


class TooManyMetrics(ValueError):
    """More metric names asked for at once than MAX_METRICS."""


def parse_metrics(values: Sequence[str]) -> list[str] | None:
    """The `?metrics=` values as given (NULs dropped, blanks skipped), or None when none is given (the
    default ones); TooManyMetrics past MAX_METRICS values. `resolve_metrics` makes them names."""
    raw = [v.replace("\x00", "").strip() for v in values]
    raw = [v for v in raw if v]
    if not raw:
        return None
    if len(raw) > MAX_METRICS:
        raise TooManyMetrics(f"at most {MAX_METRICS} metrics at once, got {len(raw)}")
    return raw


def resolve_metrics(values: Sequence[str], known: Collection[str]) -> list[str]:
    """The metric names of `?metrics=` values, in order, each once: a value that is one of the `known`
    names (the runs') is that name, commas and all; any other is a comma-separated list (`a,b`).
    TooManyMetrics past MAX_METRICS names."""
    names = []
    for value in values:
        names.extend([value] if value in known else [m.strip() for m in value.split(",") if m.strip()])
    names = list(dict.fromkeys(names))
    if len(names) > MAX_METRICS:
        raise TooManyMetrics(f"at most {MAX_METRICS} metrics at once, got {len(names)}")
    return names


def config_diff(configs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The dotted keys whose values are not the same in every config, sorted by key.

    configs: the runs' frozen configs (nested dicts in verl's layout). A key counts as differing when
    its values differ or when some config lacks it. Each entry: `{"key", "values": [value per config,
    None where absent], "present": [bool per config]}`. PER_RUN_KEYS are left out."""
    flat = [flatten(c or {}) for c in configs]
    keys = sorted(set().union(*(f.keys() for f in flat)) - PER_RUN_KEYS) if flat else []
    out = []
    for key in keys:
        present = [key in f for f in flat]
        values = [f.get(key) for f in flat]
        if all(present) and len({_canon(v) for v in values}) == 1:
            continue
        out.append({"key": key, "values": values, "present": present})
    return out


def downsample(steps: Sequence[int], ts: Sequence[float], values: Sequence[float | None],
               max_points: int) -> tuple[list[int], list[float], list[float | None]]:
    """At most `max_points` points of a series in step order: unchanged when it is short enough,
    else cut into `max_points` runs of consecutive points (point i of n goes to bucket
    i * max_points // n, so the runs differ in length by at most one) and each run drawn as one
    point: the mean of its values (None when all are None) at its last step and time, so the last
    step stays where it is and a plateau keeps its level.

    This is the definition; `metric_series` computes the same in PostgreSQL (`_SERIES_SQL`), so that
    only the buckets leave the database."""
    n = len(steps)
    if n <= max_points:
        return list(steps), list(ts), list(values)
    buckets: list[list[int]] = [[] for _ in range(max_points)]
    for i in range(n):
        buckets[i * max_points // n].append(i)
    out_s, out_t, out_v = [], [], []
    for rows in buckets:
        chunk = [values[i] for i in rows if values[i] is not None]
        out_s.append(steps[rows[-1]])
        out_t.append(ts[rows[-1]])
        out_v.append(sum(chunk) / len(chunk) if chunk else None)
    return out_s, out_t, out_v


def held_out_stats(points: Sequence[tuple[int, float | None]], *, first: bool = False) -> dict[str, Any] | None:
    """Best (highest) and last value of a held-out reward from its (step, value) points in step
    order, with their steps; None when no point has a value. Ties for the best keep the earliest step.
    `first=True` adds the first value and its step ("first", "first_step": the run page's Summary card);
    without it the dict has exactly the four keys the compare API, sweeps and export cards use."""
    valued = [(s, v) for s, v in points if v is not None and math.isfinite(v)]
    if not valued:
        return None
    best_step, best = valued[0]
    for step, value in valued[1:]:
        if value > best:
            best_step, best = step, value
    last_step, last = valued[-1]
    stats = {"best": best, "best_step": best_step, "last": last, "last_step": last_step}
    if first:
        stats.update(first=valued[0][1], first_step=valued[0][0])
    return stats


def default_held_out(per_run: Sequence[Mapping[str, Any]]) -> str | None:
    """The held-out metric most runs report (alphabetically first on a tie), None when none does."""
    counts = Counter(key for held in per_run for key in held)
    if not counts:
        return None
    return sorted(counts, key=lambda k: (-counts[k], k))[0]


# ------------------------------------------------------------------------------------ reads
# The rows of the runs that carry metric %(m)s, its value as a float (NULL when not a number): the
# metrics object is read once per row (MATERIALIZED: a `?` test and two extractions would each
# decompress it) and only the value leaves PostgreSQL.
_ROWS_SQL = """
WITH raw AS MATERIALIZED (
  SELECT run_id, step, time, metrics -> %(m)s AS j FROM telemetry_metricrow
  WHERE run_id = ANY(%(ids)s) AND step > %(after)s AND step <= %(until)s
)
SELECT run_id, step, time, CASE WHEN jsonb_typeof(j) = 'number' THEN (j #>> '{}')::float8 END AS v
FROM raw WHERE j IS NOT NULL
"""


CACHE_S = 3600


def rows_state(run_ids: Sequence[int]) -> dict[int, str]:
    """{run id: "<row count>:<sum of the rows' times>"} of the runs that have metric rows (one aggregate
    query, no metrics object read): it changes when a step is stored, and when a stored step's row is
    merged with later metrics (the merge moves that row's time to the later event's), whichever step."""
    epoch = Sum(Extract("time", "epoch", output_field=DecimalField()))  # numeric in PostgreSQL: exact
    rows = (MetricRow.objects.filter(run_id__in=run_ids).order_by().values("run_id")
            .annotate(n=Count("id"), t=epoch))
    return {r["run_id"]: f"{r['n']}:{r['t']}" for r in rows}


def cached_per_run(kind: str, run_ids: Sequence[int], compute: Callable[[list[int]], dict[int, Any]], *,
                   state: dict[int, str] | None = None) -> dict[int, Any]:
    """{run id: value} of the runs that have metric rows, each value kept in Django's cache under `kind`
    and the run's rows' state (`rows_state`, read here unless given): `compute(ids)` -> {run id: value}
    runs once, for the runs not cached. Whatever reads every stored row of a run (its metric names, its
    held-out figures, a metric's series) is then paid once per state of its rows, not once per request."""
    state = rows_state(run_ids) if state is None else state
    keys = {run_id: f"rlstudio:{kind}:{run_id}:{st}" for run_id, st in state.items()}
    cached = cache.get_many(list(keys.values()))
    out = {run_id: cached[key] for run_id, key in keys.items() if key in cached}
    missing = [run_id for run_id in keys if run_id not in out]
    if missing:
        fresh = compute(missing)
        out.update({run_id: fresh.get(run_id) for run_id in missing})
        cache.set_many({keys[run_id]: out[run_id] for run_id in missing}, CACHE_S)
    return out


def metric_names_by_run(run_ids: Sequence[int], *, state: dict[int, str] | None = None) -> dict[int, list[str]]:
    """{run id: its metric names, sorted} of the runs with metric rows: the names the ingest keeps
    (RunIngestCount.metric_names: one indexed read, however long the run). A run whose names are not
    kept (no counter row yet) has its rows' keys expanded (`jsonb_object_keys` reads each row's whole
    metrics object: 200 ms for a run of 3,000 steps x 80 metrics on 2 cores), cached per run
    (`cached_per_run`; `state`: the runs' rows_state where the caller has it)."""
    kept = dict(RunIngestCount.objects.filter(run_id__in=run_ids, metric_names__isnull=False)
                .exclude(metric_names=[]).values_list("run_id", "metric_names"))
    rest = [run_id for run_id in run_ids if run_id not in kept]

    def expand(ids: list[int]) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {run_id: [] for run_id in ids}
        pairs = (MetricRow.objects.filter(run_id__in=ids)
                 .annotate(key=Func("metrics", function="jsonb_object_keys"))
                 .order_by().values_list("run_id", "key").distinct())  # no ordering: it would join the DISTINCT
        for run_id, name in pairs:
            found[run_id].append(name)
        return {run_id: sorted(names) for run_id, names in found.items()}

    if rest:
        kept.update(cached_per_run("metric-names", rest, expand,
                                   state=None if state is None else {r: state[r] for r in rest if r in state}))
    return {run_id: kept[run_id] for run_id in run_ids if run_id in kept}


def metric_names(run_ids: Sequence[int]) -> list[str]:
    """Every metric name the runs reported, sorted (`metric_names_by_run`'s, cached)."""
    return sorted({name for names in metric_names_by_run(run_ids).values() for name in names})


def _points(run_ids: Sequence[int], metric: str) -> dict[int, list[tuple[int, float, float | None]]]:
    """{run id: [(step, unix time, value)] in step order} of the rows that carry `metric`."""
    from django.db import connection

    out: dict[int, list[tuple[int, float, float | None]]] = {}
    with connection.cursor() as cur:
        cur.execute(f"SELECT run_id, step, extract(epoch FROM time), v FROM ({_ROWS_SQL}) r ORDER BY run_id, step",
                    {"m": metric, "ids": list(run_ids), **ALL_STEPS})
        for run_id, step, t, value in cur.fetchall():
            out.setdefault(run_id, []).append((step, float(t), value))
    return out


# `downsample` in SQL: the rows of the runs that carry the metric, numbered per run in step order
# (i of n), grouped by bucket i * max_points / n (integer division; one bucket per row when n <=
# max_points); per bucket its last step and time and the mean of its values (NULLs skipped).
_SERIES_SQL = f"""
WITH s AS (
  SELECT run_id, step, time, v, row_number() OVER (PARTITION BY run_id ORDER BY step) - 1 AS i,
         count(*) OVER (PARTITION BY run_id) AS n
  FROM ({_ROWS_SQL}) r
)
SELECT run_id, i * %(mp)s / n AS b, max(step), (array_agg(extract(epoch FROM time) ORDER BY step DESC))[1],
       avg(v), max(n)
FROM s GROUP BY run_id, b ORDER BY run_id, b
"""


ALL_STEPS = {"after": -1, "until": 2**31 - 1}  # a step range: after < step <= until (MetricRow.step: integer)


def metric_series(run_ids: Sequence[int], metrics: Sequence[str], max_points: int = MAX_POINTS_DEFAULT,
                  steps: dict[str, int] | None = None) -> dict[str, list[dict[str, Any]]]:
    """{metric: [one series per run that reported it, in the order of `run_ids`]}, each
    `{"run", "step", "t", "value", "points" (stored rows), "downsampled"}` with at most `max_points`
    points (`downsample`'s, computed by PostgreSQL: a 20,000-step run sends 1,000 rows, not 20,000);
    `steps`: only the rows with after < step <= until ({"after", "until"}; None: every step)."""
    from django.db import connection

    out: dict[str, list[dict[str, Any]]] = {}
    with connection.cursor() as cur:
        for metric in metrics:
            cur.execute(_SERIES_SQL, {"m": metric, "ids": list(run_ids), "mp": max_points, **(steps or ALL_STEPS)})
            by_run: dict[int, dict[str, Any]] = {}
            for run_id, _b, step, t, value, n in cur.fetchall():
                s = by_run.setdefault(run_id, {"run": run_id, "step": [], "t": [], "value": [], "points": n,
                                               "downsampled": n > max_points})
                s["step"].append(step)
                s["t"].append(float(t))
                s["value"].append(value)
            out[metric] = [by_run[run_id] for run_id in run_ids if run_id in by_run]
    return out


def cached_series(run_ids: Sequence[int], metrics: Sequence[str], max_points: int, *,
                  state: dict[int, str], steps: dict[str, int] | None = None) -> dict[str, list[dict[str, Any]]]:
    """`metric_series`'s answer, each run's series of each metric cached per run (`cached_per_run`)."""
    out: dict[str, list[dict[str, Any]]] = {}
    span = "" if steps is None else f"{steps['after']}-{steps['until']}:"
    for metric in metrics:
        digest = hashlib.sha256(metric.encode("utf-8", "surrogatepass")).hexdigest()[:32]

        def compute(miss: list[int], metric: str = metric) -> dict[int, Any]:
            return {s["run"]: s for s in metric_series(miss, [metric], max_points, steps)[metric]}

        got = cached_per_run(f"series:{max_points}:{span}{digest}", run_ids, compute, state=state)
        out[metric] = [got[run_id] for run_id in run_ids if got.get(run_id)]
    return out


def _held_out(run_ids: Sequence[int], keys: Sequence[str], *,
              first: bool = False) -> dict[int, dict[str, dict[str, Any]]]:
    """{run id: {metric: held_out_stats}} from the stored rows (never from a downsampled series)."""
    result: dict[int, dict[str, dict[str, Any]]] = {run_id: {} for run_id in run_ids}
    for key in keys:
        for run_id, pts in _points(run_ids, key).items():
            stats = held_out_stats([(step, value) for step, _t, value in pts], first=first)
            if stats is not None:
                result[run_id][key] = stats
    return result


def held_out_of(run_id: int, *, first: bool = False) -> dict[str, dict[str, Any]]:
    """{held-out metric: held_out_stats} of one run (an export's model card reads it: rlstudio.exports.facts;
    the sweep table; the run page's Summary card, with `first=True`)."""
    keys = [name for name in metric_names([run_id]) if HELD_OUT.match(name)]
    return _held_out([run_id], keys, first=first)[run_id]


def train_reward_of(run_id: int) -> dict[str, Any] | None:
    """The training reward (TRAIN_REWARD) of one run as held_out_stats(first=True) gives it (first, best,
    last with their steps), from every stored row; None when the run reported none."""
    return _held_out([run_id], [TRAIN_REWARD], first=True)[run_id].get(TRAIN_REWARD)


def _duration_s(run, now) -> float | None:
    if run.started is None:
        return None
    return max(((run.finished or now) - run.started).total_seconds(), 0.0)


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def run_summary(run, *, held_out: dict[str, dict[str, Any]], now=None) -> dict[str, Any]:
    """One run's line of the summary table (a run annotated by run_list_for)."""
    now = now or timezone.now()
    duration = _duration_s(run, now)
    return {
        "id": run.pk, "name": run.name, "owner": run.owner.get_username(), "status": run.status,
        "tags": list(run.tags), "note": run.note,
        "dataset": {"id": run.dataset_id, "name": run.dataset.name},
        "model": {"id": run.model_id, "name": run.model.name},
        "gpus": run.gpus, "step": run.step, "total_steps": run.total_steps,
        "created": _iso(run.created), "started": _iso(run.started), "finished": _iso(run.finished),
        "start_t": run.started.timestamp() if run.started else None,
        "duration_s": duration,
        "gpu_hours": round(run.gpus * (duration or 0.0) / 3600.0, 6),
        "last_reward": latest_reward(run),
        "held_out": held_out,
    }


def compare_runs(*, user: AbstractBaseUser, run_ids: Sequence[int], metrics: Sequence[str] | None = None,
                 max_points: int = MAX_POINTS_DEFAULT, steps: dict[str, int] | None = None) -> dict[str, Any]:
    """The comparison of the runs `run_ids` the user may read (Http404 naming the first other id).

    `metrics`: the `?metrics=` values (parse_metrics) whose series to return, made names by
    resolve_metrics (TooManyMetrics past MAX_METRICS); None: the default held-out metric and
    `critic/score/mean`, those reported. Names no run reported come back as empty lists of series. `steps` ({"after", "until"}):
    the series of that step range only (a zoomed chart's), downsampled within it; the summaries are the
    whole runs'."""
    runs = runs_get_for(user=user, run_ids=list(run_ids))
    ids = [r.pk for r in runs]
    state = rows_state(ids)  # every read of the stored rows below is cached per run under it
    by_run = metric_names_by_run(ids, state=state)
    names = sorted({name for run_names in by_run.values() for name in run_names})
    held_keys = [n for n in names if HELD_OUT.match(n)]
    held_cached = cached_per_run("held-out", ids, lambda miss: _held_out(
        miss, sorted({n for run_id in miss for n in by_run[run_id] if HELD_OUT.match(n)})), state=state)
    held = {run_id: held_cached.get(run_id) or {} for run_id in ids}
    default = default_held_out([held[r] for r in ids])
    if metrics is None:
        metrics = [m for m in (default, TRAIN_REWARD) if m and m in names]
    else:
        metrics = resolve_metrics(metrics, set(names))
    now = timezone.now()
    return {
        "runs": [run_summary(r, held_out=held[r.pk], now=now) for r in runs],
        "held_out_metric": default,
        "held_out_metrics": held_keys,
        "metrics": names,
        "series": cached_series(ids, list(metrics), max_points, state=state, steps=steps),
        "max_points": max_points,
        # the configs as the user may see them: with a run the user only reads, every run's without
        # the platform's keys (they are hidden on that one, so they could only differ falsely)
        "config_diff": config_diff(run_configs_comparable_for(user=user, runs=runs)),
    }
