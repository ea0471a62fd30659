"""The one queue of the platform's jobs (runs and the other kinds that register with admission, such as
evaluations), as pure functions: its order and one admission pass over it.

Order: a job staff moved up (higher `priority`) first, then the one queued first (`queued_at`), then
runs before other kinds queued at the same instant, then by id. Runs and evaluations wait in this one
order for the same capacity (their owner's quota, the cluster's GPUs), so an older queued evaluation is
admitted before a newer queued run when both want the same slot, and the other way round.

`admission_pass` walks the queue in that order and asks `try_admit` (the services' quota check under
the owner's lock) for each job, after `never` (can it ever be admitted: its owner's quota's `max_gpus`
and their team quotas', the cluster's GPUs in all) for each GPU job: nothing here reads the database, so the pass is tested by hand. It is
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


# How the reason of a queued job that can never be admitted as it is begins (`never_reason`): its GPUs
# are more than its owner's quota allows at once, or more than the cluster has. Its owner's later jobs
# do not wait behind it, and a launch asking that much is refused (`gpus_over_quota`, `gpus_over_cluster`).
NEVER_PREFIX = "waiting cannot help: "


def _gpus(n: float) -> str:
    return f"{n:g} GPU" + ("" if n == 1 else "s")


def gpus_over_quota(*, what: str, gpus: int, most: int, whose: str = "your", team: str = "") -> str:
    """Why a `what` ("run", "evaluation") asking `gpus` GPUs cannot start under a quota of `most` at a
    time ('' when it can); `whose` quota it is as the reader sees it ("your", "its owner's"). `team`:
    the quota is that team's (a team quota of the owner's): the sentence names it ("your team nlp's
    quota allows at most 8 GPUs at a time", so that `reason_for_reader` finds TEAM_REASON_MARK in it)."""
    if gpus <= most:
        return ""
    if team:
        return f"this {what} asks {_gpus(gpus)}; {whose} team {team}'s quota allows at most {_gpus(most)} at a time"
    return f"this {what} asks {_gpus(gpus)}; {whose} quota allows at most {most:g} at a time"


def gpus_over_cluster(*, what: str, gpus: int, total: float | None) -> str:
    """Why a `what` asking `gpus` GPUs cannot start on a cluster of `total` GPUs in all ('' when it
    can, or when `total` is unknown: Ray did not answer)."""
    if total is None or gpus <= 0 or gpus <= total:
        return ""
    return f"this {what} asks {_gpus(gpus)}; the cluster has {_gpus(total)} in all"


QUOTA_REMEDY = "raise your quota"
TEAM_QUOTA_REMEDY = "raise your team's quota"
CLUSTER_REMEDY = "add GPUs to the cluster"


def never_reason(why: str, *, remedy: str) -> str:
    """The queue reason of a job that can never be admitted as it is, `why` being `gpus_over_quota`'s
    or `gpus_over_cluster`'s sentence: it says waiting cannot help and what its owner can do (stop
    it, or ask an admin to `remedy`: QUOTA_REMEDY, CLUSTER_REMEDY). For the cluster it says the job
    starts when GPUs join the cluster (a node restarting, an autoscaler adding one)."""
    if remedy == CLUSTER_REMEDY:
        return (f"{NEVER_PREFIX}{why}. It starts when GPUs join the cluster: stop it if none will (your "
                f"later jobs do not wait for it), or ask an admin to {remedy}")
    return (f"{NEVER_PREFIX}{why}. Stop it (your later jobs do not wait for it) or ask an admin to "
            f"{remedy}")


# How a queue reason about one of the owner's team quotas names the team (the quotas app writes "your
# team nlp holds 7 of its 8 GPUs …"): the team's name and usage are for its members and staff, so
# whoever reads a job without managing it sees `reason_for_reader`'s sentence instead.
TEAM_REASON_MARK = "your team "
TEAM_READER_REASON = "waiting for a team quota of its owner's"


def reason_for_reader(reason: str) -> str:
    """`reason` as someone who reads a job but does not manage it (not its owner, not staff) sees it:
    one naming the owner's team (`TEAM_REASON_MARK`) says only that a team quota of the owner's holds
    it (or, a `never_reason`, that one never will let it start); any other reason as it is."""
    if TEAM_REASON_MARK not in reason:
        return reason
    if reason.startswith(NEVER_PREFIX):
        return f"{NEVER_PREFIX}it asks more GPUs than a team quota of its owner's allows at a time"
    return TEAM_READER_REASON


def queue_order(jobs: Iterable[QueuedJob]) -> list[QueuedJob]:
    """`jobs` in admission order (see the module docstring)."""
    return sorted(jobs, key=lambda j: j.key)


@dataclass(frozen=True)
class Attempt:
    """What one admission try said: admitted, else why the job waits (`reason`); `cluster` when it
    waits for the cluster's GPUs, `unsent` when its submission could not be handed to the task queue
    (or, admitted, may not be: the task queue did not answer at the last try), which ends the pass."""

    admitted: bool
    reason: str = ""
    cluster: bool = False
    unsent: bool = False


def admission_pass(jobs: Iterable[QueuedJob], *, free_gpus: Callable[[int], float | None],
                   try_admit: Callable[[QueuedJob, float | None], Attempt | None],
                   held_back: Callable[[QueuedJob, QueuedJob], None] | None = None,
                   never: Callable[[QueuedJob, float | None], bool] | None = None) -> list[QueuedJob]:
    """Try every queued job once, in `queue_order`; returns the ones admitted, in that order.

    `free_gpus(needed)` is what the cluster can still give (asked once, at the first GPU job; None: not
    checked); each admitted GPU job takes its GPUs from it. `try_admit(job, free)` applies the owner's
    quota (None: the job left the queue meanwhile). A user at their quota does not hold the others
    back; a GPU job waiting for the cluster's GPUs keeps every later GPU job, of any kind, from
    overtaking it (`held_back(job, blocker)` is told of each one not tried for that); a job whose
    submission could not be sent (the task queue is down), or one admitted while it was down at the last
    try (its submission tries it again), ends the pass. `never(job, free)` is asked
    first for each GPU job: True when it can never be admitted as it is (more GPUs than its owner's
    quota or one of their team quotas allows at once, or than the cluster has in all; the callee records why): it is not tried,
    and holds no one back.
    """
    admitted: list[QueuedJob] = []
    free: float | None = None
    asked = False
    blocker: QueuedJob | None = None
    for job in queue_order(jobs):
        if job.gpus > 0:
            if not asked:
                free, asked = free_gpus(job.gpus), True
            if never is not None and never(job, free):
                continue
            if blocker is not None:
                if held_back is not None:
                    held_back(job, blocker)
                continue
        attempt = try_admit(job, free if job.gpus > 0 else None)
        if attempt is None:
            continue
        if attempt.admitted:
            admitted.append(job)
            if job.gpus > 0 and free is not None:
                free -= job.gpus
            if attempt.unsent:
                break
        elif attempt.unsent:
            break
        elif job.gpus > 0 and attempt.cluster:
            blocker = job
    return admitted
