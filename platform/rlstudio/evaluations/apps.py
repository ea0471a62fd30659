"""Django app config of `rlstudio.evaluations`: evaluations of a run's checkpoints or of a catalog
model (mean@k, pass@k, maj@k) as Ray jobs. Registers with the runs app (which never imports evaluations): the reconcile pass
follows evaluations, queued evaluations wait in the runs' one queue (admitted in order with queued
runs), and the runs' admission counts the GPUs evaluations hold."""
from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "rlstudio.evaluations"
    label = "evaluations"
    verbose_name = "Checkpoint evaluations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.runs.reconcile import on_reconcile_follow
        from rlstudio.runs.services.queue_registry import on_gpus_held, queued_kind_register

        from .queue import EvaluationQueue
        from .reconcile import gpus_held, reconcile_evaluations

        on_reconcile_follow(reconcile_evaluations)
        on_gpus_held(gpus_held)
        queued_kind_register(EvaluationQueue())
