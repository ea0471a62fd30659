"""Django app config of `rlstudio.playground`: chat with a catalog model or a run's checkpoint (one, or
two side by side), answers streamed over a websocket, run as a short Celery task (docs/user-guide.md, "5d. Talk to a model")."""
from django.apps import AppConfig


class PlaygroundConfig(AppConfig):
    name = "rlstudio.playground"
    label = "playground"
    verbose_name = "Playground"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The catalog and the runs app know nothing of sessions (they name models and runs in JSON):
        # the playground tells them when one is in use, and deletes a deleted run's sessions with it.
        from rlstudio.catalog.services.model_assets import on_model_delete_refusal
        from rlstudio.runs.services.deletion import on_run_delete, on_run_delete_refusal

        from .selectors import model_delete_refusal, run_delete_refusal
        from .services import run_sessions_delete

        on_model_delete_refusal(model_delete_refusal)
        on_run_delete_refusal(run_delete_refusal)
        on_run_delete(run_sessions_delete)
