"""Celery task of the playground (thin: take an id, call the runner)."""
from __future__ import annotations

from celery import shared_task


@shared_task(name="playground.run_session", acks_late=False, ignore_result=True)
def run_session(session_id: int) -> str:
    """acks_late off: a session whose worker died is not run again later (its page has gone)."""
    from .runner import session_execute

    return session_execute(session_id=session_id)


@shared_task(name="playground.expire_stale", ignore_result=True)
def expire_stale() -> int:
    """Fail the sessions no worker will end (beat): they stop blocking their runs' and models' deletes."""
    from .services import expire_stale as expire

    return expire()
