"""Django app config of `rlstudio.runs`."""
from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "rlstudio.runs"
    label = "runs"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"
