"""Django app config of `rlstudio.quotas`."""
from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "rlstudio.quotas"
    label = "quotas"
    verbose_name = "Quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.catalog.services.model_assets import on_model_delete
        from rlstudio.catalog.storage import on_dataset_storage_allowance, on_dataset_storage_check
        from rlstudio.evaluations.services import on_evaluation_delete
        from rlstudio.runs.services import on_run_delete
        from rlstudio.runs.services.queue_registry import quota_policy_register

        from .services import (
            Quotas,
            dataset_storage_allowance,
            dataset_storage_refusal,
            evaluation_gpu_time_keep,
            gpu_time_keep,
            model_gpu_time_keep,
        )

        quota_policy_register(Quotas())
        # A deleted job's GPU-hours stay in its owner's monthly budget.
        on_run_delete(gpu_time_keep)
        on_evaluation_delete(evaluation_gpu_time_keep)
        on_model_delete(model_gpu_time_keep)
        # A user's datasets within their quota's dataset_storage_gb (checked at upload).
        on_dataset_storage_check(dataset_storage_refusal)
        on_dataset_storage_allowance(dataset_storage_allowance)
