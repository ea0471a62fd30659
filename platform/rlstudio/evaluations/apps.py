"""Django app config of `rlstudio.evaluations`: evaluations of a run's checkpoints (mean@k, pass@k, maj@k)."""
from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "rlstudio.evaluations"
    label = "evaluations"
    verbose_name = "Checkpoint evaluations"
    default_auto_field = "django.db.models.BigAutoField"
