"""Celery task of evaluations (thin: take an id, call the service)."""
from __future__ import annotations

from celery import shared_task


@shared_task(name="evaluations.submit_evaluation", acks_late=True, ignore_result=True)
def submit_evaluation(evaluation_id: int) -> str:
    from .services import evaluation_submit

    return evaluation_submit(evaluation_id=evaluation_id)
