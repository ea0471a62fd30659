"""Lifecycle notifications: a run finished, failed (with the error's first lines), was stopped, was
lost, or started after waiting in the queue. Registered with runs' `on_run_transition` (apps.py), so
it runs after each transition's commit; where each event goes (app / e-mail / webhook) is the owner's
NotificationSettings.routes."""
from __future__ import annotations

from django.db import transaction

from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import TransitionMade

from ..models import AlertFiring, NotificationKind, NotificationLevel, NotificationSettings, RunAlertState
from .notify import notify

S = RunStatus
ERROR_LINES = 8
EVENT_OF = {S.SUCCEEDED: "finished", S.FAILED: "failed", S.STOPPED: "stopped", S.LOST: "lost"}
LEVEL_OF = {"finished": NotificationLevel.INFO, "failed": NotificationLevel.CRITICAL,
            "stopped": NotificationLevel.INFO, "lost": NotificationLevel.CRITICAL, "started": NotificationLevel.INFO}


def settings_for(user) -> NotificationSettings:
    """The user's notification settings (the defaults until they save their own)."""
    row = NotificationSettings.objects.filter(user=user).select_related("webhook").first()
    return row if row is not None else NotificationSettings(user=user)


def first_lines(text: str, n: int = ERROR_LINES) -> str:
    """The first `n` non-empty lines of an error (its start says what failed)."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    out = "\n".join(lines[:n])
    return out + ("\n…" if len(lines) > n else "")


def on_transition(made: TransitionMade) -> None:
    """The hook: remember a run that waited in the queue; notify on the events users care about."""
    if made.before == S.QUEUED and made.after == S.SUBMITTING and made.queue_reason:
        with transaction.atomic():
            row, _ = RunAlertState.objects.select_for_update().get_or_create(run_id=made.run_id)
            row.flags = {**row.flags, "waited": made.queue_reason[:500]}
            row.save(update_fields=["flags"])
        return
    if made.after == S.RUNNING:
        row = RunAlertState.objects.filter(run_id=made.run_id).first()
        if row is None or not row.flags.get("waited"):
            return
        event, waited = "started", row.flags["waited"]
    else:
        event, waited = EVENT_OF.get(made.after), ""
        if event is None:
            return
    run = Run.objects.select_related("owner").filter(pk=made.run_id).first()
    if run is None:
        return
    title, body = _text(run, event, made, waited)
    prefs = settings_for(run.owner)
    channels = set(prefs.routes.get(event, ()))
    with transaction.atomic():
        notify(user=run.owner, run=run, kind=NotificationKind.LIFECYCLE, event=event, title=title, body=body,
               level=LEVEL_OF[event], show="app" in channels, email="email" in channels,
               webhook=prefs.webhook if "webhook" in channels else None)


def _text(run: Run, event: str, made: TransitionMade, waited: str) -> tuple[str, str]:
    name = f"run “{run.name}” (#{run.pk})"
    step = f"step {run.step}" + (f" of {run.total_steps}" if run.total_steps else "")
    if event == "started":
        return f"{name[0].upper()}{name[1:]} started", f"It waited in the queue: {waited}."
    if event == "finished":
        return f"{name[0].upper()}{name[1:]} finished", f"Succeeded at {step}."
    if event == "failed":
        return f"{name[0].upper()}{name[1:]} failed", f"At {step}:\n{first_lines(made.error)}"
    if event == "lost":
        return f"{name[0].upper()}{name[1:]} was lost", f"At {step}: {first_lines(made.error, 3)}"
    paused = AlertFiring.objects.filter(run=run, paused=True).order_by("-id").first()
    why = f"Paused by an alert: {paused.message}\nResume it from its page." if paused else f"Stopped at {step}."
    if run.checkpoint_path:
        why += " A checkpoint was saved."
    return f"{name[0].upper()}{name[1:]} stopped", why
