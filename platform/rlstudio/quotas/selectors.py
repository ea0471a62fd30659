"""Reads of quotas: a user's effective quota and what they use now; for staff, the whole picture
(`quota_admin_overview`: the cluster's GPUs, every user's usage against their quota, the head of the
one queue of runs and evaluations in admission order, with its length).

Bounded work whatever the queue's length: a place in the queue is counted in the database
(`rlstudio.runs.services.queue_order.queue_position_of`), and the staff overview loads only the first
QUEUE_SHOWN jobs of each kind (the first QUEUE_SHOWN of the queue are among them)."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Count, Q, Sum
from django.utils import timezone

from rlstudio.catalog.storage import dataset_bytes_used, dataset_bytes_used_by_owner
from rlstudio.runs.models import ACTIVE_STATUSES, Run, RunStatus
from rlstudio.runs.queue import RUN, QueuedJob, queue_order
from rlstudio.runs.services.queue_order import QUEUE_ORDER, queue_position_of, run_job
from rlstudio.runs.services.queue_registry import other_jobs_gpus

from .models import BYTES_PER_GB, SHIPPED_DEFAULT, US_PER_HOUR, GpuHoursSpent, GpuQuota


def quota_for(*, user: AbstractBaseUser | None = None, user_id: int | None = None) -> GpuQuota:
    """The user's own quota row, else the default row: the user given as `user`, or by id (`user_id`).

    The default row comes with the initial migrations; if it is gone (an admin deleted it, or a test
    emptied the table), the shipped default is put back rather than every launch and quota page
    failing: a finite quota (never "unlimited"), visible and editable in the admin.
    """
    if (user is None) == (user_id is None):
        raise TypeError("quota_for takes one of user and user_id")
    own = GpuQuota.objects.filter(user_id=user.pk if user is not None else user_id).first()
    if own is not None:
        return own
    return default_quota()


def default_quota() -> GpuQuota:
    """The default row (put back as shipped if it was deleted; see quota_for)."""
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


def next_month_start(now: datetime) -> datetime:
    """Midnight on the first day of the month after `now`'s, in `now`'s time zone."""
    start = month_start(now)
    return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)


def gpu_microseconds(*, gpus: int, started: datetime, finished: datetime | None, start: datetime,
                     end: datetime) -> int:
    """GPUs × microseconds a job held within [start, end]: it holds them from `started` to `finished`
    (None: still holding, up to `end`). Exact integers, so sums never depend on their order."""
    overlap = min(finished or end, end) - max(started, start)
    return gpus * max(overlap // timedelta(microseconds=1), 0)


def _job_gpu_us_by_owner(*, start: datetime, end: datetime, owner: AbstractBaseUser | None,
                         owner_ids: Iterable[int] | None = None) -> dict[int, int]:
    from rlstudio.evaluations.models import Evaluation

    held: dict[int, int] = {}
    for model in (Run, Evaluation):
        jobs = model.objects.filter(gpus__gt=0, started__isnull=False, started__lt=end).filter(
            Q(finished__isnull=True) | Q(finished__gt=start)
        )
        if owner is not None:
            jobs = jobs.filter(owner=owner)
        if owner_ids is not None:
            jobs = jobs.filter(owner_id__in=owner_ids)
        for owner_id, gpus, started, finished in jobs.values_list("owner_id", "gpus", "started", "finished"):
            us = gpu_microseconds(gpus=gpus, started=started, finished=finished, start=start, end=end)
            held[owner_id] = held.get(owner_id, 0) + us
    return held


def gpu_hours_between(*, user: AbstractBaseUser, start: datetime, end: datetime) -> float:
    """GPU-hours the user's runs and evaluations held between `start` and `end`, from their records
    only: gpus × overlap of [started, finished or end]. A month's budget also counts deleted jobs:
    that is `month_gpu_hours`."""
    return _job_gpu_us_by_owner(start=start, end=end, owner=user).get(user.pk, 0) / US_PER_HOUR


def month_gpu_hours_by_owner(*, now: datetime, month: datetime | None = None,
                             owner: AbstractBaseUser | None = None,
                             owner_ids: Iterable[int] | None = None) -> dict[int, float]:
    """{owner id: GPU-hours} of every user (or one `owner`, or those of `owner_ids`: a team's members)
    in the calendar month of `month` (default:
    `now`'s month) up to `now`: what their runs and evaluations held in it (an evaluation holds its GPUs
    from its admission, `started`, to its end), plus what deleted jobs held in it (GpuHoursSpent). This
    is the figure the monthly budget (`gpu_hours_per_month`) is checked against."""
    start = month_start(month or now)
    if owner_ids is not None:
        owner_ids = sorted(set(owner_ids))
    held = _job_gpu_us_by_owner(start=start, end=min(next_month_start(start), now), owner=owner,
                                owner_ids=owner_ids)
    kept = GpuHoursSpent.objects.filter(month=start.date())
    if owner is not None:
        kept = kept.filter(user=owner)
    if owner_ids is not None:
        kept = kept.filter(user_id__in=owner_ids)
    for user_id, us in kept.order_by().values("user").annotate(us=Sum("gpu_microseconds")).values_list("user", "us"):
        held[user_id] = held.get(user_id, 0) + us
    return {owner_id: us / US_PER_HOUR for owner_id, us in held.items()}


def month_gpu_hours(*, user: AbstractBaseUser, now: datetime, month: datetime | None = None) -> float:
    """The user's GPU-hours in the month of `month` (default `now`'s) up to `now`, deleted jobs'
    included: see `month_gpu_hours_by_owner`."""
    return month_gpu_hours_by_owner(now=now, month=month, owner=user).get(user.pk, 0.0)


@dataclass(frozen=True)
class QueuedRun:
    """One of the user's queued runs and its place in the whole queue (1 = next)."""

    id: int
    name: str
    position: int
    reason: str


@dataclass(frozen=True)
class QueuedEvaluation:
    """The user's queued evaluation and its place in the whole queue (1 = next): of run `run`, or of
    catalog model `model` (the other None)."""

    id: int
    name: str
    position: int
    reason: str
    run: int | None
    model: int | None


def running_evaluations(*, owner: AbstractBaseUser | None = None,
                        exclude_evaluation: int | None = None) -> dict[int, tuple[int, int]]:
    """{owner id: (running evaluations, GPUs they hold)} of every user (or one `owner`), as admission
    counts them against the quota next to runs: an evaluation as one concurrent run, its GPUs as a
    run's. (Playground sessions run on the worker's CPU: they hold no GPU and are not counted here.)"""
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus

    qs = Evaluation.objects.filter(status=EvaluationStatus.RUNNING)
    if owner is not None:
        qs = qs.filter(owner=owner)
    if exclude_evaluation is not None:
        qs = qs.exclude(pk=exclude_evaluation)
    rows = qs.order_by().values("owner").annotate(n=Count("id"), g=Sum("gpus")).values_list("owner", "n", "g")
    return {owner_id: (n, g or 0) for owner_id, n, g in rows}


@dataclass(frozen=True)
class QuotaUsage:
    """A user's quota next to their usage now (dataset storage: the bytes their datasets keep, as
    `rlstudio.catalog.storage.dataset_bytes_used` counts them, against `dataset_storage_gb`)."""

    max_gpus: int
    gpus_held: int
    gpu_hours_per_month: float
    gpu_hours_this_month: float
    max_concurrent_runs: int
    runs_active: int
    max_queued_runs: int
    is_default: bool
    dataset_storage_gb: float = 0.0
    dataset_storage_used_bytes: int = 0
    queued: list[QueuedRun] = field(default_factory=list)
    queued_evaluations: list[QueuedEvaluation] = field(default_factory=list)
    # The user's quota'd teams' `team_quotas.TeamUsage`s (filled by `team_quotas.quota_usage_with_teams`).
    teams: list = field(default_factory=list)

    @property
    def dataset_storage_used_gb(self) -> float:
        return self.dataset_storage_used_bytes / BYTES_PER_GB


def quota_usage_for(*, user: AbstractBaseUser, now: datetime | None = None) -> QuotaUsage:
    """The caller's quota and usage: GPUs held by submitting/running/stopping runs and running
    evaluations, active runs (a running evaluation counts as one, as admission counts it), GPU-hours
    since the start of this month (deleted jobs' included), and their queued runs and queued evaluation
    with their positions in the one queue of runs and evaluations (counted in the database for each of
    their queued jobs: the number of queries grows with the user's own queued jobs, bounded by their
    quota, never with the whole queue)."""
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.evaluations.services import evaluation_job

    n_evals, eval_gpus = running_evaluations(owner=user).get(user.pk, (0, 0))
    now = now or timezone.now()
    quota = quota_for(user=user)
    active = Run.objects.filter(owner=user, status__in=ACTIVE_STATUSES)
    queued = [QueuedRun(id=run.pk, name=run.name, position=queue_position_of(run_job(run)), reason=run.queue_reason)
              for run in Run.objects.filter(owner=user, status=RunStatus.QUEUED).order_by(*QUEUE_ORDER)]
    queued_evaluations = [
        QueuedEvaluation(id=ev.pk, name=_evaluation_name(ev), position=queue_position_of(evaluation_job(ev)),
                         reason=ev.queue_reason, run=ev.run_id, model=ev.model_id)
        for ev in (Evaluation.objects.filter(owner=user, status=EvaluationStatus.QUEUED)
                   .select_related("run", "model").order_by("created", "id"))]
    return QuotaUsage(
        max_gpus=quota.max_gpus,
        gpus_held=(active.aggregate(n=Sum("gpus"))["n"] or 0) + eval_gpus,
        gpu_hours_per_month=quota.gpu_hours_per_month,
        gpu_hours_this_month=round(month_gpu_hours(user=user, now=now), 6),
        max_concurrent_runs=quota.max_concurrent_runs,
        runs_active=active.count() + n_evals,
        max_queued_runs=quota.max_queued_runs,
        is_default=quota.is_default,
        dataset_storage_gb=quota.dataset_storage_gb,
        dataset_storage_used_bytes=dataset_bytes_used(owner=user),
        queued=queued,
        queued_evaluations=queued_evaluations,
    )


@dataclass(frozen=True)
class ClusterCapacity:
    """The cluster's GPUs (Ray's total; None with `error` when Ray does not answer) and what the platform's
    jobs hold: active runs and running evaluations (`gpus_held` is both, as admission subtracts both)."""

    total_gpus: float | None
    error: str
    gpus_held: int
    runs_active: int
    runs_queued: int
    evaluations_gpus: int = 0
    evaluations_queued: int = 0

    @property
    def free_gpus(self) -> float | None:
        return None if self.total_gpus is None else max(self.total_gpus - self.gpus_held, 0.0)


@dataclass(frozen=True)
class UserUsage:
    """One user's quota (own or the default) next to what they use: the staff overview's row."""

    user_id: int
    username: str
    is_default: bool
    max_gpus: int
    gpus_held: int
    gpu_hours_per_month: float
    gpu_hours_this_month: float
    max_concurrent_runs: int
    runs_active: int
    max_queued_runs: int
    runs_queued: int
    evaluations_running: int = 0  # part of gpus_held and runs_active, as admission counts them
    dataset_storage_gb: float = 0.0
    dataset_storage_used_bytes: int = 0

    @property
    def dataset_storage_used_gb(self) -> float:
        return self.dataset_storage_used_bytes / BYTES_PER_GB


@dataclass(frozen=True)
class QueueEntry:
    """A queued job (`kind`: "run" or "evaluation") in admission order (`position` 1 = next) with its
    owner and why it waits. `id` is the run's or the evaluation's; `run_id` the run an evaluation
    evaluates (None: a catalog model's evaluation); `created` when it was queued."""

    position: int
    id: int
    name: str
    owner: str
    gpus: int
    created: datetime
    priority: int
    reason: str
    kind: str = RUN
    run_id: int | None = None


@dataclass(frozen=True)
class QuotaAdminOverview:
    """The staff quota page: the cluster, every active user's usage, and the queue's first jobs
    (`queue`, at most QUEUE_SHOWN, in admission order) out of `queue_total` queued."""

    cluster: ClusterCapacity
    default: GpuQuota
    users: list[UserUsage]
    queue: list[QueueEntry]
    queue_total: int = 0


def cluster_capacity() -> ClusterCapacity:
    """Ray's total GPUs (asked over HTTP, 5 s at most), the GPUs our active runs and other jobs (running
    evaluations) hold, as admission counts them, the runs active and queued, and the evaluations queued."""
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.runs.ray_jobs import RayUnavailable, cluster_total_gpus

    try:
        total, error = cluster_total_gpus(), ""
    except RayUnavailable as exc:
        total, error = None, str(exc)
    active = Run.objects.filter(status__in=ACTIVE_STATUSES).aggregate(n=Count("id"), g=Sum("gpus"))
    others = other_jobs_gpus()
    return ClusterCapacity(total_gpus=total, error=error, gpus_held=(active["g"] or 0) + others,
                           runs_active=active["n"], runs_queued=Run.objects.filter(status=RunStatus.QUEUED).count(),
                           evaluations_gpus=others, evaluations_queued=Evaluation.objects.filter(
                               status=EvaluationStatus.QUEUED).count())


QUEUE_SHOWN = 100  # the queue's first jobs the staff overview lists (its total is given too)


def _queue(*, limit: int) -> list[tuple[QueuedJob, object]]:
    """(job, its Run or Evaluation) of the first `limit` queued runs and evaluations, in the one
    queue's order: the first `limit` of each kind in its own order (which the one queue keeps), merged;
    two queries, whatever the queue's length."""
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus
    from rlstudio.evaluations.services import evaluation_job

    objs: dict[tuple[str, int], object] = {}
    jobs = []
    for run in Run.objects.filter(status=RunStatus.QUEUED).select_related("owner").order_by(*QUEUE_ORDER)[:limit]:
        job = run_job(run)
        jobs.append(job)
        objs[job.kind, job.id] = run
    for ev in (Evaluation.objects.filter(status=EvaluationStatus.QUEUED).select_related("owner", "run", "model")
               .order_by("created", "id")[:limit]):  # all at priority 0: queued first, then by id
        job = evaluation_job(ev)
        jobs.append(job)
        objs[job.kind, job.id] = ev
    return [(job, objs[job.kind, job.id]) for job in queue_order(jobs)[:limit]]


def _evaluation_name(ev) -> str:
    return f"evaluation of run {ev.run.name}" if ev.run_id is not None else f"evaluation of model {ev.model.name}"


def _entry(position: int, job: QueuedJob, obj) -> QueueEntry:
    if job.kind == RUN:
        return QueueEntry(position=position, id=obj.pk, name=obj.name, owner=obj.owner.get_username(),
                          gpus=obj.gpus, created=obj.created, priority=obj.queue_priority,
                          reason=obj.queue_reason, run_id=obj.pk)
    return QueueEntry(position=position, id=obj.pk, name=_evaluation_name(obj), owner=obj.owner.get_username(),
                      gpus=obj.gpus, created=obj.created, priority=job.priority, reason=obj.queue_reason,
                      kind=job.kind, run_id=obj.run_id)


def queue_in_order(*, limit: int | None = None) -> list[QueueEntry]:
    """The first `limit` (default QUEUE_SHOWN) queued runs and evaluations in the order admission
    takes them (`rlstudio.runs.queue`), positions from 1; a fixed number of queries."""
    limit = QUEUE_SHOWN if limit is None else limit
    return [_entry(i + 1, job, obj) for i, (job, obj) in enumerate(_queue(limit=limit))]


def quota_admin_overview(*, now: datetime | None = None) -> QuotaAdminOverview:
    """What the staff quota page shows: the cluster, each active user's usage this month against their
    quota (users by name; GPUs held and active jobs count running evaluations as admission does; their
    datasets' storage against their quota's), and
    the queue's first QUEUE_SHOWN jobs in admission order with the number queued. A fixed number of
    queries, whatever the number of users or of queued jobs."""
    from django.contrib.auth import get_user_model

    now = now or timezone.now()
    default = default_quota()
    own = {q.user_id: q for q in GpuQuota.objects.filter(user__isnull=False)}
    active = {row["owner"]: row for row in Run.objects.filter(status__in=ACTIVE_STATUSES).values("owner")
              .annotate(n=Count("id"), g=Sum("gpus"))}
    queued = dict(Run.objects.filter(status=RunStatus.QUEUED).values("owner").annotate(n=Count("id"))
                  .values_list("owner", "n"))
    evals = running_evaluations()
    hours = month_gpu_hours_by_owner(now=now)
    stored = dataset_bytes_used_by_owner()
    users = []
    model = get_user_model()
    for user in model.objects.filter(is_active=True).order_by(model.USERNAME_FIELD):
        quota = own.get(user.pk, default)
        act = active.get(user.pk, {"n": 0, "g": 0})
        n_evals, eval_gpus = evals.get(user.pk, (0, 0))
        users.append(UserUsage(
            user_id=user.pk, username=user.get_username(), is_default=quota.is_default,
            max_gpus=quota.max_gpus, gpus_held=(act["g"] or 0) + eval_gpus,
            gpu_hours_per_month=quota.gpu_hours_per_month,
            gpu_hours_this_month=round(hours.get(user.pk, 0.0), 6),
            max_concurrent_runs=quota.max_concurrent_runs, runs_active=act["n"] + n_evals,
            max_queued_runs=quota.max_queued_runs, runs_queued=queued.get(user.pk, 0),
            evaluations_running=n_evals, dataset_storage_gb=quota.dataset_storage_gb,
            dataset_storage_used_bytes=stored.get(user.pk, 0),
        ))
    cluster = cluster_capacity()
    return QuotaAdminOverview(cluster=cluster, default=default, users=users, queue=queue_in_order(),
                              queue_total=cluster.runs_queued + cluster.evaluations_queued)
