"""Celery task of exports (thin: take an id, call the service)."""
from __future__ import annotations

from celery import shared_task


@shared_task(name="exports.run_export", acks_late=True, ignore_result=True)
def run_export(export_id: int) -> str:
    from .services import export_execute

    return export_execute(export_id=export_id)
