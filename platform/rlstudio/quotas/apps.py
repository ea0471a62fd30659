"""Django app config of `rlstudio.quotas`."""
from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "rlstudio.quotas"
    label = "quotas"
    verbose_name = "Quotas"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.runs.services import on_run_delete
        from rlstudio.runs.services.admission import quota_policy_register

        from .services import Quotas, gpu_time_keep

        quota_policy_register(Quotas())
        on_run_delete(gpu_time_keep)  # a deleted run's GPU-hours stay in its owner's monthly budget
