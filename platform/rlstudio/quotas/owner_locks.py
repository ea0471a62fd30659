"""The admission lock of a user (a row lock on their user row, FOR NO KEY UPDATE), which serializes one
user's admissions and launches, and with team quotas those of every member of their quota'd teams
(`lock_owners`), taken in id order in one query; inside a queue pass (`owners_locked`) a lock the pass
did not take up front is never waited for. `rlstudio.quotas.services` uses them (admission) and
re-exports them; the runs app takes them through its QuotaPolicy."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser

from rlstudio.runs.services import RunRefused

from .team_quotas import teammate_ids


# The owners' locks a queue pass took up front (`owners_locked`), while it runs; None outside a pass.
_HELD_UP_FRONT: ContextVar[frozenset[int] | None] = ContextVar("rlstudio_owner_locks_up_front", default=None)


class OwnerLockBusy(RunRefused):
    """Inside a queue pass (`owners_locked`), an owner's lock the pass did not take up front (a member
    who joined one of the owner's quota'd teams since) is held by another transaction: the job is not
    tried in this pass (the next one tries it), rather than waiting out of the id order."""


def _with_teammates(user_ids) -> set[int]:
    """`user_ids` and the members of their quota'd teams (read now)."""
    ids = {int(pk) for pk in user_ids}
    return ids | teammate_ids(user_ids=ids) if ids else ids


def lock_owners(*, user_ids) -> None:
    """Take the row lock that serializes one user's admissions, of every user in `user_ids` and of
    every member of their quota'd teams (`team_quotas.teammate_ids`, read first), in id order (one
    query: PostgreSQL locks the rows as the sorted scan returns them), until the caller's transaction
    ends. Every holder of several owners' locks takes them through here, so no two can deadlock on the
    order; and an admission holds the locks of everyone whose jobs its team limits count, so two
    members of a team cannot both take its last GPU.

    Inside a queue pass (`owners_locked`, which took its owners' locks up front) a lock it does not
    hold yet (someone joined a team since) would be taken out of the id order, and could deadlock with
    that user's own launch (which takes theirs, then their new teammates' in id order; PostgreSQL would
    fail the launch): such a lock is taken only if free, else OwnerLockBusy (a RunRefused: the job is
    tried at the next pass).

    FOR NO KEY UPDATE: it excludes another admission of the same user, but not the FOR KEY SHARE lock
    PostgreSQL takes on the user row when a row referencing it is written (an audit event, a run's
    transition). A plain FOR UPDATE here deadlocks with a stop that holds the run's row and audits.
    """
    ids = _with_teammates(user_ids)
    held = _HELD_UP_FRONT.get()
    if held is None:
        lock_ids(ids)
        return
    extra = ids - held
    if extra and lock_ids_if_free(extra) != extra:
        raise OwnerLockBusy("a member who joined a team of the owner's during this queue pass is being admitted "
                            "or launching: tried again at the next pass")


@contextmanager
def owners_locked(*, user_ids) -> Iterator[None]:
    """`lock_owners(user_ids)` for a queue pass: the locks taken up front, in one sorted query; inside
    the block a `lock_owners` of anyone else never waits (see there). The locks are held to the end of
    the caller's transaction, as always."""
    ids = _with_teammates(user_ids)
    lock_ids(ids)
    token = _HELD_UP_FRONT.set(frozenset(ids))
    try:
        yield
    finally:
        _HELD_UP_FRONT.reset(token)


def lock_ids(user_ids: set[int]) -> None:
    """`lock_owners`' lock of exactly `user_ids` (no teammates added), in id order, in one query."""
    ids = sorted(user_ids)
    if ids:
        list(get_user_model().objects.select_for_update(no_key=True).filter(pk__in=ids).order_by("pk")
             .values_list("pk", flat=True))


def lock_owner(*, user: AbstractBaseUser) -> None:
    """`lock_owners` of one user (and so of the members of their quota'd teams)."""
    lock_owners(user_ids=[user.pk])


def lock_user(*, user: AbstractBaseUser) -> None:
    """The same row lock of `user` alone, none of their teammates': for a request that checks only the
    user's own limits (one export, one playground session at a time), which no team limit counts, so it
    need not wait for a teammate's admission. A transaction that takes it takes no other owner's lock
    after it (that would be out of the id order `lock_owners` keeps)."""
    lock_ids({user.pk})


def lock_ids_if_free(user_ids: set[int]) -> set[int]:
    """`lock_ids` of those of `user_ids` whose lock no other transaction holds (SKIP LOCKED: one query,
    never waiting; this transaction's own locks are no obstacle); the ids it locked."""
    if not user_ids:
        return set()
    return set(get_user_model().objects.select_for_update(no_key=True, skip_locked=True)
               .filter(pk__in=sorted(user_ids)).order_by("pk").values_list("pk", flat=True))
