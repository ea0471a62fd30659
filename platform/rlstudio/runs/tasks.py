"""Celery tasks of runs: thin (take an id, call one service), retries owned here.

    submit_run(run_id)      → services.run_submit      (retried while Ray does not answer)
    stop_run(run_id)        → Ray stop_job: SIGTERM, SIGKILL after the grace period
    force_stop_run(run_id)  → services.run_force_kill  (SIGKILL now)
    reconcile()             → reconcile.reconcile_all  (Celery beat, every few seconds)
    register_export(run_id) → services.run_register_export (after a run succeeds)
"""
from __future__ import annotations

from celery import shared_task

from . import ray_jobs

RETRY = {"max_retries": 5, "countdown": 3}
# Every task ignores its result: nobody reads them, and a send then never touches the result store
# (whose Redis consumer would add its own ~20 s of retries to a launch while Redis is down).


@shared_task(bind=True, name="runs.submit_run", acks_late=True, ignore_result=True)
def submit_run(self, run_id: int) -> str:
    from .models import Run, RunStatus
    from .services import run_submit, run_transition

    try:
        return run_submit(run_id=run_id)
    except ray_jobs.RayUnavailable as exc:
        if self.request.retries >= RETRY["max_retries"]:
            run = Run.objects.get(pk=run_id)
            if run.status == RunStatus.SUBMITTING and not run.ray_submission_id:
                run_transition(run=run, to=RunStatus.FAILED, error=f"could not submit to Ray: {exc}")
            return "failed: Ray unavailable"
        raise self.retry(exc=exc, countdown=RETRY["countdown"])


@shared_task(bind=True, name="runs.stop_run", acks_late=True, ignore_result=True)
def stop_run(self, run_id: int) -> str:
    from .models import Run

    run = Run.objects.get(pk=run_id)
    if not run.ray_submission_id:
        return "no job"
    try:
        return "stop sent" if ray_jobs.stop(run.ray_submission_id) else "job already over"
    except ray_jobs.RayUnavailable as exc:
        raise self.retry(exc=exc, countdown=RETRY["countdown"], max_retries=RETRY["max_retries"])


@shared_task(name="runs.force_stop_run", acks_late=True, ignore_result=True)
def force_stop_run(run_id: int) -> str:
    from .services import run_force_kill

    return run_force_kill(run_id=run_id)


@shared_task(name="runs.reconcile", ignore_result=True)
def reconcile() -> dict:
    from .reconcile import reconcile_all

    return reconcile_all()


@shared_task(name="runs.register_export", acks_late=True, ignore_result=True)
def register_export(run_id: int) -> str:
    from rlstudio.catalog.errors import CatalogRefused

    from .services import run_register_export

    try:
        model = run_register_export(run_id=run_id)
    except CatalogRefused as exc:  # the export fails the model check: said in the log, the run stays as it is
        return f"not registered: {exc}"
    return f"registered model {model.pk}" if model is not None else "no export"
