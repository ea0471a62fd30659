"""Stopping runs: cancel a queued one, stop a running one gracefully (SIGTERM through Ray), or kill it."""
from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record

from ..models import Run, RunStatus
from .admission import enqueue
from ..errors import RunRefused
from .transitions import run_transition


S = RunStatus


def run_stop(*, run: Run, by: AbstractBaseUser | None, checkpoint: bool = True, force: bool = False,
             reason: str = "") -> Run:
    """Stop a run: a queued one is cancelled; a running one goes stopping and Ray sends SIGTERM (the
    trainer finishes its step, checkpoints, exits 0); `force` or `checkpoint=False` kills it now.
    Only its owner or staff (RunNotPermitted for a user it is shared with); `by=None` is the platform
    itself (a shutdown), which must give its `reason`: the transition and the `run.stop` audit event
    then have no actor and carry the reason, so no user is recorded as having stopped the run."""
    from .sharing import check_can_manage

    if by is None:
        if not reason:
            raise ValueError("a stop by the platform (by=None) needs its reason")
    else:
        check_can_manage(user=by, run=run, action="stop")
    audit_data = {"checkpoint": checkpoint, "force": force, **({"reason": reason} if reason else {})}
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        status = locked.status
        if status == S.QUEUED:
            run_transition(run=locked, to=S.STOPPED, by=by, reason="")
        elif status == S.SUBMITTING:
            raise RunRefused("the run is being submitted to Ray; stop it in a moment, once it runs")
        elif status == S.RUNNING or (status == S.STOPPING and (force or not checkpoint)):
            if status == S.RUNNING:
                run_transition(run=locked, to=S.STOPPING, by=by)
            hard = force or not checkpoint
            if locked.stop_requested is None:
                locked.stop_requested = timezone.now()
                locked.save(update_fields=["stop_requested"])
            audit_record(actor=by, action="run.stop", obj=locked, data=audit_data)
            # Unsent (broker down): the run stays stopping and the reconcile forces it after the grace.
            enqueue("force_stop_run" if hard else "stop_run", locked.pk,
                     on_unsent=lambda exc, pk=locked.pk: audit_record(
                         actor=None, action="run.stop_unsent", obj=Run.objects.get(pk=pk),
                         data={"error": str(exc)[:500]}))
        elif status == S.STOPPING:
            raise RunRefused("the run is already stopping; use force to kill it now")
        else:
            raise RunRefused(f"the run has already ended ({status}): there is nothing to stop")
    run.refresh_from_db()
    return run


def run_force_kill(*, run_id: int) -> str:
    """SIGKILL the job's processes now (a forced stop): Ray's stop after a zero grace period.

    Ray's stop_job always starts with SIGTERM; to skip the wait we kill the driver process tree
    ourselves when it is on this machine (the local head), then ask Ray to stop the job.
    """
    from .. import ray_jobs

    run = Run.objects.get(pk=run_id)
    if not run.ray_submission_id:
        return "no job"
    killed = _kill_job_processes(run)
    ray_jobs.stop(run.ray_submission_id)
    audit_record(actor=None, action="run.force_stop", obj=run, data={"killed_pids": killed})
    return f"killed {len(killed)} processes"


def run_output_dir(run: Run):
    """The run's output folder (launch.run_folder: the one its spec was frozen with)."""
    from .. import launch

    return launch.run_folder(run)


def _kill_job_processes(run: Run) -> list[int]:
    """SIGKILL the local trainer processes of `run` (matched by `--output <its folder>` in their
    command line) and their children. Only finds them when the job runs on this machine."""
    import os
    import signal

    import psutil

    marker = str(run_output_dir(run))
    killed: list[int] = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "trainer" in cmd and marker in cmd:
                for child in proc.children(recursive=True):
                    os.kill(child.pid, signal.SIGKILL)
                    killed.append(child.pid)
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            continue
    return killed
