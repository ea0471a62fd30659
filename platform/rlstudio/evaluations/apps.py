"""Django app config of `rlstudio.evaluations`: evaluations of a run's checkpoints or of a catalog
model (mean@k, pass@k, maj@k) as Ray jobs. Registers with the runs app (which never imports evaluations): the reconcile pass
follows and admits evaluations, and the runs' admission counts the GPUs evaluations hold."""
from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "rlstudio.evaluations"
    label = "evaluations"
    verbose_name = "Checkpoint evaluations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from rlstudio.runs.reconcile import on_reconcile_pass
        from rlstudio.runs.services.admission import on_gpus_held

        from .reconcile import gpus_held, reconcile_evaluations

        on_reconcile_pass(reconcile_evaluations)
        on_gpus_held(gpus_held)
