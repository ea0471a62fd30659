"""The periodic reconcile: make every live run's state tell the truth, then admit queued runs.

    celery beat → rlstudio.runs.tasks.reconcile (every RLSTUDIO_RECONCILE_INTERVAL_S) → reconcile_all()

For each submitting / running / stopping run it reads Ray's job status and the trainer's own events
(`<run dir>/events.jsonl`, always written: the heartbeat source that does not depend on the ingest
endpoint) and moves the run through the services:

    Ray PENDING/RUNNING + a submission id    → running (a submitting run)
    Ray SUCCEEDED                            → succeeded (stopped when the trainer said "stopped")
    Ray STOPPED                              → stopped
    Ray FAILED                               → failed, Ray's reason as the error and the job's last log
                                               lines as the error_log (the owner's and staff's only);
                                               stopped when a stop was asked for (a forced stop kills the job)
    Ray does not know the job                → lost
    no heartbeat for RLSTUDIO_HEARTBEAT_TIMEOUT_S while Ray says running → lost (and the job stopped)
        ... but while the trainer is starting (nothing reported yet, or its newest status "starting":
        imports, model load, workers), not before RLSTUDIO_RUN_STARTUP_TIMEOUT_S from the run's start;
        never reported by then → lost ("the trainer never reported within N s of being started")
    stopping for longer than the grace period → forced stop

A submitting run without a submission id after RLSTUDIO_SUBMIT_TIMEOUT_S has lost its submit task
(`decide_unsubmitted`): when Ray knows the run's derived submission id, the job is adopted and the
table above applies; otherwise the submit task is sent again, at most RLSTUDIO_SUBMIT_MAX_RESENDS
times (each with a fresh timeout), and then the run fails with an error that says so.

Then the `on_reconcile_follow` hooks follow the other kinds of jobs (the evaluations app's), so that
the slots they freed are free for the queue, and one admission pass (`queue_admit_jobs`) admits queued
runs and the other kinds' queued jobs in the one queue's order (`rlstudio.runs.queue`).

Decisions are a pure function (`decide`) of what was read, so they are tested without Ray.
After each pass the `on_reconcile_pass` hooks run (the alerts app's heartbeat and budget watch).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone as dt_tz
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.utils import timezone

from . import launch, ray_jobs
from .failure import ray_failure
from .models import Run, RunStatus
from .queue import RUN
from .services.admission import queue_admit_jobs
from .services import (
    IllegalTransition,
    run_adopt_job,
    run_fail_unsubmitted,
    run_force_kill,
    run_mark_finished,
    run_mark_running,
    run_output_dir,
    run_record_progress,
    run_resubmit,
)

S = RunStatus
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainerView:
    """What the run's events.jsonl says: newest event time, newest beat (any event but a "starting"
    status: the trainer's sign of life once its model is loading no more), step, last status state,
    checkpoint."""

    last_time: datetime | None = None
    last_beat: datetime | None = None
    step: int | None = None
    total_steps: int | None = None
    state: str | None = None
    state_message: str = ""
    checkpoint: str | None = None


def read_trainer_view(out_dir: Path) -> TrainerView:
    events = launch.read_events_tail(out_dir / "events.jsonl")
    last_time = last_beat = step = total = state = ckpt = None
    message = ""
    for ev in events:
        data = ev.get("data") if isinstance(ev.get("data"), dict) else {}
        t = ev.get("time")
        if isinstance(t, (int, float)):
            last_time = datetime.fromtimestamp(float(t), tz=dt_tz.utc)
            if not (ev.get("type") == "status" and data.get("state") == "starting"):
                last_beat = last_time
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
    return TrainerView(last_time=last_time, last_beat=last_beat, step=step, total_steps=total, state=state,
                       state_message=message, checkpoint=ckpt)


@dataclass(frozen=True)
class Decision:
    to: str | None  # the status to move to (None: leave it)
    error: str = ""
    force_stop: bool = False
    need_logs: bool = False


def decide(*, status: str, job: ray_jobs.JobInfo | None, view: TrainerView, now: datetime,
           started: datetime | None, stop_requested: datetime | None, heartbeat_timeout_s: float,
           grace_s: float, startup_timeout_s: float) -> Decision:
    """The pure decision table of the reconcile (see the module docstring).

    A trainer that has reported (`view.last_time`) is lost after `heartbeat_timeout_s` of silence.
    One still starting (nothing reported yet, or its newest status "starting") is not lost before
    `startup_timeout_s` from `started` (importing torch and loading a model take minutes on a busy
    node); one that never reported by then is lost with an error that says so.
    """
    if job is None:
        return Decision(S.LOST, error="Ray no longer knows this run's job (the cluster restarted or the job was deleted)")
    if job.status == ray_jobs.SUCCEEDED:
        if view.state == "stopped" or status == S.STOPPING:
            return Decision(S.STOPPED)
        return Decision(S.SUCCEEDED)
    if job.status == ray_jobs.STOPPED:
        return Decision(S.STOPPED)
    if job.status == ray_jobs.FAILED:
        # A stop was asked for: a forced stop kills the driver itself (Ray then says FAILED, not
        # STOPPED), and so does Ray's SIGKILL after the grace. The run ends as the user asked.
        if status == S.STOPPING:
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
        # Start-up: the trainer has reported nothing yet, or its newest status is still "starting" (it
        # says so before it loads the model, and sends heartbeats only once its workers are up).
        starting = view.last_time is None or view.state == "starting"
        since_start = (now - started).total_seconds() if started is not None else None
        if starting and since_start is not None and since_start <= startup_timeout_s:
            return Decision(None)
        if view.last_time is None:
            if since_start is not None:  # past the start-up grace: it never reported at all
                return Decision(S.LOST, force_stop=True, error=(
                    f"the trainer never reported within {int(startup_timeout_s)} s of being started "
                    "(RLSTUDIO_RUN_STARTUP_TIMEOUT_S); see the job log"))
            return Decision(None)
        silent = (now - view.last_time).total_seconds()
        if silent > heartbeat_timeout_s:
            if starting:
                return Decision(S.LOST, force_stop=True, error=(
                    f"the trainer did not finish starting within {int(startup_timeout_s)} s of being "
                    f"started (RLSTUDIO_RUN_STARTUP_TIMEOUT_S), and has not reported for {int(silent)} s"))
            return Decision(S.LOST, error=f"no heartbeat for {int(silent)} s", force_stop=True)
    return Decision(None)


# What to do with a submitting run that has no Ray submission id (see `decide_unsubmitted`).
WAIT, ADOPT, RESEND, FAIL = "wait", "adopt", "resend", "fail"


def decide_unsubmitted(*, waited_s: float, timeout_s: float, job_known: bool | None, resends: int,
                       max_resends: int) -> str:
    """A submitting run without a submission id, `waited_s` after its submit task was (last) sent.

    Within the timeout the task may still be queued behind others or retrying a busy Ray: wait.
    After it, Ray is asked about the run's derived submission id (`job_known`; None: not asked yet,
    which means wait): a job Ray knows is adopted; otherwise the task was lost, and it is sent again
    until `max_resends` re-sends have been spent, then the run fails.
    """
    if waited_s <= timeout_s or job_known is None:
        return WAIT
    if job_known:
        return ADOPT
    return RESEND if resends < max_resends else FAIL


def _reconcile_unsubmitted(run: Run, *, now: datetime) -> str | None:
    """Wait, adopt Ray's job, re-send the submit task or fail (a submitting run with no submission id).
    Returns "adopted" when the run now has its submission id (the caller reconciles it as usual)."""
    since = run.submit_requested or run.created or now
    waited = (now - since).total_seconds()
    timeout = float(settings.RLSTUDIO_SUBMIT_TIMEOUT_S)
    max_resends = int(settings.RLSTUDIO_SUBMIT_MAX_RESENDS)
    if waited <= timeout:
        return None  # only then is Ray asked
    submission_id = launch.submission_id_for(run)
    job = ray_jobs.job_info(submission_id)
    action = decide_unsubmitted(waited_s=waited, timeout_s=timeout, job_known=job is not None,
                                resends=run.submit_resends, max_resends=max_resends)
    if action == ADOPT:
        adopted = run_adopt_job(run_id=run.pk, submission_id=submission_id)
        return "adopted" if adopted else None
    if action == RESEND:
        run_resubmit(run_id=run.pk)
        log.warning("run %s: no Ray job %.0f s after its submit task was sent; sent it again (%d of %d)",
                    run.pk, waited, run.submit_resends + 1, max_resends)
        return None
    sends = run.submit_resends + 1
    error = (f"not submitted to Ray: its submit task was sent {sends} time{'s' if sends > 1 else ''}, "
             f"{timeout:.0f} s apart, and Ray never received job {submission_id}. Is a Celery worker "
             f"running, and can it reach Ray at RAY_ADDRESS? Its log says more.")
    try:
        return S.FAILED if run_fail_unsubmitted(run=run, error=error, submission_id=submission_id) else None
    except IllegalTransition as exc:
        log.info("reconcile: %s", exc)
        return None


def _out_dir(run: Run) -> Path:
    return run_output_dir(run)


def failed_job_texts(submission_id: str, message: str) -> tuple[str, str]:
    """A failed Ray job's (error, error_log): Ray's reason (`message` is Ray's message for the job),
    and the last RLSTUDIO_ERROR_LOG_LINES lines of the job log (the lines Ray put in its message when
    the log cannot be read). The log prints server paths: it goes to `error_log`, which only the
    owner and staff see (of the run; of an evaluation: `evaluations.reconcile` uses it too)."""
    reason, ray_lines = ray_failure(message)
    lines = int(settings.RLSTUDIO_ERROR_LOG_LINES)
    try:
        tail = ray_jobs.tail_lines(ray_jobs.logs(submission_id), lines)
    except ray_jobs.RayUnavailable as exc:
        tail = "\n".join(x for x in (ray_jobs.tail_lines(ray_lines, lines), f"(logs unavailable: {exc})") if x)
    return reason or "the Ray job failed", tail


def reconcile_run(run: Run, *, now: datetime | None = None) -> str | None:
    """Bring one live run up to date; returns the status it moved to, if any."""
    now = now or timezone.now()
    if not run.ray_submission_id:
        if run.status != S.SUBMITTING:
            return None
        outcome = _reconcile_unsubmitted(run, now=now)
        if outcome != "adopted":
            return outcome
        run.refresh_from_db()
    job = ray_jobs.job_info(run.ray_submission_id)
    view = read_trainer_view(_out_dir(run))
    ckpt = launch.read_latest_checkpoint(_out_dir(run))
    # A "starting" status (the model loading) is no heartbeat: until the first beat last_heartbeat stays
    # empty, so the no_heartbeat watch gives the run the start-up grace, as `decide` does.
    run_record_progress(run=run, step=view.step, total_steps=view.total_steps, heartbeat=view.last_beat,
                        checkpoint_path=str(ckpt) if ckpt else view.checkpoint)
    d = decide(status=run.status, job=job, view=view, now=now, started=run.started,
               stop_requested=run.stop_requested, heartbeat_timeout_s=settings.RLSTUDIO_HEARTBEAT_TIMEOUT_S,
               grace_s=settings.RLSTUDIO_STOP_GRACE_S, startup_timeout_s=settings.RLSTUDIO_RUN_STARTUP_TIMEOUT_S)
    if d.force_stop:
        run_force_kill(run_id=run.pk)
    if d.to is None:
        return None
    error, error_log = d.error, ""
    if d.need_logs:
        error, error_log = failed_job_texts(run.ray_submission_id, d.error)
    try:
        if d.to == S.RUNNING:
            run_mark_running(run=run)
        else:
            run_mark_finished(run=run, to=d.to, error=error, error_log=error_log)
    except IllegalTransition as exc:  # moved meanwhile by another worker: the next pass sees it
        log.info("reconcile: %s", exc)
        return None
    return d.to


# Called at the end of every reconcile pass, in the worker that ran it (the alerts app registers its
# heartbeat and GPU-hour budget watch here, so that runs never imports alerts).
_PASS_HOOKS: list[Callable[[], Any]] = []


def on_reconcile_pass(hook: Callable[[], Any]) -> Callable[[], Any]:
    """Register `hook()` to run after each reconcile pass (idempotent per function)."""
    if hook not in _PASS_HOOKS:
        _PASS_HOOKS.append(hook)
    return hook


# Called in every reconcile pass after the runs and before the queue's admission (the evaluations app
# follows its running evaluations here): what they finish frees its slot for this pass's admission.
_FOLLOW_HOOKS: list[Callable[[], Any]] = []


def on_reconcile_follow(hook: Callable[[], Any]) -> Callable[[], Any]:
    """Register `hook()` to run in each reconcile pass before the queue's admission (idempotent)."""
    if hook not in _FOLLOW_HOOKS:
        _FOLLOW_HOOKS.append(hook)
    return hook


def reconcile_all() -> dict[str, Any]:
    """One pass over every live run and the other kinds' live jobs, then the queue. Ray being down
    changes nothing (logged). `admitted`: the runs admitted; `admitted_jobs`: every job admitted, as
    "<kind> #<id>" in the order admitted."""
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
    for hook in _FOLLOW_HOOKS:
        try:
            hook()
        except Exception:  # one kind's failure never stops the runs' admission
            log.exception("reconcile: follow hook %r failed", hook)
    try:
        jobs = queue_admit_jobs()
    except Exception as exc:  # noqa: BLE001 - the pass hooks (alerts) still run; the next reconcile retries
        log.exception("reconcile: the queue pass failed")
        errors.append(f"the queue pass failed: {exc}")
        jobs = []
    for hook in _PASS_HOOKS:
        try:
            hook()
        except Exception:  # a watcher's failure never stops the reconcile
            log.exception("reconcile: pass hook %r failed", hook)
    return {"moved": moved, "admitted": [j.id for j in jobs if j.kind == RUN],
            "admitted_jobs": [j.label for j in jobs], "errors": errors}
