"""Django app config of `rlstudio.exports`: any checkpoint of a run exported as a Hugging Face folder,
registered in the catalog, with its model card, downloadable as an archive."""
from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "rlstudio.exports"
    label = "exports"
    verbose_name = "Checkpoint exports"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.runs.services import on_run_transition

        from .services import on_run_succeeded

        on_run_transition(on_run_succeeded)  # a succeeded run's final export gets its model card
