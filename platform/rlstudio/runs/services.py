"""Writes of the runs app, including THE run state machine.

Every status change of a run goes through `run_transition`; nothing else assigns `Run.status`.

    queued ──▶ submitting ──▶ running ──▶ stopping ──▶ stopped | succeeded | failed | lost
      │            │  ╰──▶ failed    ╰──▶ succeeded | failed | lost
      │            ╰──▶ queued (back to the queue: no capacity after all)
      ╰──▶ stopped (cancelled before it ever ran)

stopped, succeeded, failed and lost are terminal: nothing follows them.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record

from .models import TERMINAL_STATUSES, Run, RunStatus

S = RunStatus
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.SUBMITTING, S.STOPPED}),
    S.SUBMITTING: frozenset({S.RUNNING, S.FAILED, S.QUEUED}),
    S.RUNNING: frozenset({S.STOPPING, S.SUCCEEDED, S.FAILED, S.LOST}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED, S.LOST, S.SUCCEEDED}),
    S.STOPPED: frozenset(),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.LOST: frozenset(),
}
INGEST_TOKEN_PREFIX = "rit_"


class IllegalTransition(Exception):
    """A run was asked to move between two states the state machine does not connect."""

    def __init__(self, *, run_id: int, current: str, to: str):
        self.run_id, self.current, self.to = run_id, current, to
        allowed = sorted(ALLOWED_TRANSITIONS.get(current, ()))
        targets = ", ".join(allowed) if allowed else f"none ({current} is terminal)"
        super().__init__(f"run {run_id}: illegal transition {current} → {to}; allowed from {current}: {targets}")


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def run_transition(
    *,
    run: Run,
    to: str,
    by: AbstractBaseUser | None = None,
    error: str = "",
    reason: str = "",
) -> Run:
    """Move `run` to status `to`, or raise `IllegalTransition`.

    Locks the row so that two workers (a reconcile and a stop, say) cannot both move it; checks the
    table against the status stored *now*, not the caller's possibly stale copy; sets `started` on
    entering running and `finished` on a terminal state; keeps `error` for failed/lost and `reason`
    as the queue reason on entering queued; records an AuditEvent. Updates `run` in place too.
    """
    if to not in ALLOWED_TRANSITIONS:
        raise ValueError(f"unknown run status {to!r}; known: {', '.join(ALLOWED_TRANSITIONS)}")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        current = locked.status
        if to not in ALLOWED_TRANSITIONS[current]:
            raise IllegalTransition(run_id=locked.pk, current=current, to=to)
        now = timezone.now()
        fields = ["status"]
        locked.status = to
        if to == S.RUNNING and locked.started is None:
            locked.started = now
            fields.append("started")
        if to in TERMINAL_STATUSES:
            locked.finished = now
            fields.append("finished")
        if error:
            locked.error = error
            fields.append("error")
        if to == S.QUEUED or current == S.QUEUED:
            # A queue reason describes waiting; it is cleared once the run leaves the queue.
            locked.queue_reason = reason if to == S.QUEUED else ""
            fields.append("queue_reason")
        locked.save(update_fields=fields)
        data: dict[str, Any] = {"from": current, "to": to}
        if error:
            data["error"] = error
        if reason:
            data["reason"] = reason
        audit_record(actor=by, action="run.transition", obj=locked, data=data)
    for field in fields:
        setattr(run, field, getattr(locked, field))
    return run


def run_create(
    *,
    owner: AbstractBaseUser,
    name: str,
    dataset,
    model,
    config: dict[str, Any],
    gpus: int,
    val_dataset=None,
    parent: Run | None = None,
    parent_kind: str = "",
) -> tuple[Run, str]:
    """Create a queued run with a fresh per-run ingest token.

    Returns (run, token): the plaintext token exists only in this return value; the run stores
    its sha256. The trainer presents it as `Authorization: Bearer <token>` to report events.
    """
    if gpus < 0:
        raise ValueError(f"gpus must be >= 0, got {gpus}")
    token = INGEST_TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        run = Run.objects.create(
            owner=owner,
            name=name,
            dataset=dataset,
            val_dataset=val_dataset,
            model=model,
            config=config,
            gpus=gpus,
            status=S.QUEUED,
            ingest_token_hash=_token_hash(token),
            parent=parent,
            parent_kind=parent_kind,
        )
        audit_record(actor=owner, action="run.create", obj=run, data={"name": name, "gpus": gpus})
    return run, token


def run_token_check(*, run: Run, token: str) -> bool:
    """Whether `token` is this run's ingest token (constant-time comparison of the hashes)."""
    if not token or not run.ingest_token_hash:
        return False
    return hmac.compare_digest(_token_hash(token), run.ingest_token_hash)
