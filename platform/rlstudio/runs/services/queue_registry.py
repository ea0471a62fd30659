"""What the fair queue asks of the apps around runs, each registered at startup so that runs never
imports them: the `QuotaPolicy` (the quotas app's, `quota_policy_register`), the other kinds of queued
jobs (`QueuedKind`, the evaluations app's, `queued_kind_register`), and the GPUs the platform's other
Ray jobs hold (`on_gpus_held`)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Callable

from django.contrib.auth.models import AbstractBaseUser

from ..models import Run
from ..queue import Attempt, QueuedJob


class QuotaPolicy:
    """What admission and the launch path ask of the quotas. A subclass implements:

        lock_owner(*, user)                       take the lock that serializes one user's admissions
                                                  and launches (inside the caller's transaction)
        lock_owners(*, user_ids)                  take several users' locks, in id order
        lock_user(*, user)                        the user's lock alone, for a request no team limit
                                                  counts (an export, a playground session)
        owners_locked(*, user_ids)                a context manager: `lock_owners` for a queue pass,
                                                  inside which a lock it did not take up front is
                                                  never waited for (here: only `lock_owners`)
        queue_refusal(*, user) -> str             '' when the user may queue one more run, else why not
        reason(*, run, cluster_free_gpus) -> str  '' when `run` may start now, else why it waits
                                                  (`cluster_free_gpus`: None = not checked)
        usage_for(*, user)                        the user's quota and usage (the "Your quota" page)
        max_gpus(*, owner_id) -> int              the most GPUs the user's quota lets them hold at once
        team_max_gpus(*, owner_id) -> [(name, n)] the most GPUs each of the user's teams with a team
                                                  quota lets its members hold at once, by name
                                                  (none here: no team limits)
    """

    def lock_owner(self, *, user: AbstractBaseUser) -> None:
        raise NotImplementedError

    def lock_owners(self, *, user_ids) -> None:
        raise NotImplementedError

    def lock_user(self, *, user: AbstractBaseUser) -> None:
        self.lock_owner(user=user)

    @contextmanager
    def owners_locked(self, *, user_ids) -> Iterator[None]:
        self.lock_owners(user_ids=user_ids)
        yield

    def queue_refusal(self, *, user: AbstractBaseUser) -> str:
        raise NotImplementedError

    def reason(self, *, run: Run, cluster_free_gpus: float | None) -> str:
        raise NotImplementedError

    def usage_for(self, *, user: AbstractBaseUser):
        raise NotImplementedError

    def max_gpus(self, *, owner_id: int) -> int:
        raise NotImplementedError

    def team_max_gpus(self, *, owner_id: int) -> list[tuple[str, int]]:
        return []

    def job_reason(self, *, user: AbstractBaseUser, gpus: int, cluster_free_gpus: float | None) -> str:
        """'' when another job of `user` (an evaluation) asking `gpus` may start now, else why it waits;
        counted with the user's runs and other jobs (called after `lock_owner`)."""
        raise NotImplementedError


_QUOTA_POLICY: list[QuotaPolicy] = []


def quota_policy_register(policy: QuotaPolicy) -> QuotaPolicy:
    """Make `policy` the one admission asks (the last registered wins)."""
    _QUOTA_POLICY[:] = [policy]
    return policy


def quota_policy() -> QuotaPolicy:
    """The registered QuotaPolicy; ImproperlyConfigured when none is (never "no limits")."""
    if not _QUOTA_POLICY:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("no quota policy registered: rlstudio.quotas must be in INSTALLED_APPS")
    return _QUOTA_POLICY[0]


class QueuedKind:
    """A kind of job other than runs that waits in the one queue (the evaluations app registers its
    evaluations). A subclass implements:

        kind                                      its name ("evaluation")
        queued() -> list[QueuedJob]               its queued jobs
        earlier_of(*, job) -> str                 '' unless the owner of `job` (a run) has a job of this
                                                  kind queued ahead of it; else a phrase naming it
        try_admit(*, job_id, cluster_free_gpus) -> Attempt | None
                                                  admit it if its owner's quota allows (under the
                                                  owner's lock), else record why it waits; None when
                                                  it is no longer queued
        hold(*, job_ids, reason)                  record `reason` on those of these jobs still queued
                                                  (ones the pass did not try: `HELD_BACK_REASON`)
        count_ahead(*, job) -> int                how many of its queued jobs come before `job` (of
                                                  any kind) in the queue: a COUNT query (`q_ahead`)
                                                  for `queue_position_of`
    """

    kind = ""

    def queued(self) -> list[QueuedJob]:
        raise NotImplementedError

    def earlier_of(self, *, job: QueuedJob) -> str:
        raise NotImplementedError

    def try_admit(self, *, job_id: int, cluster_free_gpus: float | None) -> Attempt | None:
        raise NotImplementedError

    def hold(self, *, job_ids: list[int], reason: str) -> None:
        raise NotImplementedError

    def count_ahead(self, *, job: QueuedJob) -> int:
        raise NotImplementedError


_QUEUED_KINDS: dict[str, QueuedKind] = {}


def queued_kind_register(kind: QueuedKind) -> QueuedKind:
    """Let `kind`'s queued jobs wait in the one queue (the last registered of a name wins)."""
    _QUEUED_KINDS[kind.kind] = kind
    return kind


def queued_kinds() -> list[QueuedKind]:
    return list(_QUEUED_KINDS.values())


# Called with no arguments, each returns the GPUs held by the platform's other Ray jobs (the
# evaluations app registers its running evaluations here, so that runs never imports it).
_GPU_HOLDERS: list[Callable[[], int]] = []


def on_gpus_held(hook: Callable[[], int]) -> Callable[[], int]:
    """Register `hook() -> GPUs` held by jobs other than runs (idempotent per function)."""
    if hook not in _GPU_HOLDERS:
        _GPU_HOLDERS.append(hook)
    return hook


def other_jobs_gpus() -> int:
    """GPUs the platform's other jobs hold now (the registered hooks' sum)."""
    return sum(int(hook() or 0) for hook in _GPU_HOLDERS)
