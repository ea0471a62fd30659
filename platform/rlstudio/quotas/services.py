"""Quota admission: may this run start now, and if not, the one sentence that says why; and may the
user queue one more run at all (`check_queue_cap`).

`admission_reason` is called by `rlstudio.runs.services` inside a transaction that holds the owner's
row lock (`lock_owner`), so that two launches by the same user are serialized: the usage it counts
cannot change under it, and concurrent launches can never exceed a quota. `check_queue_cap` is
meant for the same place (after `lock_owner`, before the new run is created): under that lock two
launches by one user cannot both see room for one more queued run.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Sum
from django.utils import timezone

from rlstudio.runs.models import ACTIVE_STATUSES, Run, RunStatus

from .selectors import gpu_hours_between, month_start, quota_for


def lock_owner(*, user: AbstractBaseUser) -> None:
    """Take the row lock that serializes one user's admissions (inside a transaction)."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk", flat=True).first()


def _plural(n: float, word: str) -> str:
    return f"{n:g} {word}" + ("" if n == 1 else "s")


class QueueCapReached(Exception):
    """The user already has as many queued runs as their quota's `max_queued_runs`.

    `message` is the sentence to show the user; `queued` and `limit` are the numbers in it."""

    def __init__(self, *, queued: int, limit: int):
        self.queued, self.limit = queued, limit
        if limit == 0:
            self.message = "your quota allows no queued runs (max_queued_runs is 0); ask an admin to raise it"
        else:
            self.message = (f"you already have {_plural(queued, 'queued run')} (your quota's max_queued_runs "
                            f"is {limit}); stop one or wait for one to start")
        super().__init__(self.message)


def check_queue_cap(*, user: AbstractBaseUser) -> None:
    """Raise QueueCapReached when `user`'s runs in status `queued` are >= their quota's max_queued_runs.

    Staff are held to their quota like anyone (give them a quota row with a larger cap). Only reads,
    plus (once) quota_for's savepoint-guarded re-creation of a deleted default row, so it is safe
    inside the caller's transaction after `lock_owner(user=...)`, and does not end it.
    """
    limit = quota_for(user=user).max_queued_runs
    queued = Run.objects.filter(owner=user, status=RunStatus.QUEUED).count()
    if queued >= limit:
        raise QueueCapReached(queued=queued, limit=limit)


def admission_reason(*, run: Run, cluster_free_gpus: float | None) -> str:
    """'' when `run` may start now, else why it waits (shown to the user as the queue reason).

    Counts the owner's other active runs (submitting/running/stopping). GPU runs are limited by GPUs
    held at once, GPU-hours this month and concurrent runs; CPU-only runs by concurrent runs only.
    `cluster_free_gpus` is what the cluster can still give (None = not checked).
    """
    owner = run.owner
    quota = quota_for(user=owner)
    active = Run.objects.filter(owner=owner, status__in=ACTIVE_STATUSES).exclude(pk=run.pk)
    n_active = active.count()
    if n_active >= quota.max_concurrent_runs:
        return (f"you run {n_active} of your {_plural(quota.max_concurrent_runs, 'concurrent run')}")
    if run.gpus > 0:
        held = active.aggregate(n=Sum("gpus"))["n"] or 0
        if held + run.gpus > quota.max_gpus:
            return f"you hold {held} of your {_plural(quota.max_gpus, 'GPU')} and this run needs {run.gpus}"
        now = timezone.now()
        used = gpu_hours_between(user=owner, start=month_start(now), end=now)
        if used >= quota.gpu_hours_per_month:
            return (f"you used {used:.1f} of your {quota.gpu_hours_per_month:g} GPU-hours this month")
        if cluster_free_gpus is not None and run.gpus > cluster_free_gpus:
            return f"the cluster has {cluster_free_gpus:g} free GPUs and this run needs {run.gpus}"
    return ""
