"""Telling a user something: a Notification row, then, after the commit, the live push to their
websocket group, the e-mail / webhook delivery task, and an alert's auto-pause.

`notify(...)` is called inside the caller's transaction (the ingest's, a transition's, the
reconcile's); nothing leaves the process before that transaction commits, so a rolled-back batch
never notifies anyone. The push is best effort (bounded by RLSTUDIO_BROADCAST_TIMEOUT_S; the page
fetches the list again when its socket reconnects); e-mail and webhooks go through Celery
(`alerts.deliver`), so a slow mail server or receiver never holds an ingest POST.
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from rlstudio.accounts.services import audit_record
from rlstudio.accounts.sockets import group_send_bounded
from rlstudio.config.celery import publish
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import RunRefused, run_stop

from ..models import AlertFiring, Notification, WebhookEndpoint

log = logging.getLogger(__name__)
SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


def email_enabled() -> bool:
    """E-mail is on when a mail server is named (EMAIL_HOST) or another backend is chosen."""
    return bool(settings.EMAIL_HOST) or settings.EMAIL_BACKEND != SMTP_BACKEND


def user_group(user_id: int) -> str:
    """The Channels group of one user's notification sockets (every open page of theirs)."""
    return f"notify.{int(user_id)}"


def notification_json(n: Notification) -> dict[str, Any]:
    """What the page header, the API and the websocket show of a notification."""
    out: dict[str, Any] = {
        "id": n.pk, "kind": n.kind, "event": n.event, "level": n.level, "title": n.title, "body": n.body,
        "run": n.run_id, "read": n.read, "created": n.created.isoformat() if n.created else None,
        "url": f"/runs/{n.run_id}/" if n.run_id else None,
    }
    if n.firing_id:
        f = n.firing
        out["firing"] = {"id": f.pk, "kind": f.kind, "metric": f.metric, "step": f.step, "values": f.values,
                         "paused": f.paused}
    return out


def notify(*, user, run: Run | None, kind: str, event: str, title: str, body: str = "", level: str = "info",
           email: bool = False, webhook: WebhookEndpoint | None = None, show: bool = True,
           firing: AlertFiring | None = None) -> Notification:
    """Store a notification for `user` and, after the commit, push it (when `show`), e-mail it (when
    `email` and e-mail is on and the user has an address) and POST it to `webhook`."""
    email = bool(email and email_enabled() and getattr(user, "email", ""))
    webhook = webhook if webhook is not None and webhook.enabled else None
    n = Notification.objects.create(user=user, run=run, kind=kind, event=event, level=level, title=title[:300],
                                    body=body, email=email, webhook=webhook, read=not show, firing=firing)
    transaction.on_commit(lambda: _after_commit(n.pk, push=show, deliver=email or webhook is not None),
                          robust=True)
    return n


def _after_commit(notification_id: int, *, push: bool, deliver: bool) -> None:
    if push:
        n = Notification.objects.select_related("firing").filter(pk=notification_id).first()
        if n is not None:
            try:
                push_to_user(n.user_id, {"type": "notification", "notification": notification_json(n)})
            except Exception:  # stored: the page lists it on its next load or reconnect
                log.exception("alerts: live push of notification %s failed", notification_id)
    if deliver:
        error = publish("alerts.deliver", notification_id)
        if error is not None:
            log.warning("alerts: delivery of notification %s not queued (%s)", notification_id, error)


def push_to_user(user_id: int, message: dict[str, Any]) -> None:
    """Send `message` to every notification socket of the user (sync code, after a commit)."""
    group_send_bounded(user_group(user_id), {"type": "notify.message", "message": message})


def pause_after_commit(*, run_id: int, firing_id: int, reason: str) -> None:
    """Stop `run_id` with a checkpoint once the caller's transaction commits (an alert's or a budget's
    pause); `firing_id` is marked paused when the stop was asked for (0: no firing to mark)."""
    transaction.on_commit(lambda: pause_run(run_id=run_id, firing_id=firing_id, reason=reason), robust=True)


def pause_run(*, run_id: int, firing_id: int, reason: str) -> bool:
    """Stop a running run with a checkpoint, as the platform (the owner's rule or budget asked for it; the
    `run.stop` audit event has no actor and carries `reason`); resumable as any stopped run. False
    when it was no longer running."""
    run = Run.objects.select_related("owner").filter(pk=run_id).first()
    if run is None or run.status != RunStatus.RUNNING:
        return False
    try:
        run_stop(run=run, by=None, checkpoint=True, reason=reason or "paused by an alert")
    except RunRefused as exc:
        log.info("alerts: run %s not paused: %s", run_id, exc)
        return False
    if firing_id:
        AlertFiring.objects.filter(pk=firing_id).update(paused=True)
    audit_record(actor=None, action="alert.pause", obj=run, data={"firing": firing_id or None, "reason": reason})
    return True
