"""Submission to Ray and what a job reports back: submit, re-send, adopt a job a lost task made,
record progress. Jobs adopted after they reported are handed to the `on_job_adopted` hooks (the
telemetry app registers the backfill of the job's own events file there, so that runs never imports
telemetry)."""
from __future__ import annotations

import logging
from typing import Any, Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record

from ..models import Run, RunStatus
from .admission import enqueue_submit
from .creation import run_issue_ingest_token, token_hash
from .transitions import run_transition

log = logging.getLogger(__name__)
S = RunStatus
# Called with a run id when a job is adopted; each returns how many of its reports it stored.
_ADOPTION_HOOKS: list[Callable[[int], int]] = []


def on_job_adopted(hook: Callable[[int], int]) -> Callable[[int], int]:
    """Register `hook(run_id) -> stored` to run after a job is adopted (idempotent per function)."""
    if hook not in _ADOPTION_HOOKS:
        _ADOPTION_HOOKS.append(hook)
    return hook


def _job_adopted(run_id: int) -> int:
    return sum(hook(run_id) for hook in _ADOPTION_HOOKS)


def run_submit(*, run_id: int) -> str:
    """Submit a submitting run to Ray (the Celery task's one call). Idempotent: returns what it did.

    Holds the run's row lock while it submits, so a duplicated task waits and then finds the
    submission id set; the submission id is derived from the run, so even a task that lost its
    database commit finds Ray refusing a second job with that id.
    """
    from .. import adapt, launch, ray_jobs, run_secrets

    with transaction.atomic():
        run = (Run.objects.select_for_update(of=("self",))
               .select_related("dataset", "val_dataset", "model", "parent").filter(pk=run_id).first())
        if run is None:
            return "skipped: no such run"
        if run.status != S.SUBMITTING:
            return f"skipped: run is {run.status}"
        if run.ray_submission_id:
            return "skipped: already submitted"
        out_dir = launch.run_dir(run.pk)
        submission_id = launch.submission_id_for(run)
        if ray_jobs.job_info(submission_id) is not None:
            # A task that reached Ray and died before this commit (a killed worker; the task is
            # redelivered) left a job holding the token written then, whose hash was rolled back:
            # keep that one (from the job's token file), or every report of the job is refused.
            carried = run_secrets.read_token(out_dir)
            if carried:
                Run.objects.filter(pk=run.pk).update(ingest_token_hash=token_hash(carried))
            spec = _read_spec(out_dir) or run.config
            created = False
        else:
            try:
                tool_config = _tool_set_file(run, out_dir)
                spec = launch.freeze_spec(run=run, out_dir=out_dir, tool_config=tool_config)
                spec_path = launch.write_spec(spec, out_dir)
            except launch.ConfigInvalid as exc:
                run_transition(run=run, to=S.FAILED, error=f"could not prepare the run: {exc.key}: {exc.message}")
                return "failed: config"
            except OSError as exc:
                run_transition(run=run, to=S.FAILED, error=f"could not prepare the run: {exc}")
                return "failed: config"
            token = run_issue_ingest_token(run=run)
            token_file = run_secrets.write_token(out_dir, token)
            # the trackers' secrets in files of the run folder; only their paths in the job's environment
            tracker_env = run_secrets.write_tracker_files(run=run, spec=spec, out_dir=out_dir)
            created = ray_jobs.submit(
                submission_id=submission_id,
                entrypoint=launch.entrypoint(spec_path=spec_path, out_dir=out_dir),
                env_vars={**launch.job_env(run_id=run.pk, token_file=token_file), **tracker_env},
                num_cpus=settings.RLSTUDIO_RUN_NUM_CPUS,
                num_gpus=adapt.driver_gpus(run.gpus), job_gpus=run.gpus,
                metadata={"rlstudio_run": str(run.pk), "owner": str(run.owner_id)},
            )
        run.ray_submission_id = submission_id
        run.config = spec
        run.total_steps = launch.total_steps_of(spec)
        run.save(update_fields=["ray_submission_id", "config", "total_steps"])
        audit_record(actor=None, action="run.submit", obj=run,
                     data={"submission_id": submission_id, "new_job": created})
    if created:
        return "submitted"
    backfilled = _job_adopted(run_id)
    return "already in Ray" + (f"; {backfilled} of its reports stored from its events file" if backfilled else "")


def _read_spec(out_dir) -> dict[str, Any] | None:
    import json

    try:
        spec = json.loads((out_dir / "spec.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return spec if isinstance(spec, dict) else None


def _tool_set_file(run: Run, out_dir):
    """The run's registered tool set, written into its folder (None when it has none)."""
    if not run.tool_set:
        return None
    from rlstudio.registry.services import RegistryRefused, tool_set_write

    try:
        return tool_set_write(name=run.tool_set, out_dir=out_dir)
    except RegistryRefused as exc:
        from ..launch import ConfigInvalid

        raise ConfigInvalid("tool_set", str(exc)) from None


def run_resubmit(*, run_id: int) -> bool:
    """Send the submit task again for a run stuck in submitting without a Ray job (its task was lost:
    a worker died before acking, a broker restart dropped the queue). Safe to overlap a slow task:
    run_submit is idempotent by the run's lock and derived submission id. Returns whether it sent."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run_id).first()
        if locked is None or locked.status != S.SUBMITTING or locked.ray_submission_id:
            return False
        locked.submit_resends += 1
        locked.submit_requested = timezone.now()  # the next timeout counts from this send
        locked.save(update_fields=["submit_resends", "submit_requested"])
        audit_record(actor=None, action="run.resubmit", obj=locked, data={"resend": locked.submit_resends})
        enqueue_submit(locked.pk)
    return True


def run_adopt_job(*, run_id: int, submission_id: str) -> bool:
    """Record a job Ray already runs under the run's derived submission id while the run, still
    submitting, does not know it (the submit task reached Ray, then died before its commit).

    Takes the frozen spec the task wrote before submitting (so the output folder is the job's), and
    the ingest token the task wrote into the run's folder for the job (its hash: the one the task had
    issued was rolled back with it), so that the job's reports are accepted. Returns whether it
    recorded it.
    """
    from .. import launch, run_secrets

    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run_id).first()
        if locked is None or locked.status != S.SUBMITTING or locked.ray_submission_id:
            return False
        fields = ["ray_submission_id"]
        locked.ray_submission_id = submission_id
        spec = _read_spec(launch.run_dir(locked.pk))
        if isinstance(spec, dict):
            locked.config, locked.total_steps = spec, launch.total_steps_of(spec)
            fields += ["config", "total_steps"]
        token = run_secrets.read_token(launch.run_dir(locked.pk))
        if token:
            locked.ingest_token_hash = token_hash(token)
            fields.append("ingest_token_hash")
        locked.save(update_fields=fields)
        audit_record(actor=None, action="run.adopt", obj=locked,
                     data={"submission_id": submission_id, "spec": isinstance(spec, dict), "token": bool(token)})
    _job_adopted(run_id)
    return True


def run_record_progress(*, run: Run, step: int | None = None, total_steps: int | None = None,
                        heartbeat=None, checkpoint_path: str | None = None) -> None:
    """Progress read from the trainer's events (only ever moves forward). A checkpoint path outside
    the run's own folder is not recorded (resume reads only from there)."""
    from .. import launch

    if checkpoint_path and not launch.inside(checkpoint_path, launch.run_folder(run)):
        log.warning("run %s: checkpoint path %r is outside its folder; not recorded", run.pk, checkpoint_path[:200])
        checkpoint_path = None
    fields: dict[str, Any] = {}
    if step is not None and step > run.step:
        fields["step"] = step
    if total_steps and total_steps != run.total_steps:
        fields["total_steps"] = total_steps
    if heartbeat is not None and (run.last_heartbeat is None or heartbeat > run.last_heartbeat):
        fields["last_heartbeat"] = heartbeat
    if checkpoint_path and checkpoint_path != run.checkpoint_path:
        fields["checkpoint_path"] = checkpoint_path
    if fields:
        Run.objects.filter(pk=run.pk).update(**fields)
        for key, value in fields.items():
            setattr(run, key, value)
