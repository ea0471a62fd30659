"""Reads of quotas: a user's effective quota and what they use now."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from rlstudio.runs.models import ACTIVE_STATUSES, Run, RunStatus

from .models import SHIPPED_DEFAULT, GpuQuota


def quota_for(*, user: AbstractBaseUser) -> GpuQuota:
    """The user's own quota row, else the default row.

    The default row comes with the initial migrations; if it is gone (an admin deleted it, or a test
    emptied the table), the shipped default is put back rather than every launch and quota page
    failing: a finite quota (never "unlimited"), visible and editable in the admin.
    """
    own = GpuQuota.objects.filter(user=user).first()
    if own is not None:
        return own
    default = GpuQuota.objects.filter(is_default=True).first()
    if default is not None:
        return default
    try:
        with transaction.atomic():
            return GpuQuota.objects.create(is_default=True, user=None, **SHIPPED_DEFAULT)
    except IntegrityError:  # another request put it back first (one default row: a unique constraint)
        return GpuQuota.objects.get(is_default=True)


def month_start(now: datetime) -> datetime:
    """Midnight on the first day of `now`'s month, in `now`'s time zone."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def gpu_hours_between(*, user: AbstractBaseUser, start: datetime, end: datetime) -> float:
    """GPU-hours the user's runs held between `start` and `end`: gpus × overlap of [started, finished or now]."""
    runs = Run.objects.filter(owner=user, gpus__gt=0, started__isnull=False, started__lt=end).filter(
        Q(finished__isnull=True) | Q(finished__gt=start)
    )
    total_seconds = 0.0
    for gpus, started, finished in runs.values_list("gpus", "started", "finished"):
        overlap = (min(finished or end, end) - max(started, start)).total_seconds()
        total_seconds += gpus * max(overlap, 0.0)
    return total_seconds / 3600.0


@dataclass(frozen=True)
class QueuedRun:
    """One of the user's queued runs and its place in the whole queue (1 = next)."""

    id: int
    name: str
    position: int
    reason: str


@dataclass(frozen=True)
class QuotaUsage:
    """A user's quota next to their usage now."""

    max_gpus: int
    gpus_held: int
    gpu_hours_per_month: float
    gpu_hours_this_month: float
    max_concurrent_runs: int
    runs_active: int
    max_queued_runs: int
    is_default: bool
    queued: list[QueuedRun] = field(default_factory=list)


def quota_usage_for(*, user: AbstractBaseUser, now: datetime | None = None) -> QuotaUsage:
    """The caller's quota and usage: GPUs held by submitting/running/stopping runs, active runs,
    GPU-hours since the start of this month, and their queued runs with queue positions."""
    now = now or timezone.now()
    quota = quota_for(user=user)
    active = Run.objects.filter(owner=user, status__in=ACTIVE_STATUSES)
    queue = list(
        Run.objects.filter(status=RunStatus.QUEUED).order_by("created", "id").values_list(
            "id", "owner_id", "name", "queue_reason"
        )
    )
    queued = [
        QueuedRun(id=run_id, name=name, position=i + 1, reason=reason)
        for i, (run_id, owner_id, name, reason) in enumerate(queue)
        if owner_id == user.pk
    ]
    return QuotaUsage(
        max_gpus=quota.max_gpus,
        gpus_held=active.aggregate(n=Sum("gpus"))["n"] or 0,
        gpu_hours_per_month=quota.gpu_hours_per_month,
        gpu_hours_this_month=round(gpu_hours_between(user=user, start=month_start(now), end=now), 6),
        max_concurrent_runs=quota.max_concurrent_runs,
        runs_active=active.count(),
        max_queued_runs=quota.max_queued_runs,
        is_default=quota.is_default,
        queued=queued,
    )
