"""Django app config of `rlstudio.playground`: chat with a catalog model or a run's checkpoint (one, or
two side by side), answers streamed over a websocket, run as a short Celery task (docs/user-guide.md, "5d. Talk to a model")."""
from django.apps import AppConfig


class PlaygroundConfig(AppConfig):
    name = "rlstudio.playground"
    label = "playground"
    verbose_name = "Playground"
    default_auto_field = "django.db.models.BigAutoField"
