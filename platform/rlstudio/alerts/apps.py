"""Django app config of `rlstudio.alerts`: registers its hooks with the apps it watches, so that
none of them imports alerts (telemetry's ingest, runs' transitions and reconcile)."""
from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "rlstudio.alerts"
    label = "alerts"
    verbose_name = "Alerts and notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.runs.reconcile import on_reconcile_pass
        from rlstudio.runs.services import on_run_transition
        from rlstudio.telemetry.services import on_events_stored

        from .services import evaluate_stored, on_transition, watch_running

        on_events_stored(evaluate_stored)
        on_run_transition(on_transition)
        on_reconcile_pass(watch_running)
