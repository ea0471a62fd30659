"""Celery tasks of the catalog: validate an uploaded dataset (takes the id, calls one service), and
re-send the validation of datasets whose task never reached the queue (Celery beat)."""
from celery import shared_task

from .models import Dataset
from .services.validation import dataset_resend_stuck, dataset_validate


# ignore_result: nobody reads it, and publishing must not touch the result store (see runs.dispatch).
@shared_task(name="catalog.validate_dataset", acks_late=True, ignore_result=True)
def validate_dataset(dataset_id: int) -> str:
    """Validate and convert dataset `dataset_id`; returns its final status (or "gone")."""
    dataset = Dataset.objects.filter(pk=dataset_id).select_related("owner", "stats_model").first()
    if dataset is None:
        return "gone"
    return dataset_validate(dataset=dataset).status


@shared_task(name="catalog.resend_validations", ignore_result=True)
def resend_validations() -> list[int]:
    """Re-send the validation of datasets left `validating` with no validator at work."""
    return dataset_resend_stuck()
