"""Django app config of `rlstudio.telemetry`."""
from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "rlstudio.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.runs.services import on_job_adopted, on_run_created

        from . import access
        from .backfill import backfill_local_events
        from .services import retention_for_new_run

        on_job_adopted(lambda run_id: backfill_local_events(run_id=run_id))
        on_run_created(retention_for_new_run)
        access.connect()
