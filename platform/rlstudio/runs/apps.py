"""Django app config of `rlstudio.runs`."""
from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "rlstudio.runs"
    label = "runs"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import trackers  # noqa: F401 (registers its system check)
        from .services import on_run_succeeded, on_run_transition

        on_run_transition(on_run_succeeded)  # a succeeded run's export goes into the catalog
