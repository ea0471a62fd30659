"""Django app config of `rlstudio.telemetry`."""
from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "rlstudio.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.runs.services import on_job_adopted

        from . import access
        from .backfill import backfill_local_events

        on_job_adopted(lambda run_id: backfill_local_events(run_id=run_id))
        access.connect()
