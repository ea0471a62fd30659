"""The periodic reconcile: make every live run's state tell the truth, then admit queued runs.

    celery beat → rlstudio.runs.tasks.reconcile (every RLSTUDIO_RECONCILE_INTERVAL_S) → reconcile_all()

For each submitting / running / stopping run it reads Ray's job status and the trainer's own events
(`<run dir>/events.jsonl`, always written: the heartbeat source that does not depend on the ingest
endpoint) and moves the run through the services:

    Ray PENDING/RUNNING + a submission id    → running (a submitting run)
    Ray SUCCEEDED                            → succeeded (stopped when the trainer said "stopped")
    Ray STOPPED                              → stopped
    Ray FAILED                               → failed, with the job's last log lines as the error
    Ray does not know the job                → lost
    no heartbeat for RLSTUDIO_HEARTBEAT_TIMEOUT_S while Ray says running → lost (and the job stopped)
    stopping for longer than the grace period → forced stop

Decisions are a pure function (`decide`) of what was read, so they are tested without Ray.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as dt_tz
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from . import launch, ray_jobs
from .models import Run, RunStatus
from .services import (
    IllegalTransition,
    queue_admit_all,
    run_force_kill,
    run_mark_finished,
    run_mark_running,
    run_output_dir,
    run_record_progress,
)

S = RunStatus
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainerView:
    """What the run's events.jsonl says: newest event time, step, last status state, checkpoint."""

    last_time: datetime | None = None
    step: int | None = None
    total_steps: int | None = None
    state: str | None = None
    state_message: str = ""
    checkpoint: str | None = None


def read_trainer_view(out_dir: Path) -> TrainerView:
    events = launch.read_events_tail(out_dir / "events.jsonl")
    last_time = step = total = state = ckpt = None
    message = ""
    for ev in events:
        data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
        t = ev.get("time")
        if isinstance(t, (int, float)):
            last_time = datetime.fromtimestamp(float(t), tz=dt_tz.utc)
        s = data.get("step")
        if isinstance(s, int) and ev.get("type") in ("heartbeat", "metrics", "status", "checkpoint"):
            step = max(step or 0, s)
        if ev.get("type") == "status":
            state = data.get("state")
            message = str(data.get("message") or "")
            if isinstance(data.get("total_steps"), int) and data["total_steps"] > 0:
                total = data["total_steps"]
        if ev.get("type") == "checkpoint" and isinstance(data.get("path"), str):
            ckpt = data["path"]
    return TrainerView(last_time=last_time, step=step, total_steps=total, state=state,
                       state_message=message, checkpoint=ckpt)


@dataclass(frozen=True)
class Decision:
    to: str | None  # the status to move to (None: leave it)
    error: str = ""
    force_stop: bool = False
    need_logs: bool = False


def decide(*, status: str, job: ray_jobs.JobInfo | None, view: TrainerView, now: datetime,
           started: datetime | None, stop_requested: datetime | None, heartbeat_timeout_s: float,
           grace_s: float) -> Decision:
    """The pure decision table of the reconcile (see the module docstring)."""
    if job is None:
        return Decision(S.LOST, error="Ray no longer knows this run's job (the cluster restarted or the job was deleted)")
    if job.status == ray_jobs.SUCCEEDED:
        if view.state == "stopped" or status == S.STOPPING:
            return Decision(S.STOPPED)
        return Decision(S.SUCCEEDED)
    if job.status == ray_jobs.STOPPED:
        return Decision(S.STOPPED)
    if job.status == ray_jobs.FAILED:
        if status == S.STOPPING and view.state == "stopped":
            return Decision(S.STOPPED)
        return Decision(S.FAILED, error=job.message, need_logs=True)
    # PENDING or RUNNING
    if status == S.SUBMITTING:
        return Decision(S.RUNNING)
    if status == S.STOPPING and stop_requested is not None:
        # Ray SIGKILLs after the grace by itself; a margin covers a lost stop request.
        if (now - stop_requested).total_seconds() > grace_s + 15:
            return Decision(None, force_stop=True)
    if job.status == ray_jobs.RUNNING:
        last = view.last_time or started
        if last is not None and (now - last).total_seconds() > heartbeat_timeout_s:
            return Decision(S.LOST, error=f"no heartbeat for {int((now - last).total_seconds())} s", force_stop=True)
    return Decision(None)


def _out_dir(run: Run) -> Path:
    return run_output_dir(run)


def reconcile_run(run: Run, *, now: datetime | None = None) -> str | None:
    """Bring one live run up to date; returns the status it moved to, if any."""
    now = now or timezone.now()
    if not run.ray_submission_id:
        if run.status == S.SUBMITTING and (now - (run.created or now)) > timedelta(minutes=10):
            log.warning("run %s has been submitting for 10 minutes without a job", run.pk)
        return None
    job = ray_jobs.job_info(run.ray_submission_id)
    view = read_trainer_view(_out_dir(run))
    ckpt = launch.read_latest_checkpoint(_out_dir(run))
    run_record_progress(run=run, step=view.step, total_steps=view.total_steps, heartbeat=view.last_time,
                        checkpoint_path=str(ckpt) if ckpt else view.checkpoint)
    d = decide(status=run.status, job=job, view=view, now=now, started=run.started,
               stop_requested=run.stop_requested, heartbeat_timeout_s=settings.RLSTUDIO_HEARTBEAT_TIMEOUT_S,
               grace_s=settings.RLSTUDIO_STOP_GRACE_S)
    if d.force_stop:
        run_force_kill(run_id=run.pk)
    if d.to is None:
        return None
    error = d.error
    if d.need_logs:
        try:
            tail = ray_jobs.tail_lines(ray_jobs.logs(run.ray_submission_id), settings.RLSTUDIO_ERROR_LOG_LINES)
        except ray_jobs.RayUnavailable as exc:
            tail = f"(logs unavailable: {exc})"
        error = "\n".join(x for x in (error, tail) if x)
    try:
        if d.to == S.RUNNING:
            run_mark_running(run=run)
        else:
            run_mark_finished(run=run, to=d.to, error=error)
    except IllegalTransition as exc:  # moved meanwhile by another worker: the next pass sees it
        log.info("reconcile: %s", exc)
        return None
    return d.to


def reconcile_all() -> dict[str, Any]:
    """One pass over every live run, then the queue. Ray being down changes nothing (logged)."""
    moved: dict[int, str] = {}
    errors: list[str] = []
    live = Run.objects.filter(status__in=[S.SUBMITTING, S.RUNNING, S.STOPPING]).order_by("id")
    for run in live:
        try:
            to = reconcile_run(run)
        except ray_jobs.RayUnavailable as exc:
            errors.append(str(exc))
            break  # the next runs would wait for the same dead Ray
        if to:
            moved[run.pk] = to
    admitted = queue_admit_all()
    return {"moved": moved, "admitted": admitted, "errors": errors}
