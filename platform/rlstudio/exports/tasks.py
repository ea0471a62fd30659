"""Celery task of exports (thin: take an id, call the service)."""
from __future__ import annotations

from celery import shared_task


@shared_task(name="exports.run_export", acks_late=True, ignore_result=True)
def run_export(export_id: int) -> str:
    from .services import export_execute

    return export_execute(export_id=export_id)


@shared_task(name="exports.final_card", acks_late=True, ignore_result=True)
def final_card(run_id: int) -> bool:
    from .services import final_export_card

    return final_export_card(run_id=run_id)


@shared_task(name="exports.recover", ignore_result=True)
def recover() -> dict[str, list[int]]:
    """Fail the exports whose worker died, re-send the queued ones whose task was lost (beat)."""
    from .services import export_recover

    return export_recover()
