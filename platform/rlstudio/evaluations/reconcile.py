"""The evaluations' part of the periodic reconcile (registered with `rlstudio.runs.reconcile.on_reconcile_pass`
by the app's `ready`, before the queue's admission): follow each running evaluation's Ray job. Queued
evaluations are admitted by the runs' one queue pass, in order with queued runs (`queue.py`).

    Ray SUCCEEDED                      -> succeeded with the job's results and samples (failed when
                                          its files are missing or malformed, saying so)
    Ray STOPPED                        -> stopped
    Ray FAILED                         -> failed with the job's error.json (else Ray's reason) as the
                                          error and the job's last log lines as the error_log (the
                                          owner's and staff's only); stopped when a stop was asked for
    Ray does not know the job          -> failed ("lost")
    PENDING / RUNNING, stop asked      -> the stop is asked again once the grace period has passed
    admitted, no Ray job after RLSTUDIO_SUBMIT_TIMEOUT_S -> the job Ray has under its derived id is
                                          adopted, else failed (its submit task was lost)

`decide` is the pure table; `reconcile_evaluation` reads Ray and the files and applies it.
"""
from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from rlstudio.runs import ray_jobs
from rlstudio.runs.reconcile import failed_job_texts

from . import jobs
from .models import Evaluation, EvaluationStatus
from .services import evaluation_finish

log = logging.getLogger(__name__)
S = EvaluationStatus
WAIT, SUCCEEDED, STOPPED, FAILED, LOST, STOP_AGAIN = "wait", "succeeded", "stopped", "failed", "lost", "stop_again"


def decide(*, job_status: str | None, stop_requested: datetime | None, now: datetime, grace_s: float) -> str:
    """What to do with a submitted, running evaluation given Ray's status of its job (None: unknown)."""
    if job_status is None:
        return LOST
    if job_status == ray_jobs.SUCCEEDED:
        return SUCCEEDED
    if job_status == ray_jobs.STOPPED:
        return STOPPED
    if job_status == ray_jobs.FAILED:
        return STOPPED if stop_requested is not None else FAILED
    if stop_requested is not None and (now - stop_requested).total_seconds() > grace_s + 15:
        return STOP_AGAIN
    return WAIT


def _failure_of(ev: Evaluation, info: ray_jobs.JobInfo | None) -> tuple[str, str]:
    """A failed job's (error, error_log): the reason the job wrote into error.json, else Ray's; and the
    job log's last lines (the traceback the job printed, which names server paths: the owner's and
    staff's only, `runs.reconcile.failed_job_texts`)."""
    reason, tail = failed_job_texts(ev.ray_submission_id, info.message if info else "")
    return jobs.read_error(jobs.folder(ev)) or reason, tail


def _unsubmitted(ev: Evaluation, now: datetime) -> str | None:
    """An admitted evaluation its submit task has not submitted yet."""
    waited = (now - (ev.started or ev.created)).total_seconds()
    if waited <= float(settings.RLSTUDIO_SUBMIT_TIMEOUT_S):
        return None
    submission_id = jobs.submission_id_for(ev)
    if ray_jobs.job_info(submission_id) is not None:
        Evaluation.objects.filter(pk=ev.pk, ray_submission_id="").update(ray_submission_id=submission_id)
        return "adopted"
    # Each end only while no submission is recorded: a submit task that was slow, not lost, may have
    # put the job on Ray meanwhile (its commit waits on the row's lock); the next pass follows it.
    if ev.stop_requested is not None:
        return S.STOPPED if evaluation_finish(evaluation_id=ev.pk, status=S.STOPPED, unsubmitted=submission_id) else None
    moved = evaluation_finish(evaluation_id=ev.pk, status=S.FAILED, unsubmitted=submission_id,
                              error=f"not submitted to Ray {waited:.0f} s after it was admitted: its submit task "
                                    f"was lost (is a Celery worker running, and can it reach Ray?)")
    return S.FAILED if moved else None


def reconcile_evaluation(ev: Evaluation, *, now: datetime | None = None) -> str | None:
    """Bring one running evaluation up to date; returns the status it moved to, if any."""
    now = now or timezone.now()
    if not ev.ray_submission_id:
        moved = _unsubmitted(ev, now)
        if moved != "adopted":
            return moved
        ev.refresh_from_db()
    info = ray_jobs.job_info(ev.ray_submission_id)
    action = decide(job_status=info.status if info else None, stop_requested=ev.stop_requested, now=now,
                    grace_s=float(settings.RLSTUDIO_STOP_GRACE_S))
    if action == WAIT:
        return None
    if action == STOP_AGAIN:
        ray_jobs.stop(ev.ray_submission_id)
        return None
    if action == STOPPED:
        return S.STOPPED if evaluation_finish(evaluation_id=ev.pk, status=S.STOPPED) else None
    if action == LOST:
        error = "Ray no longer knows this evaluation's job (the cluster restarted or the job was deleted)"
        return S.FAILED if evaluation_finish(evaluation_id=ev.pk, status=S.FAILED, error=error) else None
    if action == FAILED:
        error, error_log = _failure_of(ev, info)
        return S.FAILED if evaluation_finish(evaluation_id=ev.pk, status=S.FAILED, error=error,
                                             error_log=error_log) else None
    try:
        outcome = jobs.read_outcome(jobs.folder(ev), columns=ev.columns, n_prompts_max=ev.max_prompts, k=ev.k)
    except jobs.OutcomeInvalid as exc:
        return S.FAILED if evaluation_finish(evaluation_id=ev.pk, status=S.FAILED,
                                             error=f"the job ended but its results cannot be used: {exc}") else None
    return S.SUCCEEDED if evaluation_finish(evaluation_id=ev.pk, status=S.SUCCEEDED, outcome=outcome) else None


def reconcile_evaluations() -> dict[str, object]:
    """One pass over every running evaluation. Ray being down changes nothing (logged)."""
    moved: dict[int, str] = {}
    for ev in Evaluation.objects.filter(status=S.RUNNING).select_related("run", "model").order_by("id"):
        try:
            to = reconcile_evaluation(ev)
        except ray_jobs.RayUnavailable as exc:
            log.warning("evaluations reconcile: %s", exc)
            break
        if to:
            moved[ev.pk] = to
    return {"moved": moved}


def gpus_held() -> int:
    """GPUs running evaluations hold (the runs' admission subtracts them from the cluster's)."""
    from django.db.models import Sum

    return Evaluation.objects.filter(status=S.RUNNING).aggregate(n=Sum("gpus"))["n"] or 0
