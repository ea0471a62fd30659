"""Quota admission: may this run start now, and if not, the one sentence that says why; and may the
user queue one more run at all (`check_queue_cap`). Staff's actions on the quota page: set a user's
quota (`quota_set`) and cancel a queued run (`queue_cancel`; moving one is
`rlstudio.runs.services.run_queue_move`), each checked (`check_staff`) and audited. `Quotas` is the
runs app's QuotaPolicy (registered in apps.py): runs asks quotas through it and never imports quotas.

`admission_reason` is called by `rlstudio.runs.services` (through `Quotas`) inside a transaction
that holds the owner's row lock (`lock_owner`), so that two launches by the same user are serialized:
the usage it counts cannot change under it, and concurrent launches can never exceed a quota. The
owner's lock includes those of the members of their quota'd teams (`lock_owners`), so the team
limits (`team_quotas`: a team's GPUs at once and GPU-hours a month, its members together) hold under
concurrent admissions of different members too; staff set them with `team_quota_set` /
`team_quota_delete` (the admin's Team GPU quotas page), audited as `team_quota.*`. `check_queue_cap` is
meant for the same place (after `lock_owner`, before the new run is created): under that lock two
launches by one user cannot both see room for one more queued run.

`dataset_storage_refusal` and `dataset_storage_allowance` are the catalog's dataset storage check and
allowance (`rlstudio.catalog.storage`, registered in apps.py): a user's datasets within their quota's
`dataset_storage_gb`.

`gpu_time_keep` is the runs app's `on_run_delete` hook, `evaluation_gpu_time_keep` the evaluations app's
`on_evaluation_delete` hook and `model_gpu_time_keep` the catalog's `on_model_delete` hook (registered in
apps.py): a deleted run's, evaluation's or model's evaluations' GPU-hours stay in their months' budgets.
"""
from __future__ import annotations

import math

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from rlstudio.accounts.services import audit_record
from rlstudio.runs.models import ACTIVE_STATUSES, Run, RunStatus
from rlstudio.runs.queue import QUOTA_REMEDY, TEAM_QUOTA_REMEDY, TEAM_REASON_MARK, gpus_over_quota, never_reason
from rlstudio.runs.services import RunRefused, run_stop
from rlstudio.runs.services.queue_registry import QuotaPolicy

from .models import BYTES_PER_GB, GpuHoursSpent, GpuQuota, TeamQuota
from .selectors import (
    QuotaUsage,
    gpu_microseconds,
    month_gpu_hours,
    month_start,
    next_month_start,
    quota_for,
    running_evaluations,
)
from .owner_locks import lock_ids, lock_ids_if_free, lock_owner, lock_owners, lock_user, owners_locked
from .team_quotas import (
    members_of,
    quota_teams_of,
    team_gpus_reason,
    team_hours_reason,
    team_usages,
    quota_usage_with_teams,
)


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


def _reason(*, owner: AbstractBaseUser, gpus: int, cluster_free_gpus: float | None, what: str,
            exclude_run: int | None = None, exclude_evaluation: int | None = None) -> str:
    quota = quota_for(user=owner)
    over = gpus_over_quota(what=what, gpus=gpus, most=quota.max_gpus)
    if over:  # no wait will do: more than the quota allows at once (lowered since the launch)
        return never_reason(over, remedy=QUOTA_REMEDY)
    teams = quota_teams_of(user_ids=[owner.pk]) if gpus > 0 else []
    for team in teams:  # nor more than a team of theirs allows at once (lowered since the launch)
        over = gpus_over_quota(what=what, gpus=gpus, most=team.max_gpus, team=team.team.name)
        if over:
            return never_reason(over, remedy=TEAM_QUOTA_REMEDY)
    active = Run.objects.filter(owner=owner, status__in=ACTIVE_STATUSES)
    if exclude_run is not None:
        active = active.exclude(pk=exclude_run)
    n_evals, eval_gpus = running_evaluations(owner=owner, exclude_evaluation=exclude_evaluation).get(owner.pk, (0, 0))
    n_active = active.count() + n_evals
    if n_active >= quota.max_concurrent_runs:
        jobs = "concurrent run"
        held = f"you run {n_active}" if not n_evals else f"your runs and evaluations are {n_active}"
        return f"{held} of your {_plural(quota.max_concurrent_runs, jobs)}"
    if gpus > 0:
        held = (active.aggregate(n=Sum("gpus"))["n"] or 0) + eval_gpus
        if held + gpus > quota.max_gpus:
            return f"you hold {held} of your {_plural(quota.max_gpus, 'GPU')} and this {what} needs {gpus}"
        now = timezone.now()
        usages, why = _team_usages_locked(teams, now=now, exclude_run=exclude_run,
                                          exclude_evaluation=exclude_evaluation)
        if why or (why := team_gpus_reason(usages, gpus=gpus, what=what)):
            return why
        used = month_gpu_hours(user=owner, now=now)
        if used >= quota.gpu_hours_per_month:
            return (f"you used {used:.1f} of your {quota.gpu_hours_per_month:g} GPU-hours this month")
        if why := team_hours_reason(usages):
            return why
        if cluster_free_gpus is not None and gpus > cluster_free_gpus:
            return f"the cluster has {cluster_free_gpus:g} free GPUs and this {what} needs {gpus}"
    return ""


# Why a job waits when a member who joined one of its owner's teams after the owner's lock was taken is
# locked by another transaction (their own admission or launch, say) at the check.
TEAM_JOINED_REASON = ("{mark}{team} has a new member whose own admission or launch is under way: tried again "
                      "at the next queue pass")


def _team_usages_locked(teams, *, now, exclude_run: int | None,
                        exclude_evaluation: int | None) -> tuple[list, str]:
    """(the usage of the owner's quota'd `teams`, '') with their members read now and locked first;
    the owner's lock (`lock_owners`) took the members it read then, so the lock is a no-op unless
    someone joined a team since. One who did is locked (out of the id order) before their jobs are
    counted, so what is counted cannot change under the check; but never waited for: their lock held
    by another transaction gives ([], TEAM_JOINED_REASON naming the team) and the job is tried again at
    the next pass. Waiting there could deadlock: the joiner's own launch or admission takes the
    owner's lock (now a teammate's) after the joiner's, in id order, and a launch PostgreSQL failed for
    a deadlock would answer an error."""
    if not teams:
        return [], ""
    members = members_of(team.team_id for team in teams)
    wanted = set().union(*members.values())
    missing = wanted - lock_ids_if_free(wanted)
    if missing:
        team = next(t for t in teams if members[t.team_id] & missing)
        return [], TEAM_JOINED_REASON.format(mark=TEAM_REASON_MARK, team=team.team.name)
    return team_usages(teams, members, now=now, exclude_run=exclude_run, exclude_evaluation=exclude_evaluation), ""


def admission_reason(*, run: Run, cluster_free_gpus: float | None) -> str:
    """'' when `run` may start now, else why it waits (shown to the user as the queue reason).

    Counts the owner's other active runs (submitting/running/stopping) and running evaluations (one
    evaluation counts as one run, its GPUs as a run's). GPU runs are limited by GPUs held at once,
    GPU-hours this month and concurrent runs; CPU-only runs by concurrent runs only. A run asking more
    GPUs than the quota's max_gpus can never start: its reason says so (`never_reason`).
    A GPU run is also limited by each of its owner's quota'd teams (`team_quotas`): the GPUs the team's
    members hold at once and their GPU-hours this month, together; one asking more than a team's
    max_gpus can never start either. The reason names the team.
    `cluster_free_gpus` is what the cluster can still give (None = not checked).
    """
    return _reason(owner=run.owner, gpus=run.gpus, cluster_free_gpus=cluster_free_gpus, what="run",
                   exclude_run=run.pk)


def job_reason(*, user: AbstractBaseUser, gpus: int, cluster_free_gpus: float | None,
               exclude_evaluation: int | None = None) -> str:
    """'' when an evaluation of `user` asking `gpus` may start now, else why it waits: the same limits
    as a run's (an evaluation on the CPU, 0 GPUs, needs only room under the concurrent-run cap)."""
    return _reason(owner=user, gpus=gpus, cluster_free_gpus=cluster_free_gpus, what="evaluation",
                   exclude_evaluation=exclude_evaluation)


class Quotas(QuotaPolicy):
    """The quota policy admission asks (registered by QuotasConfig.ready; runs never imports quotas)."""

    def lock_owner(self, *, user: AbstractBaseUser) -> None:
        lock_owner(user=user)

    def lock_user(self, *, user: AbstractBaseUser) -> None:
        lock_user(user=user)

    def lock_owners(self, *, user_ids) -> None:
        lock_owners(user_ids=user_ids)

    def owners_locked(self, *, user_ids):
        return owners_locked(user_ids=user_ids)

    def queue_refusal(self, *, user: AbstractBaseUser) -> str:
        try:
            check_queue_cap(user=user)
        except QueueCapReached as exc:
            return exc.message
        return ""

    def reason(self, *, run: Run, cluster_free_gpus: float | None) -> str:
        return admission_reason(run=run, cluster_free_gpus=cluster_free_gpus)

    def usage_for(self, *, user: AbstractBaseUser) -> QuotaUsage:
        return quota_usage_with_teams(user=user)

    def max_gpus(self, *, owner_id: int) -> int:
        return quota_for(user_id=owner_id).max_gpus

    def team_max_gpus(self, *, owner_id: int) -> list[tuple[str, int]]:
        return [(quota.team.name, quota.max_gpus) for quota in quota_teams_of(user_ids=[owner_id])]

    def job_reason(self, *, user: AbstractBaseUser, gpus: int, cluster_free_gpus: float | None) -> str:
        return job_reason(user=user, gpus=gpus, cluster_free_gpus=cluster_free_gpus)


def _kept_rows(*, user_id: int, job: str, gpus: int, started, finished, now) -> list[GpuHoursSpent]:
    """One GpuHoursSpent per month a job held GPUs in up to `now`, its GPU-time within that month
    counted as the month's figure counts it (`month_gpu_hours_by_owner`: up to the month's end or now)."""
    if not gpus or started is None:
        return []
    rows = []
    start = month_start(started)
    while start < min(finished or now, now):
        end = next_month_start(start)
        us = gpu_microseconds(gpus=gpus, started=started, finished=finished, start=start, end=min(end, now))
        if us > 0:
            rows.append(GpuHoursSpent(user_id=user_id, month=start.date(), gpu_microseconds=us, job=job[:300]))
        start = end
    return rows


def _evaluation_job(ev) -> tuple:
    """(owner id, job name, gpus, started, finished) of an evaluation, for `_keep`."""
    of = f"run #{ev.run_id} “{ev.run.name}”" if ev.run_id is not None else f"model “{ev.model.name}”"
    return ev.owner_id, f"evaluation #{ev.pk} of {of}", ev.gpus, ev.started, ev.finished


def _keep(jobs: list[tuple], now) -> list[GpuHoursSpent]:
    """Write the GpuHoursSpent rows of `jobs` ((owner id, job name, gpus, started, finished) each), after
    taking each owner's own admission lock (`owner_locks.lock_ids`, in id order), so an admission never
    counts the month between the rows' writing and the records' deletion. Their own locks only, not
    their quota'd teammates': an admission that counts a user's month for a team (a teammate's) holds
    that user's lock too; and a bulk delete, which took the owners' locks with their teammates'
    first, would otherwise take a teammate who joined since out of the id order here, waiting for
    them (a deadlock with that member's own launch). A CPU job, or one never started, keeps nothing."""
    rows = [row for user_id, job, gpus, started, finished in jobs
            for row in _kept_rows(user_id=user_id, job=job, gpus=gpus, started=started, finished=finished, now=now)]
    lock_ids({row.user_id for row in rows})
    return GpuHoursSpent.objects.bulk_create(rows)


def gpu_time_keep(run: Run, *, now=None) -> list[GpuHoursSpent]:
    """Keep the GPU-hours `run` and its evaluations held (each job's own owner's, in each month it held
    GPUs in) as GpuHoursSpent rows, before the run's records are deleted: the runs app's `on_run_delete`
    hook, called inside the deletion's transaction, so the rows exist exactly when the records are gone."""
    from rlstudio.evaluations.models import Evaluation

    jobs = [(run.owner_id, f"run #{run.pk} “{run.name}”", run.gpus, run.started, run.finished)]
    evaluations = Evaluation.objects.filter(run=run, gpus__gt=0, started__isnull=False).select_related("run")
    jobs += [_evaluation_job(ev) for ev in evaluations.order_by("pk")]
    return _keep(jobs, now or timezone.now())


def evaluation_gpu_time_keep(ev, *, now=None) -> list[GpuHoursSpent]:
    """Keep the GPU-hours evaluation `ev` held (its owner's, per month) before it is deleted on its own:
    the evaluations app's `on_evaluation_delete` hook, called inside the deletion's transaction."""
    return _keep([_evaluation_job(ev)], now or timezone.now())


def model_gpu_time_keep(model, *, now=None) -> list[GpuHoursSpent]:
    """Keep the GPU-hours the evaluations of catalog model `model` held (each its owner's, per month)
    before the model is deleted with them: the catalog's `on_model_delete` hook, called inside the
    deletion's transaction."""
    from rlstudio.evaluations.models import Evaluation

    evaluations = Evaluation.objects.filter(model=model, gpus__gt=0, started__isnull=False).select_related("model")
    return _keep([_evaluation_job(ev) for ev in evaluations.order_by("pk")], now or timezone.now())


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / BYTES_PER_GB:.2f} GB"


def dataset_storage_refusal(owner: AbstractBaseUser, size_bytes: int) -> str:
    """'' when `owner` may store `size_bytes` more bytes of datasets, else why not: the catalog's
    dataset storage check (`rlstudio.catalog.storage.on_dataset_storage_check`, registered in apps.py),
    called under the owner's upload lock. A quota of 0 GB refuses every new dataset (the admin's
    pause); otherwise what their datasets keep (`dataset_bytes_used`) plus this file must fit.
    Staff are held to their quota like anyone."""
    from rlstudio.catalog.storage import dataset_bytes_used

    quota_gb = quota_for(user=owner).dataset_storage_gb
    if quota_gb <= 0:
        return ("your quota allows no dataset uploads (dataset_storage_gb is 0); ask an admin to raise it")
    allowed = quota_gb * BYTES_PER_GB
    used = dataset_bytes_used(owner=owner)
    if used + size_bytes <= allowed:
        return ""
    return (f"your datasets use {_gb(used)} of your {quota_gb:g} GB dataset storage quota and this file adds "
            f"{_gb(size_bytes)} ({size_bytes} bytes); delete datasets you no longer need, or ask an admin "
            f"to raise your dataset_storage_gb")


def dataset_storage_allowance(owner: AbstractBaseUser) -> int:
    """The bytes of datasets `owner`'s quota allows (the catalog's `on_dataset_storage_allowance`)."""
    return int(quota_for(user=owner).dataset_storage_gb * BYTES_PER_GB)


def check_staff(*, user: AbstractBaseUser) -> None:
    """PermissionDenied unless `user` is active staff (the quota page's actions are theirs only)."""
    from django.core.exceptions import PermissionDenied

    if not (getattr(user, "is_active", False) and getattr(user, "is_staff", False)):
        raise PermissionDenied("only staff may change quotas or the queue")


QUOTA_FIELDS = ("max_gpus", "gpu_hours_per_month", "max_concurrent_runs", "max_queued_runs", "dataset_storage_gb")
QUOTA_MAX_COUNT = 2**31 - 1  # the integer limits are PostgreSQL integer columns
_FLOAT_FIELDS = ("gpu_hours_per_month", "dataset_storage_gb")


class QuotaInvalid(ValueError):
    """A quota value out of range; `field` names it."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def quota_set(*, user: AbstractBaseUser, by: AbstractBaseUser, max_gpus: int, gpu_hours_per_month: float,
              max_concurrent_runs: int, max_queued_runs: int, dataset_storage_gb: float | None = None) -> GpuQuota:
    """Give `user` a quota row of their own with these limits (created, or changed if they have one);
    `dataset_storage_gb` None keeps the storage their quota allows now.

    Staff only (`check_staff`); every value must be >= 0, and a count at most QUOTA_MAX_COUNT
    (QuotaInvalid naming the field). Audited as
    `quota.create` / `quota.change` with the user and each changed value (before → after). Queued runs
    the new limits allow start at the reconcile's next admission pass.
    """
    check_staff(user=by)
    values = {"max_gpus": max_gpus, "gpu_hours_per_month": gpu_hours_per_month,
              "max_concurrent_runs": max_concurrent_runs, "max_queued_runs": max_queued_runs,
              "dataset_storage_gb": dataset_storage_gb}
    for name, value in values.items():
        if value is None and name == "dataset_storage_gb":
            continue
        if value is None or not math.isfinite(value) or value < 0:
            raise QuotaInvalid(name, "must be a number, 0 or more")
        if name not in _FLOAT_FIELDS and value > QUOTA_MAX_COUNT:
            raise QuotaInvalid(name, f"must be at most {QUOTA_MAX_COUNT}")
    with transaction.atomic():
        quota = GpuQuota.objects.select_for_update().filter(user=user).first()
        current = quota if quota is not None else quota_for(user=user)
        if values["dataset_storage_gb"] is None:
            values["dataset_storage_gb"] = current.dataset_storage_gb
        before = {f: getattr(current, f) for f in QUOTA_FIELDS}
        created = quota is None
        if created:
            quota = GpuQuota.objects.create(user=user, is_default=False, **values)
        else:
            for name, value in values.items():
                setattr(quota, name, value)
            quota.save()
        changed = {f: [before[f], values[f]] for f in QUOTA_FIELDS if before[f] != values[f]}
        audit_record(actor=by, action="quota.create" if created else "quota.change", obj=quota,
                     data={"user": user.get_username(), "changed": changed})
    return quota


TEAM_QUOTA_FIELDS = ("max_gpus", "gpu_hours_per_month")


def team_quota_set(*, team, by: AbstractBaseUser, max_gpus: int, gpu_hours_per_month: float) -> TeamQuota:
    """Give `team` (a Django auth group) these shared limits (its TeamQuota created, or changed).

    Staff only (`check_staff`); each value >= 0 and max_gpus at most QUOTA_MAX_COUNT (QuotaInvalid
    naming the field). Audited as `team_quota.create` / `team_quota.change` with the team's name and
    each changed value (before → after). Queued jobs the new limits allow start at the next pass."""
    check_staff(user=by)
    values = {"max_gpus": max_gpus, "gpu_hours_per_month": gpu_hours_per_month}
    for name, value in values.items():
        if value is None or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise QuotaInvalid(name, "must be a number, 0 or more")
    if max_gpus > QUOTA_MAX_COUNT or max_gpus != int(max_gpus):
        raise QuotaInvalid("max_gpus", f"must be a whole number, at most {QUOTA_MAX_COUNT}")
    values["max_gpus"] = int(max_gpus)
    with transaction.atomic():
        quota, created = _team_quota_row(team_id=team.pk, values=values)
        before = {f: None for f in TEAM_QUOTA_FIELDS} if created else {f: getattr(quota, f) for f in TEAM_QUOTA_FIELDS}
        if not created:
            for name, value in values.items():
                setattr(quota, name, value)
            quota.save()
        changed = {f: [before[f], values[f]] for f in TEAM_QUOTA_FIELDS if before[f] != values[f]}
        audit_record(actor=by, action="team_quota.create" if created else "team_quota.change", obj=quota,
                     data={"team": team.name, "changed": changed})
    return quota


def _team_quota_row(*, team_id: int, values: dict) -> tuple[TeamQuota, bool]:
    """(the team's TeamQuota locked, False), or (one created with `values`, True) when it has none.
    Two saves of a new team's quota at once (two staff, a double submit) both find none; the second
    one's insert waits for the first and meets the one-row-per-team constraint: it then changes that
    row (IntegrityError caught in a savepoint) instead of failing."""
    quota = TeamQuota.objects.select_for_update().filter(team_id=team_id).first()
    if quota is not None:
        return quota, False
    try:
        with transaction.atomic():
            return TeamQuota.objects.create(team_id=team_id, **values), True
    except IntegrityError:
        return TeamQuota.objects.select_for_update().get(team_id=team_id), False


def team_quota_delete(*, quota: TeamQuota, by: AbstractBaseUser) -> None:
    """Take a team's shared limits away (its members are held to their own quotas only). Staff only;
    audited as `team_quota.delete` with the team's name and the limits it had."""
    check_staff(user=by)
    with transaction.atomic():
        locked = TeamQuota.objects.select_for_update().select_related("team").filter(pk=quota.pk).first()
        if locked is None:
            return
        audit_record(actor=by, action="team_quota.delete", obj=locked,
                     data={"team": locked.team.name, **{f: getattr(locked, f) for f in TEAM_QUOTA_FIELDS}})
        locked.delete()


def queue_cancel(*, run: Run, by: AbstractBaseUser) -> Run:
    """Staff cancel a queued run (queued → stopped through `run_stop`, which audits the transition).

    Only a run still queued: one admitted meanwhile is refused (RunRefused), never stopped by this.
    Audited as `run.queue_cancel` with the owner and the reason it waited for.
    """
    check_staff(user=by)
    with transaction.atomic():
        locked = Run.objects.select_for_update(of=("self",)).select_related("owner").get(pk=run.pk)
        if locked.status != RunStatus.QUEUED:
            raise RunRefused(f"run {run.pk} is {locked.status}, not queued: only a queued run can be cancelled here")
        reason = locked.queue_reason
        run_stop(run=locked, by=by)
        audit_record(actor=by, action="run.queue_cancel", obj=locked,
                     data={"owner": locked.owner.get_username(), "reason": reason})
    run.refresh_from_db()
    return run
