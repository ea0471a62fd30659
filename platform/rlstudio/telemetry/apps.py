"""Django app config of `rlstudio.telemetry`."""
from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "rlstudio.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"
    default_auto_field = "django.db.models.BigAutoField"
