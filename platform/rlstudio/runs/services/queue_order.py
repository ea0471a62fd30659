"""The one queue's order as the database reads it: `QUEUE_ORDER` (the runs' ordering), a run as a job
of the queue (`run_job`), the rows of a kind ahead of a job (`q_ahead`), the first run of an owner
ahead of a job (`first_run_ahead`) and a job's place in the queue (`queue_position_of`)."""
from __future__ import annotations

from ..models import Run, RunStatus
from ..queue import NEVER_PREFIX, RUN, QueuedJob, kind_rank
from .queue_registry import queued_kinds

S = RunStatus

# The order in which queued runs are admitted (and numbered on the pages): a run staff moved to the
# front (higher queue_priority) first, then oldest first, ties broken by id.
QUEUE_ORDER = ("-queue_priority", "created", "id")


def run_job(run: Run) -> QueuedJob:
    """A run as a job of the one queue."""
    return QueuedJob(kind=RUN, id=run.pk, owner_id=run.owner_id, gpus=run.gpus, queued_at=run.created,
                     priority=run.queue_priority)


def first_run_ahead(*, job: QueuedJob) -> Run | None:
    """The first queued run of `job`'s owner that comes before `job` (of any kind) in the queue
    (None: none does), leaving out runs that can never be admitted as they are (their reason
    `never_reason`'s): the owner's later jobs do not wait behind those. One query (`q_ahead`)."""
    return (Run.objects.filter(owner=job.owner_id, status=S.QUEUED).exclude(queue_reason__startswith=NEVER_PREFIX)
            .filter(q_ahead(job, kind=RUN, priority="queue_priority")).order_by(*QUEUE_ORDER).first())


def q_ahead(job: QueuedJob, *, kind: str, priority: str | None = None):
    """Q of the rows of `kind` (queued at `created`, their id `id`; their priority in the field named
    `priority`, or 0 for a kind that staff cannot move) that come before `job`, of any kind, in the one
    queue's order (`QueuedJob.key`), for a COUNT or a filter in the database; None when none can."""
    from django.db.models import Q

    theirs, mine = (kind_rank(kind), kind), (kind_rank(job.kind), job.kind)
    older = Q(created__lt=job.queued_at)
    if theirs < mine:  # theirs go first among jobs queued at the same instant
        older |= Q(created=job.queued_at)
    elif theirs == mine:
        older |= Q(created=job.queued_at, id__lt=job.id)
    if priority is None:
        return None if job.priority > 0 else Q() if job.priority < 0 else older
    return Q(**{f"{priority}__gt": job.priority}) | (Q(**{priority: job.priority}) & older)


def queue_position_of(job: QueuedJob) -> int:
    """`job`'s 1-based place in the one queue: one COUNT of the queued runs ahead of it and one per
    registered kind (`QueuedKind.count_ahead`), whatever the queue's length."""
    ahead = Run.objects.filter(status=S.QUEUED).filter(q_ahead(job, kind=RUN, priority="queue_priority")).count()
    return ahead + sum(kind.count_ahead(job=job) for kind in queued_kinds()) + 1
