"""Admission: a queued job is admitted when its owner's quota and the cluster allow (the fair queue),
in the one queue's order (`rlstudio.runs.queue`: higher `queue_priority` first, then the one queued
first, runs and the other kinds alike), which staff change for runs with `run_queue_move`. The other
kinds of queued jobs (evaluations) register with `queued_kind_register`, so that one pass
(`queue_admit_jobs`) admits them all in that order against the same quotas and GPUs.

Every admission, of any kind, holds its owner's lock (`QuotaPolicy.lock_owner`), so that one user's
admissions are serialized and can never exceed the quota together; the passes themselves are
serialized by a PostgreSQL advisory lock (`QUEUE_LOCK`), so that two workers never hand the same free
GPUs out twice.

Admission happens only in a pass: a launch (of a run: `lineage._create_and_launch`; of an evaluation)
records its job queued, commits, then runs one pass itself (`queue_admit_launched`), so a job is
admitted at launch exactly when the pass admits it: never ahead of an older queued GPU job of any owner
that waits for the cluster's GPUs (while an owner at their quota still holds no one back). A launch
waits at most LAUNCH_LOCK_WAIT_S for a pass under way; when it cannot run its pass (the lock is busy,
or the pass failed: logged) its job stays queued with LAUNCH_PASS_REASON for the reconcile's pass, and
the launch answers normally (its job is saved: an error would make the client launch it twice).

Each pass is one transaction holding QUEUE_LOCK as a transaction-level advisory lock
(`pg_try_advisory_xact_lock`: never a session lock, which a failed transaction could leave held for
good); its submissions are sent when it commits (`dispatch.one_broker_try`: after one the broker
refused, the others go back to the queue without trying it again), and while the broker did not
answer at this process's last try a pass admits one run only, whose submission tries it again. Ray's answer on the cluster's GPUs
is cached a few seconds per process (`ray_jobs.cluster_total_gpus`), so a launch and its pass ask Ray
at most once.

A job asking more GPUs than its owner's quota's `max_gpus`, or than one of their team quotas'
`max_gpus`, is refused at launch (`gpus_refusal`, a 400 on `gpus`). One asking more than the cluster has in all now is accepted and queued: a GPU node may be
restarting, or an autoscaler may add one. A queued job that can never be admitted as it is (more than
the quota or a team quota allows: an admin lowered it; more than the cluster has now) stays queued with a reason that
says so (`rlstudio.runs.queue.never_reason`), is not tried, holds none of the others back, and its
owner's later jobs do not wait behind it.

Quotas are asked through a `QuotaPolicy` that the quotas app registers at startup
(`quota_policy_register`, from its AppConfig.ready), so that runs never imports quotas (quotas reads
runs, not the other way round).

This module owns admission itself (`run_admit`, the queue's passes, staff moving a run in the queue);
the registries it asks are `queue_registry`'s, the queue's order in the database `queue_order`'s, and
the cluster's GPUs (and the launch's GPU checks, `gpus_refusal`) `cluster`'s."""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record

from ..models import Run, RunStatus
from ..errors import RunRefused
from ..queue import (
    CLUSTER_REMEDY,
    RUN,
    Attempt,
    QueuedJob,
    admission_pass,
    gpus_over_cluster,
    never_reason,
)
from .cluster import cluster_free_gpus as free_gpus, cluster_total_gpus, gpus_over_limits, quota_gpu_limits
from .queue_order import first_run_ahead, run_job
from .queue_registry import QueuedKind, queued_kinds, quota_policy
from .transitions import run_transition

S = RunStatus
log = logging.getLogger(__name__)


REASON_MAX = Run._meta.get_field("queue_reason").max_length


def clip_reason(reason: str) -> str:
    """A queue reason as stored (runs' and evaluations' `queue_reason` hold REASON_MAX characters): the
    one rule every writer of a reason follows, so that comparing a reason with the stored one holds."""
    return reason[:REASON_MAX]


SUBMIT_UNSENT_REASON = "waiting to be submitted: the task queue is unreachable"


def enqueue(task_name: str, *args, on_unsent=None) -> None:
    """Send a Celery task once the current transaction commits (the worker must see our writes);
    `on_unsent(error)` runs instead when the broker cannot be reached (see `dispatch`)."""
    from ..dispatch import send_after_commit

    send_after_commit(task_name, *args, on_unsent=on_unsent)


def enqueue_submit(run_id: int) -> None:
    enqueue("submit_run", run_id, on_unsent=lambda exc: run_requeue_unsent(run_id=run_id, error=exc))


def run_requeue_unsent(*, run_id: int, error: Exception | str) -> bool:
    """A submitting run whose submit task never reached the broker goes back to the queue (first in
    line: it keeps its creation time) with SUBMIT_UNSENT_REASON; the reconcile's admission pass sends
    it again once the broker answers. Returns whether it moved (not when a task got it meanwhile)."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run_id).first()
        if locked is None or locked.status != S.SUBMITTING or locked.ray_submission_id:
            return False
        run_transition(run=locked, to=S.QUEUED, reason=SUBMIT_UNSENT_REASON)
        audit_record(actor=None, action="run.submit_unsent", obj=locked, data={"error": str(error)[:500]})
    return True


def run_admit(*, run: Run, by: AbstractBaseUser | None = None, cluster_free_gpus: float | None = None) -> bool:
    """Admit a queued run if its owner's quota (and the cluster) allow: queued → submitting, and the
    submit task is sent. Otherwise it stays queued with the reason updated. Returns admitted or not.
    It waits behind its owner's runs and other jobs (evaluations) queued before it (the one queue's
    order), except those that can never be admitted as they are (reason `never_reason`'s).
    `cluster_free_gpus`: what the cluster can still give (the pass's count); None: asked here.

    Inside one transaction holding the owner's row lock (which the other kinds' admissions take too),
    so that concurrent admissions of one user's jobs are serialized and can never exceed the quota
    together.
    """
    policy = quota_policy()
    with transaction.atomic():
        policy.lock_owner(user=run.owner)
        # Only the run's row (select_related would lock its owner's FOR UPDATE too, held to the pass's
        # commit: a stop that audits, FOR KEY SHARE on the owner at its commit, would deadlock with it),
        # and never waiting for it: the pass holds owners' locks, and a bulk delete locks runs, then
        # owners. A row locked elsewhere (another admission, a delete) is RunRefused, as a deleted one:
        # the pass treats the run as out of the queue for this pass only (a run still queued is tried by
        # the next one).
        locked = (Run.objects.select_for_update(of=("self",), no_key=True, skip_locked=True)
                  .select_related("owner").filter(pk=run.pk).first())
        if locked is None:
            raise RunRefused(f"run {run.pk} is being changed by another request (or was deleted): try again")
        if locked.status != S.QUEUED:
            raise RunRefused(f"run {run.pk} is {locked.status}, not queued")
        earlier = first_run_ahead(job=run_job(locked))
        other = "" if earlier is not None else next(
            (phrase for kind in queued_kinds() if (phrase := kind.earlier_of(job=run_job(locked)))), "")
        if earlier is not None:
            reason = f"waiting behind your earlier queued run #{earlier.pk}"  # no name: readers see it
        elif other:
            reason = f"waiting behind your earlier queued {other}"
        else:
            free = cluster_free_gpus if cluster_free_gpus is not None else free_gpus(needed=locked.gpus)
            reason = policy.reason(run=locked, cluster_free_gpus=free)
        reason = clip_reason(reason)
        if reason:
            if locked.queue_reason != reason:
                locked.queue_reason = reason
                locked.save(update_fields=["queue_reason"])
                audit_record(actor=by, action="run.queue", obj=locked, data={"reason": reason})
            run.queue_reason = reason
            return False
        run_transition(run=locked, to=S.SUBMITTING, by=by)
        enqueue_submit(locked.pk)
    # The submit task is sent on commit; an unreachable broker puts the run back in the queue.
    run.refresh_from_db(fields=["status", "queue_reason"])
    return run.status != S.QUEUED



QUEUE_MOVES = ("front", "back")


def run_queue_move(*, run: Run, by: AbstractBaseUser, to: str) -> Run:
    """Staff move a queued run to the front or the back of the whole queue (`to`: "front" | "back").

    The run's `queue_priority` becomes one above (front) or below (back) every other queued job's (a
    queued evaluation's is 0), so it is admitted first (or last) among them; its owner's other queued
    jobs follow the same order
    (a run moved to the front is no longer behind its owner's older ones). Quotas still apply: a run
    at the front whose owner is at their quota waits, and the runs behind it are admitted meanwhile.
    It takes QUEUE_LOCK first (waiting at most QUEUE_MOVE_WAIT_S for a pass under way, else
    RunRefused saying to try again: a pass holds the queued rows it tried until it commits, so locking
    them all here first, in no order of the pass's, could deadlock with it), then the queued rows while
    the new priority is chosen, so two moves cannot tie. Audited (`run.queue_move`). PermissionDenied
    for non-staff, RunRefused when the run is not queued, ValueError for an unknown `to`.
    """
    from django.core.exceptions import PermissionDenied
    from django.db.models import Max, Min

    if not getattr(by, "is_staff", False):
        raise PermissionDenied("only staff may reorder the queue")
    if to not in QUEUE_MOVES:
        raise ValueError(f"unknown queue move {to!r}; known: {', '.join(QUEUE_MOVES)}")
    with transaction.atomic():
        if not _take_queue_lock(wait_s=QUEUE_MOVE_WAIT_S):
            raise RunRefused(f"the queue is being admitted (a pass under way for over {QUEUE_MOVE_WAIT_S:g} s): "
                             "nothing was moved; try again in a moment")
        list(Run.objects.select_for_update().filter(status=S.QUEUED).values_list("pk", flat=True))
        locked = Run.objects.get(pk=run.pk)
        if locked.status != S.QUEUED:
            raise RunRefused(f"run {run.pk} is {locked.status}, not queued: only a queued run can be moved")
        others = Run.objects.filter(status=S.QUEUED).exclude(pk=locked.pk)
        # The other kinds' queued jobs (evaluations) wait at priority 0.
        theirs = [0] if any(kind.queued() for kind in queued_kinds()) else []
        if to == "front":
            edges = [p for p in [others.aggregate(p=Max("queue_priority"))["p"], *theirs] if p is not None]
            priority = locked.queue_priority if not edges else max(max(edges) + 1, locked.queue_priority)
        else:
            edges = [p for p in [others.aggregate(p=Min("queue_priority"))["p"], *theirs] if p is not None]
            priority = locked.queue_priority if not edges else min(min(edges) - 1, locked.queue_priority)
        before = locked.queue_priority
        if priority != before:
            locked.queue_priority = priority
            locked.save(update_fields=["queue_priority"])
        audit_record(actor=by, action="run.queue_move", obj=locked,
                     data={"to": to, "priority_before": before, "priority": priority})
    run.refresh_from_db(fields=["queue_priority"])
    return run


def run_launch_recorded(*, run: Run, by: AbstractBaseUser) -> Run:
    """After a launch's transaction committed and its pass ran (`queue_admit_launched`: admitted, its
    submit task sent or, the broker down, back in the queue; or still queued, with why): `run` as it is
    now, the launch audited (`run.launch`)."""
    run.refresh_from_db()
    audit_record(actor=by, action="run.launch", obj=run, data={"status": run.status})
    return run


QUEUE_LOCK = (0x524C5351, 0)  # "RLSQ": the advisory lock that serializes the queue's passes
# The reason of a GPU job the pass did not try: one queued before it waits for the cluster's GPUs.
HELD_BACK_REASON = "waiting for the cluster's GPUs: a GPU job queued before this one waits for them first"


def _try_admit_run(run: Run, free: float | None) -> Attempt | None:
    try:
        ok = run_admit(run=run, cluster_free_gpus=free)
    except RunRefused:
        # Cancelled (or deleted) since the pass loaded it, or its row locked by another transaction
        # (skipped, never waited for): not tried in this pass; a queued one is tried by the next.
        return None
    from ..dispatch import broker_was_down

    reason = "" if ok else run.queue_reason
    # Admitted while the task queue was down at its last try: this one's submission tries it again,
    # and the pass stops here (the jobs after it are not admitted only to come back to the queue).
    return Attempt(admitted=ok, reason=reason, cluster=reason.startswith("the cluster"),
                   unsent=reason == SUBMIT_UNSENT_REASON or (ok and broker_was_down()))


def _hold_runs(run_ids: list[int], reason: str = HELD_BACK_REASON) -> None:
    """Record `reason` (HELD_BACK_REASON, or a `never_reason`) on those of these runs still queued
    whose reason differs (audited as `run.queue`, as `run_admit` records a reason)."""
    reason = clip_reason(reason)
    changed = list(Run.objects.filter(pk__in=run_ids, status=S.QUEUED).exclude(queue_reason=reason)
                   .only("pk", "name", "owner_id"))
    if not changed:
        return
    Run.objects.filter(pk__in=[run.pk for run in changed], status=S.QUEUED).update(queue_reason=reason)
    for run in changed:
        audit_record(actor=None, action="run.queue", obj=run, data={"reason": reason})


class _Never:
    """The pass's `never` check (`admission_pass`): whether a GPU job can never be admitted as it is,
    its owner's quota's `max_gpus` and their quota'd teams' (`quota_gpu_limits`) read once per owner,
    and Ray's total GPUs (`cluster_total_gpus`: Ray's answer is cached, so a pass asks it at most once)
    (only for a job that does not fit in the free GPUs); the reason is recorded on the job (runs:
    `_hold_runs`; other kinds: `QueuedKind.hold`) before the pass goes on, so the owner's later jobs,
    tried after it, see it and do not wait behind it (nor does a job over a team's max_gpus get the
    held-back reason behind one waiting for the cluster)."""

    def __init__(self, kinds: dict[str, QueuedKind]):
        self.kinds, self.limits = kinds, {}

    def __call__(self, job: QueuedJob, free: float | None) -> bool:
        if job.owner_id not in self.limits:
            self.limits[job.owner_id] = quota_gpu_limits(owner_id=job.owner_id)
        why, remedy = gpus_over_limits(self.limits[job.owner_id], what=job.kind, gpus=job.gpus)
        if not why and (free is None or job.gpus > free):
            why = gpus_over_cluster(what=job.kind, gpus=job.gpus, total=cluster_total_gpus())
            remedy = CLUSTER_REMEDY
        if not why:
            return False
        reason = never_reason(why, remedy=remedy)
        if job.kind == RUN:
            _hold_runs([job.id], reason)
        else:
            self.kinds[job.kind].hold(job_ids=[job.id], reason=reason)
        return True


# How long a launch's pass waits for a pass under way: past it, the launch's job waits, queued, with
# LAUNCH_PASS_REASON for the reconcile's pass.
LAUNCH_LOCK_WAIT_S = 2.0
# How long a staff queue move waits for a pass under way (which may ask Ray, 5 s at most).
QUEUE_MOVE_WAIT_S = 10.0
LAUNCH_PASS_REASON = "waiting for the next queue pass (the reconcile's, every few seconds)"
_LOCK_RETRY_S = 0.05


def _take_queue_lock(*, wait_s: float = 0.0) -> bool:
    """Take QUEUE_LOCK until the current transaction ends (`pg_try_advisory_xact_lock`, tried again
    every 50 ms for up to `wait_s` seconds); whether it got it. Only inside a transaction (a
    transaction-level lock: PostgreSQL frees it at commit or rollback, so no error can leave it held)."""
    from django.db import connection

    assert connection.in_atomic_block, "QUEUE_LOCK is taken inside a transaction"
    deadline = time.monotonic() + wait_s
    with connection.cursor() as cur:
        while True:
            cur.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", list(QUEUE_LOCK))
            if cur.fetchone()[0]:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_LOCK_RETRY_S)


def _queue_pass(*, wait_s: float) -> list[QueuedJob] | None:
    """One pass (see `queue_admit_jobs`) in one transaction that holds QUEUE_LOCK; None when the lock
    stayed busy for `wait_s` seconds (another pass is under way: nothing done). Never inside a
    transaction (`atomic(durable=True)`)."""
    from ..dispatch import one_broker_try

    # durable: never inside a caller's transaction, which would hold the pass's locks (QUEUE_LOCK, the
    # owners') past the pass and send its submissions only at the caller's commit (RuntimeError).
    with one_broker_try(), transaction.atomic(durable=True):
        if not _take_queue_lock(wait_s=wait_s):
            return None
        kinds = {k.kind: k for k in queued_kinds()}
        runs = {r.pk: r for r in Run.objects.filter(status=S.QUEUED).select_related("owner")}
        jobs = [run_job(r) for r in runs.values()]
        for kind in kinds.values():
            jobs.extend(kind.queued())
        if any(job.gpus > 0 for job in jobs):
            # Ask Ray now (5 s timeout; its answer or failure is cached CLUSTER_TOTAL_TTL_S, which the
            # pass's `free_gpus` then reads), not under the owners' locks: a launch, export or
            # playground session of a queued job's owner never waits on Ray.
            cluster_total_gpus()
        # Owners in id order (`lock_owners`), as every holder of several owners' locks takes them, up
        # front: inside the block an admission's own `lock_owner` never waits for a lock not taken here
        # (a member who joined an owner's team since: that job is RunRefused, tried by the next pass).
        with quota_policy().owners_locked(user_ids={job.owner_id for job in jobs}):
            return _admit_locked(jobs, runs, kinds)


def _admit_locked(jobs: list[QueuedJob], runs: dict[int, Run], kinds: dict[str, QueuedKind]) -> list[QueuedJob]:
    """`_queue_pass`'s admissions, its owners' locks held: each job tried in the queue's order; the GPU
    jobs held back behind one waiting for the cluster get HELD_BACK_REASON."""
    def try_admit(job: QueuedJob, free: float | None) -> Attempt | None:
        # Each admission in its own savepoint: one job's error (a bug, a database error) rolls back
        # that job's changes only (and drops the submit it registered), logged; the pass goes on
        # and the job, treated as left the queue this pass, is tried again by the next one.
        try:
            with transaction.atomic():
                if job.kind == RUN:  # run_admit locks the row and checks it is still queued
                    return _try_admit_run(runs[job.id], free)
                return kinds[job.kind].try_admit(job_id=job.id, cluster_free_gpus=free)
        except Exception:  # noqa: BLE001 - any one job's failure never undoes the others' admissions
            log.exception("queue pass: admitting %s failed; the next pass tries it again", job.label)
            return None

    held: dict[str, list[int]] = {}
    admitted = admission_pass(jobs, free_gpus=lambda needed: free_gpus(needed=needed),
                              try_admit=try_admit, never=_Never(kinds),
                              held_back=lambda job, _blocker: held.setdefault(job.kind, []).append(job.id))
    for kind, ids in held.items():
        if kind == RUN:
            _hold_runs(ids)
        else:
            kinds[kind].hold(job_ids=ids, reason=HELD_BACK_REASON)
    return admitted


def queue_admit_jobs() -> list[QueuedJob]:
    """One pass of the fair queue: every queued job, runs and the registered kinds, tried once in the
    one queue's order while quotas and the cluster allow (`rlstudio.runs.queue.admission_pass`); the
    GPU jobs it did not try, behind one waiting for the cluster, get HELD_BACK_REASON, and those that
    can never be admitted as they are a `never_reason` (`_Never`). Returns the jobs admitted. One
    transaction holding QUEUE_LOCK (`_take_queue_lock`): a pass that finds another under way leaves the
    queue to it and admits nothing. The submissions are sent when it commits."""
    return _queue_pass(wait_s=0.0) or []


def queue_admit_launched(job_model, *, pk: int) -> None:
    """The launch path's admission of its job (row `pk` of `job_model`: Run, or another kind's model
    with `status` and `queue_reason`), once the launch's transaction has recorded it queued and
    committed (never inside a caller's transaction): one pass of the whole queue, so the new job is
    admitted exactly when its place in the one queue allows, as the reconcile's pass would. It waits at
    most LAUNCH_LOCK_WAIT_S for a pass under way. A launch's own transaction never takes QUEUE_LOCK: it
    holds only the rows it references (FOR KEY SHARE) and its owner's lock, none of which a pass waits
    on while holding anything the launch needs.

    The pass's errors are logged, never raised (the job is saved, and an error would make its client
    launch it again). A job still queued with no reason then gets one (docs/api.md promises a queued
    job says why it waits): its pass did not run (busy past the wait, or failed: LAUNCH_PASS_REASON),
    or stopped before it because the task queue did not answer (SUBMIT_UNSENT_REASON)."""
    from ..dispatch import broker_was_down

    try:
        _queue_pass(wait_s=LAUNCH_LOCK_WAIT_S)
    except Exception:  # noqa: BLE001 - any error of the pass (another user's job, a deadlock, Ray)
        log.exception("a launch's queue pass failed; its job waits for the reconcile's pass")
    reason = SUBMIT_UNSENT_REASON if broker_was_down() else LAUNCH_PASS_REASON
    job_model.objects.filter(pk=pk, status="queued", queue_reason="").update(queue_reason=reason)


def queue_admit_all() -> list[int]:
    """`queue_admit_jobs`, returning the ids of the runs it admitted."""
    return [job.id for job in queue_admit_jobs() if job.kind == RUN]


@contextlib.contextmanager
def queue_paused(*, wait_s: float = QUEUE_MOVE_WAIT_S) -> Iterator[bool]:
    """No queue pass admits anything while the block runs: QUEUE_LOCK is held the whole time from a
    database connection of its own (so the caller's own writes commit as usual), waiting up to `wait_s`
    for a pass under way. Yields whether it got the lock. Every pass in the meantime finds the lock busy
    and admits nothing (a launch leaves its job queued with LAUNCH_PASS_REASON); leaving the block (or
    the process ending: PostgreSQL frees the lock with the connection) lets the queue go on. The
    platform's shutdown (`manage.py rlstudio_stop_runs`) holds it while it stops the active runs, so a
    slot one of them frees is not handed to a queued run that would then die with the cluster."""
    from django.db import connections

    conn = connections.create_connection("default")
    try:
        conn.set_autocommit(False)
        deadline = time.monotonic() + wait_s
        with conn.cursor() as cur:
            while True:
                cur.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", list(QUEUE_LOCK))
                held = bool(cur.fetchone()[0])
                if held or time.monotonic() >= deadline:
                    break
                time.sleep(_LOCK_RETRY_S)
        yield held
    finally:
        try:
            conn.rollback()
        finally:
            conn.close()
