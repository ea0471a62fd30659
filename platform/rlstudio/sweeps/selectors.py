"""Reads of the sweeps app: a sweep is seen by its owner and by staff only (anyone else: 404, as for a
sweep that does not exist, even a user some of its runs are shared with), and its table, one row per
run with its axis values, state, step, latest training reward and best held-out figures, the best run
marked on a chosen metric."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, QuerySet

from rlstudio.ownership import get_visible_or_404, owned_by_or_staff
from rlstudio.runs.selectors import latest_reward, run_list_for
from rlstudio.telemetry.compare import TRAIN_REWARD, default_held_out, held_out_of

from .models import Sweep

REWARD = "reward"  # the table's "latest reward" column as a metric to pick the best run by


def sweep_list_for(*, user: AbstractBaseUser) -> QuerySet[Sweep]:
    """The sweeps `user` owns (staff: everyone's), newest first, each with `run_count`."""
    qs = Sweep.objects.select_related("owner", "dataset", "model").annotate(run_count=Count("sweep_runs"))
    return owned_by_or_staff(qs, user=user).order_by("-created", "-id")


def sweep_get_for(*, user: AbstractBaseUser, sweep_id) -> Sweep:
    """One sweep of `user`'s (staff: anyone's), or Http404."""
    return get_visible_or_404(Sweep.objects.select_related("owner", "dataset", "model", "val_dataset"),
                              user=user, pk=sweep_id)


@dataclass
class SweepRow:
    """One run of a sweep as its table shows it: `held_out` is {metric: {"best", "best_step", "last",
    "last_step"}} (telemetry.compare.held_out_stats), `reward` the latest critic/score/mean."""

    index: int
    params: dict[str, Any]
    run: Any
    reward: float | None
    held_out: dict[str, dict[str, Any]] = field(default_factory=dict)
    best: bool = False

    def value_of(self, metric: str) -> float | None:
        """The figure the best run is chosen by: the latest reward, or a held-out metric's best value."""
        if metric == REWARD:
            return self.reward
        stats = self.held_out.get(metric)
        return stats["best"] if stats else None


def best_index(values: list[float | None]) -> int | None:
    """The position of the highest value (None ignored), None when none has one or when several runs
    share it (no run is better than the others: runs that all scored 0 have no best)."""
    known = [(value, i) for i, value in enumerate(values) if value is not None]
    if not known:
        return None
    top = max(value for value, _i in known)
    at_top = [i for value, i in known if value == top]
    return at_top[0] if len(at_top) == 1 else None


@dataclass
class SweepTable:
    """A sweep's table: its rows in grid order, the metrics the best run may be chosen by (the latest
    reward, then each held-out metric a run reported), the one chosen and the best row's index."""

    rows: list[SweepRow]
    metrics: list[str]
    metric: str
    best: int | None

    @property
    def run_ids(self) -> list[int]:
        return [row.run.pk for row in self.rows]


def sweep_table(*, user: AbstractBaseUser, sweep: Sweep, metric: str | None = None) -> SweepTable:
    """The table of `sweep` (already narrowed to `user` by `sweep_get_for`). `metric`: what the best
    run is chosen by (REWARD, or a held-out metric); unknown or None: the held-out metric most runs
    report, else the latest reward."""
    links = list(sweep.sweep_runs.order_by("index").values_list("run_id", "index", "params"))
    runs = {r.pk: r for r in run_list_for(user=user).filter(pk__in=[run_id for run_id, _i, _p in links])}
    rows = [SweepRow(index=index, params=params, run=runs[run_id], reward=latest_reward(runs[run_id]),
                     held_out=held_out_of(run_id))
            for run_id, index, params in links if run_id in runs]
    held = sorted({key for row in rows for key in row.held_out})
    metrics = [REWARD] + held
    if metric not in metrics:
        metric = default_held_out([row.held_out for row in rows]) or REWARD
    best = best_index([row.value_of(metric) for row in rows])
    if best is not None:
        rows[best].best = True
    return SweepTable(rows=rows, metrics=metrics, metric=metric, best=best)


def metric_label(metric: str) -> str:
    """A metric as the page names it."""
    return f"latest reward ({TRAIN_REWARD})" if metric == REWARD else f"best {metric}"
