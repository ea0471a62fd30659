"""Django app config of `rlstudio.quotas`."""
from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "rlstudio.quotas"
    label = "quotas"
    verbose_name = "Quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.catalog.services import on_model_delete
        from rlstudio.evaluations.services import on_evaluation_delete
        from rlstudio.runs.services import on_run_delete
        from rlstudio.runs.services.admission import quota_policy_register

        from .services import Quotas, evaluation_gpu_time_keep, gpu_time_keep, model_gpu_time_keep

        quota_policy_register(Quotas())
        # A deleted job's GPU-hours stay in its owner's monthly budget.
        on_run_delete(gpu_time_keep)
        on_evaluation_delete(evaluation_gpu_time_keep)
        on_model_delete(model_gpu_time_keep)
