"""The one queue of the platform's jobs (runs and the other kinds that register with admission, such as
evaluations), as pure functions: its order and one admission pass over it.

Order: a job staff moved up (higher `priority`) first, then the one queued first (`queued_at`), then
runs before other kinds queued at the same instant, then by id. Runs and evaluations wait in this one
order for the same capacity (their owner's quota, the cluster's GPUs), so an older queued evaluation is
admitted before a newer queued run when both want the same slot, and the other way round.

`admission_pass` walks the queue in that order and asks `try_admit` (the services' quota check under
the owner's lock) for each job: nothing here reads the database, so the pass is tested by hand. It is
the only way a job is admitted: the reconcile runs it every few seconds and each launch runs it once
its job is recorded queued (`services.admission.queue_admit_launched`), so a job launched now never
overtakes an older one the pass would try first.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable

RUN = "run"
# Kinds queued at the same instant: runs first, then the others by name.
_KIND_RANK = {RUN: 0}


def kind_rank(kind: str) -> int:
    """Where `kind` goes among jobs queued at the same instant (runs 0, the others 1, then by name)."""
    return _KIND_RANK.get(kind, 1)


@dataclass(frozen=True)
class QueuedJob:
    """One queued job: `kind` ("run", "evaluation"), its id within that kind, its owner, the GPUs it
    asks, when it was queued and its queue priority (staff's moves; 0 for kinds that cannot move)."""

    kind: str
    id: int
    owner_id: int
    gpus: int
    queued_at: datetime
    priority: int = 0

    @property
    def key(self) -> tuple:
        return (-self.priority, self.queued_at, kind_rank(self.kind), self.kind, self.id)

    @property
    def label(self) -> str:
        return f"{self.kind} #{self.id}"


def queue_order(jobs: Iterable[QueuedJob]) -> list[QueuedJob]:
    """`jobs` in admission order (see the module docstring)."""
    return sorted(jobs, key=lambda j: j.key)


def ahead_of(job: QueuedJob, other: QueuedJob) -> bool:
    """Whether `other` comes before `job` in the queue."""
    return other.key < job.key


@dataclass(frozen=True)
class Attempt:
    """What one admission try said: admitted, else why the job waits (`reason`); `cluster` when it
    waits for the cluster's GPUs, `unsent` when its submission could not be handed to the task queue."""

    admitted: bool
    reason: str = ""
    cluster: bool = False
    unsent: bool = False


def admission_pass(jobs: Iterable[QueuedJob], *, free_gpus: Callable[[int], float | None],
                   try_admit: Callable[[QueuedJob, float | None], Attempt | None],
                   held_back: Callable[[QueuedJob, QueuedJob], None] | None = None) -> list[QueuedJob]:
    """Try every queued job once, in `queue_order`; returns the ones admitted, in that order.

    `free_gpus(needed)` is what the cluster can still give (asked once, at the first GPU job; None: not
    checked); each admitted GPU job takes its GPUs from it. `try_admit(job, free)` applies the owner's
    quota (None: the job left the queue meanwhile). A user at their quota does not hold the others
    back; a GPU job waiting for the cluster's GPUs keeps every later GPU job, of any kind, from
    overtaking it (`held_back(job, blocker)` is told of each one not tried for that); a job whose
    submission could not be sent (the task queue is down) ends the pass.
    """
    admitted: list[QueuedJob] = []
    free: float | None = None
    asked = False
    blocker: QueuedJob | None = None
    for job in queue_order(jobs):
        if job.gpus > 0:
            if blocker is not None:
                if held_back is not None:
                    held_back(job, blocker)
                continue
            if not asked:
                free, asked = free_gpus(job.gpus), True
        attempt = try_admit(job, free if job.gpus > 0 else None)
        if attempt is None:
            continue
        if attempt.admitted:
            admitted.append(job)
            if job.gpus > 0 and free is not None:
                free -= job.gpus
        elif attempt.unsent:
            break
        elif job.gpus > 0 and attempt.cluster:
            blocker = job
    return admitted
