"""THE run state machine: every status change of a run goes through `run_transition`.

    queued ──▶ submitting ──▶ running ──▶ stopping ──▶ stopped | succeeded | failed | lost
      │            │  ╰──▶ failed    ╰──▶ succeeded | failed | lost
      │            ╰──▶ queued (back to the queue: no capacity after all)
      ╰──▶ stopped (cancelled before it ever ran)

stopped, succeeded, failed and lost are terminal: nothing follows them. `run_reach` is the one rule
for reaching a state that Ray or the trainer reports through the legal chain of transitions (the
reconcile and the ingest both use it).
"""
from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record

from ..failure import stored_error
from ..models import TERMINAL_STATUSES, Run, RunStatus

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class TransitionMade:
    """A committed status change, as the `on_run_transition` hooks get it (`queue_reason`: why the run
    waited, when it left the queue; `error`: a failed or lost run's error)."""

    run_id: int
    before: str
    after: str
    error: str = ""
    queue_reason: str = ""


# Called after the commit of each transition (the alerts app's lifecycle notifications register here,
# so that runs never imports them); one that raises is logged and the others still run.
_TRANSITION_HOOKS: list[Callable[[TransitionMade], None]] = []


def on_run_transition(hook: Callable[[TransitionMade], None]) -> Callable[[TransitionMade], None]:
    """Register `hook(TransitionMade)` to run after every committed transition (idempotent per function)."""
    if hook not in _TRANSITION_HOOKS:
        _TRANSITION_HOOKS.append(hook)
    return hook


def _transition_committed(made: TransitionMade) -> None:
    for hook in _TRANSITION_HOOKS:
        try:
            hook(made)
        except Exception:  # a hook's failure never undoes or blocks a transition
            log.exception("run %s: transition hook %r failed", made.run_id, hook)


class IllegalTransition(Exception):
    """A run was asked to move between two states the state machine does not connect."""

    def __init__(self, *, run_id: int, current: str, to: str):
        self.run_id, self.current, self.to = run_id, current, to
        allowed = sorted(ALLOWED_TRANSITIONS.get(current, ()))
        targets = ", ".join(allowed) if allowed else f"none ({current} is terminal)"
        super().__init__(f"run {run_id}: illegal transition {current} → {to}; allowed from {current}: {targets}")


def run_transition(
    *,
    run: Run,
    to: str,
    by: AbstractBaseUser | None = None,
    error: str = "",
    reason: str = "",
    error_log: str = "",
) -> Run:
    """Move `run` to status `to`, or raise `IllegalTransition`.

    Locks the row so that two workers (a reconcile and a stop, say) cannot both move it; checks the
    table against the status stored *now*, not the caller's possibly stale copy; sets `started` on
    entering running and `finished` on a terminal state; keeps `error` for failed/lost (its server
    paths scrubbed: whoever reads the run sees it) and `error_log` (the job log's tail, a traceback,
    the error as it was: the owner's and staff's; `failure.stored_error`), and `reason` as the queue
    reason on entering queued; records an AuditEvent. Updates `run` in place too.
    """
    if to not in ALLOWED_TRANSITIONS:
        raise ValueError(f"unknown run status {to!r}; known: {', '.join(ALLOWED_TRANSITIONS)}")
    with transaction.atomic():
        # FOR NO KEY UPDATE: no key changes, so rows referencing the run (FOR KEY SHARE) are not
        # blocked; transitions still exclude each other, and a delete's FOR UPDATE excludes them.
        locked = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        current = locked.status
        if to not in ALLOWED_TRANSITIONS[current]:
            raise IllegalTransition(run_id=locked.pk, current=current, to=to)
        now = timezone.now()
        waited_for = locked.queue_reason if current == S.QUEUED else ""
        fields = ["status"]
        locked.status = to
        if to == S.RUNNING and locked.started is None:
            locked.started = now
            fields.append("started")
        if to == S.SUBMITTING:
            # The reconcile measures a lost submit task from here (and counts its re-sends from 0).
            locked.submit_requested, locked.submit_resends = now, 0
            fields += ["submit_requested", "submit_resends"]
        if to in TERMINAL_STATUSES:
            # A final run takes no more reports: its ingest token dies with it.
            locked.finished, locked.ingest_token_hash = now, ""
            fields += ["finished", "ingest_token_hash"]
        if error:
            locked.error, error_log = stored_error(error, error_log)
            fields.append("error")
        if error_log:
            locked.error_log = error_log
            fields.append("error_log")
        if to == S.QUEUED or current == S.QUEUED:
            # A queue reason describes waiting; it is cleared once the run leaves the queue.
            locked.queue_reason = reason if to == S.QUEUED else ""
            fields.append("queue_reason")
        locked.save(update_fields=fields)
        data: dict[str, Any] = {"from": current, "to": to}
        if error:
            data["error"] = locked.error
        if reason:
            data["reason"] = reason
        audit_record(actor=by, action="run.transition", obj=locked, data=data)
        if _TRANSITION_HOOKS:
            made = TransitionMade(run_id=locked.pk, before=current, after=to, queue_reason=waited_for,
                                  error=locked.error if to in (S.FAILED, S.LOST) else "")
            transaction.on_commit(partial(_transition_committed, made))
    for field in fields:
        setattr(run, field, getattr(locked, field))
    if to in TERMINAL_STATUSES:
        from .. import launch, run_secrets

        run_secrets.remove_token(launch.run_dir(run.pk))
    return run


def transition_path(current: str, to: str) -> tuple[str, ...]:
    """The shortest chain of legal transitions from `current` to `to` that neither starts from nor
    passes through `queued` (only admission takes a run out of the queue); () when there is none or
    the run is already there."""
    if current == to or current == S.QUEUED:
        return ()
    seen, todo = {current: ()}, deque([current])
    while todo:
        state = todo.popleft()
        for nxt in sorted(ALLOWED_TRANSITIONS[state]):
            if nxt in seen or nxt == S.QUEUED:
                continue
            seen[nxt] = seen[state] + (nxt,)
            if nxt == to:
                return seen[nxt]
            todo.append(nxt)
    return ()


def run_reach(*, run: Run, to: str, error: str = "", error_log: str = "") -> list[str]:
    """Move `run` to `to` through `transition_path` (error and error_log kept on a failed or lost
    end); the transitions made. A chain another worker interrupts stops there: its move stands."""
    run.refresh_from_db(fields=["status"])
    made = []
    for step in transition_path(run.status, to):
        try:
            final = step in (S.FAILED, S.LOST)
            run_transition(run=run, to=step, error=error if final else "", error_log=error_log if final else "",
                           reason="")
        except IllegalTransition as exc:
            log.info("%s", exc)
            break
        made.append(step)
    return made


def run_mark_running(*, run: Run) -> Run:
    return run_transition(run=run, to=S.RUNNING) if run.status == S.SUBMITTING else run


def run_fail_unsubmitted(*, run: Run, error: str, submission_id: str) -> bool:
    """Fail a run whose submit task the reconcile thinks lost (Ray had no job `submission_id`), only
    while, under the row's lock, it still has no recorded submission and Ray still has no such job: a
    submit task that was slow, not lost, may have put the job on Ray meanwhile (its commit waits on
    the row's lock, or it died after Ray took the job), and then the job wins (False; the next pass
    follows or adopts it)."""
    from .. import ray_jobs

    with transaction.atomic():
        locked = Run.objects.select_for_update(no_key=True).filter(pk=run.pk).first()
        if locked is None or locked.ray_submission_id or ray_jobs.job_info(submission_id) is not None:
            return False
        run_mark_finished(run=run, to=S.FAILED, error=error)
    return True


def run_mark_finished(*, run: Run, to: str, error: str = "", error_log: str = "") -> Run:
    """Move a submitting/running/stopping run to a terminal state, through the states between
    (`error` and `error_log` kept on the last)."""
    path = transition_path(run.status, to)
    if not path:
        raise IllegalTransition(run_id=run.pk, current=run.status, to=to)
    for step in path:
        run_transition(run=run, to=step, error=error if step == to else "",
                       error_log=error_log if step == to else "")
    return run
