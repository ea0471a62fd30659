"""Celery tasks of the catalog: validate an uploaded dataset (takes the id, calls one service)."""
from celery import shared_task

from .models import Dataset
from .services import dataset_validate


@shared_task(name="catalog.validate_dataset", acks_late=True)
def validate_dataset(dataset_id: int) -> str:
    """Validate and convert dataset `dataset_id`; returns its final status (or "gone")."""
    dataset = Dataset.objects.filter(pk=dataset_id).select_related("owner", "stats_model").first()
    if dataset is None:
        return "gone"
    return dataset_validate(dataset=dataset).status
