"""Writes of the runs app, including THE run state machine.

Every status change of a run goes through `run_transition`; nothing else assigns `Run.status`.

    queued ──▶ submitting ──▶ running ──▶ stopping ──▶ stopped | succeeded | failed | lost
      │            │  ╰──▶ failed    ╰──▶ succeeded | failed | lost
      │            ╰──▶ queued (back to the queue: no capacity after all)
      ╰──▶ stopped (cancelled before it ever ran)

stopped, succeeded, failed and lost are terminal: nothing follows them.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from rlstudio.accounts.services import audit_record

from .models import TERMINAL_STATUSES, Run, RunStatus

log = logging.getLogger(__name__)

S = RunStatus
ALLOWED_TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.SUBMITTING, S.STOPPED}),
    S.SUBMITTING: frozenset({S.RUNNING, S.FAILED, S.QUEUED}),
    S.RUNNING: frozenset({S.STOPPING, S.SUCCEEDED, S.FAILED, S.LOST}),
    S.STOPPING: frozenset({S.STOPPED, S.FAILED, S.LOST, S.SUCCEEDED}),
    S.STOPPED: frozenset(),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.LOST: frozenset(),
}
INGEST_TOKEN_PREFIX = "rit_"


class IllegalTransition(Exception):
    """A run was asked to move between two states the state machine does not connect."""

    def __init__(self, *, run_id: int, current: str, to: str):
        self.run_id, self.current, self.to = run_id, current, to
        allowed = sorted(ALLOWED_TRANSITIONS.get(current, ()))
        targets = ", ".join(allowed) if allowed else f"none ({current} is terminal)"
        super().__init__(f"run {run_id}: illegal transition {current} → {to}; allowed from {current}: {targets}")


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def run_transition(
    *,
    run: Run,
    to: str,
    by: AbstractBaseUser | None = None,
    error: str = "",
    reason: str = "",
) -> Run:
    """Move `run` to status `to`, or raise `IllegalTransition`.

    Locks the row so that two workers (a reconcile and a stop, say) cannot both move it; checks the
    table against the status stored *now*, not the caller's possibly stale copy; sets `started` on
    entering running and `finished` on a terminal state; keeps `error` for failed/lost and `reason`
    as the queue reason on entering queued; records an AuditEvent. Updates `run` in place too.
    """
    if to not in ALLOWED_TRANSITIONS:
        raise ValueError(f"unknown run status {to!r}; known: {', '.join(ALLOWED_TRANSITIONS)}")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        current = locked.status
        if to not in ALLOWED_TRANSITIONS[current]:
            raise IllegalTransition(run_id=locked.pk, current=current, to=to)
        now = timezone.now()
        fields = ["status"]
        locked.status = to
        if to == S.RUNNING and locked.started is None:
            locked.started = now
            fields.append("started")
        if to == S.SUBMITTING:
            # The reconcile measures a lost submit task from here (and counts its re-sends from 0).
            locked.submit_requested, locked.submit_resends = now, 0
            fields += ["submit_requested", "submit_resends"]
        if to in TERMINAL_STATUSES:
            # A final run takes no more reports: its ingest token dies with it.
            locked.finished, locked.ingest_token_hash = now, ""
            fields += ["finished", "ingest_token_hash"]
        if error:
            locked.error = error
            fields.append("error")
        if to == S.QUEUED or current == S.QUEUED:
            # A queue reason describes waiting; it is cleared once the run leaves the queue.
            locked.queue_reason = reason if to == S.QUEUED else ""
            fields.append("queue_reason")
        locked.save(update_fields=fields)
        data: dict[str, Any] = {"from": current, "to": to}
        if error:
            data["error"] = error
        if reason:
            data["reason"] = reason
        audit_record(actor=by, action="run.transition", obj=locked, data=data)
    for field in fields:
        setattr(run, field, getattr(locked, field))
    if to in TERMINAL_STATUSES:
        from . import launch

        launch.remove_token(launch.run_dir(run.pk))
    return run


def run_create(
    *,
    owner: AbstractBaseUser,
    name: str,
    dataset,
    model,
    config: dict[str, Any],
    gpus: int,
    val_dataset=None,
    parent: Run | None = None,
    parent_kind: str = "",
) -> tuple[Run, str]:
    """Create a queued run with a fresh per-run ingest token.

    Returns (run, token): the plaintext token exists only in this return value; the run stores
    its sha256. The trainer presents it as `Authorization: Bearer <token>` to report events.
    """
    if gpus < 0:
        raise ValueError(f"gpus must be >= 0, got {gpus}")
    token = INGEST_TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        run = Run.objects.create(
            owner=owner,
            name=name,
            dataset=dataset,
            val_dataset=val_dataset,
            model=model,
            config=config,
            gpus=gpus,
            status=S.QUEUED,
            ingest_token_hash=_token_hash(token),
            parent=parent,
            parent_kind=parent_kind,
        )
        audit_record(actor=owner, action="run.create", obj=run, data={"name": name, "gpus": gpus})
    return run, token


def run_token_check(*, run: Run, token: str) -> bool:
    """Whether `token` is this run's ingest token (constant-time comparison of the hashes); a run in a
    final state accepts none."""
    if not token or not run.ingest_token_hash or run.status in TERMINAL_STATUSES:
        return False
    return hmac.compare_digest(_token_hash(token), run.ingest_token_hash)


# ------------------------------------------------------------------------------------------ launch
class RunRefused(Exception):
    """A user action the run's state does not allow (the API answers 409 with the message)."""


def _cluster_free_gpus(*, needed: int) -> float | None:
    """GPUs Ray has minus those our active runs hold; None when the run needs none (not checked)."""
    if needed <= 0:
        return None
    from django.db.models import Sum

    from .models import ACTIVE_STATUSES
    from .ray_jobs import RayUnavailable, cluster_total_gpus

    try:
        total = cluster_total_gpus()
    except RayUnavailable:
        return 0.0
    held = Run.objects.filter(status__in=ACTIVE_STATUSES).aggregate(n=Sum("gpus"))["n"] or 0
    return max(total - held, 0.0)


# The queue reason of a run whose submit task could not be published (Redis unreachable).
SUBMIT_UNSENT_REASON = "waiting to be submitted: the task queue is unreachable"


def _enqueue(task_name: str, *args, on_unsent=None) -> None:
    """Send a Celery task once the current transaction commits (the worker must see our writes);
    `on_unsent(error)` runs instead when the broker cannot be reached (see `dispatch`)."""
    from .dispatch import send_after_commit

    send_after_commit(task_name, *args, on_unsent=on_unsent)


def _enqueue_submit(run_id: int) -> None:
    _enqueue("submit_run", run_id, on_unsent=lambda exc: run_requeue_unsent(run_id=run_id, error=exc))


def run_requeue_unsent(*, run_id: int, error: Exception | str) -> bool:
    """A submitting run whose submit task never reached the broker goes back to the queue (first in
    line: it keeps its creation time) with SUBMIT_UNSENT_REASON; the reconcile's admission pass sends
    it again once the broker answers. Returns whether it moved (not when a task got it meanwhile)."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run_id).first()
        if locked is None or locked.status != S.SUBMITTING or locked.ray_submission_id:
            return False
        run_transition(run=locked, to=S.QUEUED, reason=SUBMIT_UNSENT_REASON)
        audit_record(actor=None, action="run.submit_unsent", obj=locked, data={"error": str(error)[:500]})
    return True


def run_admit(*, run: Run, by: AbstractBaseUser | None = None, cluster_free_gpus: float | None = None,
              check_cluster: bool = True) -> bool:
    """Admit a queued run if its owner's quota (and the cluster) allow: queued → submitting, and the
    submit task is sent. Otherwise it stays queued with the reason updated. Returns admitted or not.

    Inside one transaction holding the owner's row lock, so that concurrent admissions of one user's
    runs are serialized and can never exceed the quota together.
    """
    from rlstudio.quotas.services import admission_reason, lock_owner

    with transaction.atomic():
        lock_owner(user=run.owner)
        locked = Run.objects.select_for_update().select_related("owner").get(pk=run.pk)
        if locked.status != S.QUEUED:
            raise RunRefused(f"run {run.pk} is {locked.status}, not queued")
        earlier = (Run.objects.filter(owner=locked.owner_id, status=S.QUEUED)
                   .filter(models_q_earlier(locked)).order_by("created", "id").first())
        if earlier is not None:
            reason = f"waiting behind your earlier queued run #{earlier.pk} ({earlier.name})"
        else:
            free = cluster_free_gpus
            if free is None and check_cluster:
                free = _cluster_free_gpus(needed=locked.gpus)
            reason = admission_reason(run=locked, cluster_free_gpus=free)
        if reason:
            if locked.queue_reason != reason:
                locked.queue_reason = reason
                locked.save(update_fields=["queue_reason"])
                audit_record(actor=by, action="run.queue", obj=locked, data={"reason": reason})
            run.queue_reason = reason
            return False
        run_transition(run=locked, to=S.SUBMITTING, by=by)
        _enqueue_submit(locked.pk)
    # The submit task is sent on commit; an unreachable broker puts the run back in the queue.
    run.refresh_from_db(fields=["status", "queue_reason"])
    return run.status != S.QUEUED


def models_q_earlier(run: Run):
    """Q of the runs created before `run` (ties broken by id)."""
    from django.db.models import Q

    return Q(created__lt=run.created) | Q(created=run.created, id__lt=run.pk)


def run_launch(*, run: Run, by: AbstractBaseUser) -> Run:
    """Launch a queued run now if quota allows, else leave it queued with its reason."""
    run_admit(run=run, by=by)
    run.refresh_from_db()
    audit_record(actor=by, action="run.launch", obj=run, data={"status": run.status})
    return run


def queue_admit_all() -> list[int]:
    """Admit queued runs oldest first while quotas and the cluster allow (the fair queue).

    A user at their quota does not block the others; a GPU run waiting for the cluster's GPUs keeps
    later GPU runs from overtaking it (cluster GPUs are handed out in queue order).
    """
    admitted: list[int] = []
    cluster_blocked = False
    free: float | None = None
    for run in Run.objects.filter(status=S.QUEUED).select_related("owner").order_by("created", "id"):
        if run.gpus > 0:
            if cluster_blocked:
                continue
            if free is None:
                free = _cluster_free_gpus(needed=run.gpus)
        try:
            ok = run_admit(run=run, cluster_free_gpus=free if run.gpus > 0 else None, check_cluster=False)
        except RunRefused:
            continue  # cancelled meanwhile
        if ok:
            admitted.append(run.pk)
            if run.gpus > 0 and free is not None:
                free -= run.gpus
        elif run.queue_reason == SUBMIT_UNSENT_REASON:
            break  # the broker is down: the runs behind it would wait for it too
        elif run.gpus > 0 and run.queue_reason.startswith("the cluster"):
            cluster_blocked = True
    return admitted


def run_issue_ingest_token(*, run: Run) -> str:
    """A fresh one-run ingest token (stored as its hash; the plaintext goes to the job only)."""
    token = INGEST_TOKEN_PREFIX + secrets.token_urlsafe(32)
    Run.objects.filter(pk=run.pk).update(ingest_token_hash=_token_hash(token))
    run.ingest_token_hash = _token_hash(token)
    return token


def run_submit(*, run_id: int) -> str:
    """Submit a submitting run to Ray (the Celery task's one call). Idempotent: returns what it did.

    Holds the run's row lock while it submits, so a duplicated task waits and then finds the
    submission id set; the submission id is derived from the run, so even a task that lost its
    database commit finds Ray refusing a second job with that id.
    """
    from . import launch, ray_jobs

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
            carried = launch.read_token(out_dir)
            if carried:
                Run.objects.filter(pk=run.pk).update(ingest_token_hash=_token_hash(carried))
            spec = _read_spec(out_dir) or run.config
            created = False
        else:
            try:
                tool_config = _tool_set_file(run, out_dir)
                spec = launch.freeze_spec(run=run, out_dir=out_dir, tool_config=tool_config)
                spec_path = launch.write_spec(spec, out_dir)
            except (launch.ConfigInvalid, OSError) as exc:
                run_transition(run=run, to=S.FAILED, error=f"could not prepare the run: {exc}")
                return "failed: config"
            token = run_issue_ingest_token(run=run)
            token_file = launch.write_token(out_dir, token)
            created = ray_jobs.submit(
                submission_id=submission_id,
                entrypoint=launch.entrypoint(spec_path=spec_path, out_dir=out_dir),
                env_vars=launch.job_env(run_id=run.pk, token_file=token_file),
                num_cpus=settings.RLSTUDIO_RUN_NUM_CPUS,
                num_gpus=run.gpus,
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
    backfilled = run_backfill_local_events(run_id=run_id)
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
        from .launch import ConfigInvalid

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
        _enqueue_submit(locked.pk)
    return True


def run_adopt_job(*, run_id: int, submission_id: str) -> bool:
    """Record a job Ray already runs under the run's derived submission id while the run, still
    submitting, does not know it (the submit task reached Ray, then died before its commit).

    Takes the frozen spec the task wrote before submitting (so the output folder is the job's), and
    the ingest token the task wrote into the run's folder for the job (its hash: the one the task had
    issued was rolled back with it), so that the job's reports are accepted. Returns whether it
    recorded it.
    """
    from . import launch

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
        token = launch.read_token(launch.run_dir(locked.pk))
        if token:
            locked.ingest_token_hash = _token_hash(token)
            fields.append("ingest_token_hash")
        locked.save(update_fields=fields)
        audit_record(actor=None, action="run.adopt", obj=locked,
                     data={"submission_id": submission_id, "spec": isinstance(spec, dict), "token": bool(token)})
    run_backfill_local_events(run_id=run_id)
    return True


def run_backfill_local_events(*, run_id: int, chunk: int = 500) -> int:
    """Store the reports in the run's own events file that the platform does not have; returns how
    many were new.

    A job adopted after its submit task died (run_submit finding it already in Ray, or run_adopt_job)
    reported while the platform did not know its ingest token: the hash issued with the job was
    rolled back with the task's transaction, so every POST was refused until the adoption, and a short
    job may have finished by then. The trainer's JSONL sink writes every event to `events.jsonl` in the
    run's folder (launch.run_dir, the job's `trainer.default_local_dir`) as it goes; those lines go
    through the ingest (the same validation and limits; stored once per seq, so what did arrive is
    skipped) and their status events end the run as its own reports would have. Nothing to read when
    the job runs on another machine: then only its later reports arrive. A line that is not JSON (the
    last one, mid-write) is skipped.
    """
    from rlstudio.telemetry import codec
    from rlstudio.telemetry.services import events_ingest

    from . import launch

    path = launch.run_dir(run_id) / "events.jsonl"
    run = Run.objects.filter(pk=run_id).first()
    if run is None or not path.is_file():
        return 0
    stored, batch = 0, []
    with path.open("rb") as f:
        for line in f:
            try:
                batch.append(codec.loads(line))
            except ValueError:
                continue
            if len(batch) >= chunk:
                stored += events_ingest(run=run, raw_events=batch).accepted
                batch = []
    if batch:
        stored += events_ingest(run=run, raw_events=batch).accepted
    if stored:
        log.info("run %s: %d reports stored from %s (the job reported before it was adopted)", run_id, stored, path)
    return stored


# -------------------------------------------------------------------------------------------- stop
def run_stop(*, run: Run, by: AbstractBaseUser, checkpoint: bool = True, force: bool = False) -> Run:
    """Stop a run: a queued one is cancelled; a running one goes stopping and Ray sends SIGTERM (the
    trainer finishes its step, checkpoints, exits 0); `force` or `checkpoint=False` kills it now."""
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
            audit_record(actor=by, action="run.stop", obj=locked, data={"checkpoint": checkpoint, "force": force})
            # Unsent (broker down): the run stays stopping and the reconcile forces it after the grace.
            _enqueue("force_stop_run" if hard else "stop_run", locked.pk,
                     on_unsent=lambda exc, pk=locked.pk: audit_record(
                         actor=None, action="run.stop_unsent", obj=Run.objects.get(pk=pk),
                         data={"error": str(exc)[:500]}))
        elif status == S.STOPPING:
            raise RunRefused("the run is already stopping; use force to kill it now")
        else:
            raise RunRefused(f"the run is {status}: there is nothing to stop")
    run.refresh_from_db()
    return run


def run_force_kill(*, run_id: int) -> str:
    """SIGKILL the job's processes now (a forced stop): Ray's stop after a zero grace period.

    Ray's stop_job always starts with SIGTERM; to skip the wait we kill the driver process tree
    ourselves when it is on this machine (the local head), then ask Ray to stop the job.
    """
    from . import ray_jobs

    run = Run.objects.get(pk=run_id)
    if not run.ray_submission_id:
        return "no job"
    killed = _kill_job_processes(run)
    ray_jobs.stop(run.ray_submission_id)
    audit_record(actor=None, action="run.force_stop", obj=run, data={"killed_pids": killed})
    return f"killed {len(killed)} processes"


def run_output_dir(run: Run):
    """The run's output folder (launch.run_folder: the one its spec was frozen with)."""
    from . import launch

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


# ---------------------------------------------------------------------------------- resume / clone
def run_resume(*, run: Run, by: AbstractBaseUser) -> Run:
    """A new run (parent = `run`, kind resume) that continues from `run`'s last checkpoint.

    Only from a checkpoint in `run`'s own folder (the trainer's commit marker there, or the path it
    reported when that lies inside the folder); the new run records it, and its spec is made again
    from `run`'s record (its user keys, the platform's paths), never from what `run`'s config said."""
    from . import launch

    if not run.is_terminal:
        raise RunRefused(f"the run is {run.status}: only a finished run can be resumed (stop it first)")
    ckpt = launch.latest_checkpoint_of(run)
    if ckpt is None:
        raise RunRefused("the run has no checkpoint to resume from")
    _check_still_visible(run)
    config = _config_or_invalid(base=run.config, dataset=run.dataset, val_dataset=run.val_dataset,
                                model=run.model, gpus=run.gpus)
    new = _create_and_launch(
        owner=run.owner, by=by, name=f"{run.name} (resumed)"[:200], dataset=run.dataset, model=run.model,
        val_dataset=run.val_dataset, config=config, gpus=run.gpus, parent=run, parent_kind="resume",
        tool_set=run.tool_set, resume_from=str(ckpt),
        audit=("run.resume", {"parent": run.pk, "from": str(ckpt)}))
    return new


def run_clone(*, run: Run, by: AbstractBaseUser, name: str | None = None, overrides=None) -> Run:
    """A new queued run with `run`'s config (its user keys; the platform's paths from `run`'s dataset
    and model; its own folder, no resume) and the caller's overrides, which go through the gate."""
    _check_still_visible(run)
    config = _config_or_invalid(base=run.config, overrides=overrides, dataset=run.dataset,
                                val_dataset=run.val_dataset, model=run.model, gpus=run.gpus)
    return _create_and_launch(
        owner=run.owner, by=by, name=(name or f"{run.name} (clone)")[:200], dataset=run.dataset,
        model=run.model, val_dataset=run.val_dataset, config=config, gpus=run.gpus, parent=run,
        parent_kind="clone", tool_set=run.tool_set, audit=("run.clone", {"parent": run.pk}))


def _check_still_visible(run: Run) -> None:
    """A clone or resume trains on the source run's dataset and model again: its owner must still be
    allowed to see them (a shared one may have been made private since)."""
    from django.http import Http404

    from rlstudio.catalog.selectors import dataset_get_for, model_asset_get_for

    for field, getter, kind in (("dataset", dataset_get_for, "dataset"), ("val_dataset", dataset_get_for, "dataset"),
                                ("model", model_asset_get_for, "model")):
        obj_id = getattr(run, f"{field}_id")
        if obj_id is None:
            continue
        try:
            getter(user=run.owner, **{f"{kind}_id": obj_id})
        except Http404:
            raise RunInputInvalid(f"the run's {kind} (id {obj_id}) is no longer shared with its owner",
                                  field=field) from None


def _config_or_invalid(**kwargs) -> dict[str, Any]:
    from . import launch

    try:
        return launch.build_config(**kwargs)
    except launch.ConfigInvalid as exc:
        raise RunInputInvalid(exc.message, field=exc.key) from None


def _create_and_launch(*, owner, by, audit: tuple[str, dict[str, Any]], resume_from: str = "",
                       tool_set: str = "", **fields) -> Run:
    """Create a queued run (refused past the owner's queued-runs cap), record how it was made, and
    launch it if the quota allows."""
    from rlstudio.quotas.services import QueueCapReached, check_queue_cap, lock_owner

    from . import launch

    with transaction.atomic():
        lock_owner(user=owner)
        try:
            check_queue_cap(user=owner)
        except QueueCapReached as exc:
            raise RunRefused(str(exc)) from None
        run, _token = run_create(owner=owner, **fields)
        Run.objects.filter(pk=run.pk).update(total_steps=launch.total_steps_of(fields["config"]), step=0,
                                             tool_set=tool_set, resume_from=resume_from)
        run.tool_set, run.resume_from = tool_set, resume_from
        action, data = audit
        if action:
            audit_record(actor=by, action=action, obj=run, data=data)
    return run_launch(run=run, by=by)


# ---------------------------------------------------------------------------- what Ray reports
def run_mark_running(*, run: Run) -> Run:
    return run_transition(run=run, to=S.RUNNING) if run.status == S.SUBMITTING else run


def run_mark_finished(*, run: Run, to: str, error: str = "") -> Run:
    """Move a submitting/running/stopping run to a terminal state, through running when needed."""
    if run.status == S.SUBMITTING and to in (S.SUCCEEDED, S.LOST, S.STOPPED):
        run_transition(run=run, to=S.RUNNING)
    if run.status == S.RUNNING and to == S.STOPPED:
        run_transition(run=run, to=S.STOPPING)
    return run_transition(run=run, to=to, error=error)


def run_record_progress(*, run: Run, step: int | None = None, total_steps: int | None = None,
                        heartbeat=None, checkpoint_path: str | None = None) -> None:
    """Progress read from the trainer's events (only ever moves forward). A checkpoint path outside
    the run's own folder is not recorded (resume reads only from there)."""
    from . import launch

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


# ----------------------------------------------------------------------------- new runs and configs
class RunInputInvalid(Exception):
    """A new run's input is wrong; `field` names the form field or the config key."""

    def __init__(self, message: str, *, field: str):
        super().__init__(message)
        self.field = field


def run_new(
    *,
    owner: AbstractBaseUser,
    name: str,
    dataset,
    model,
    gpus: int = 0,
    val_dataset=None,
    preset: str | None = None,
    config: dict[str, Any] | None = None,
    saved: dict[str, Any] | None = None,
    overrides=None,
    tool_set: str = "",
) -> Run:
    """Validate the config (the gate, then the trainer's schema, before anything is queued), create
    the run, launch it.

    `config` is a whole config the user typed, `saved` a stored one (a saved config), `preset` a
    recipe name; `overrides` are the user's dotted keys. `dataset` / `model` are objects the caller
    already checked the owner may see. A dataset that is not ready is refused: the trainer would fail
    on it minutes later. `tool_set` names an operator-registered tool set.
    """
    status = getattr(dataset, "status", "ready")
    if status != "ready":
        raise RunInputInvalid(f"dataset {dataset.name!r} is {status}, not ready", field="dataset")
    if val_dataset is not None and getattr(val_dataset, "status", "ready") != "ready":
        raise RunInputInvalid(f"dataset {val_dataset.name!r} is not ready", field="val_dataset")
    if gpus < 0:
        raise RunInputInvalid("gpus must be >= 0", field="gpus")
    if tool_set:
        from rlstudio.registry.services import tool_set_names

        if tool_set not in tool_set_names():
            raise RunInputInvalid(f"no ready tool set named {tool_set!r}", field="tool_set")
    frozen = _config_or_invalid(preset=preset, config=config, base=saved, overrides=overrides,
                                dataset=dataset, val_dataset=val_dataset, model=model, gpus=gpus)
    if tool_set and not frozen["actor_rollout_ref"]["rollout"]["multi_turn"]["enable"]:
        raise RunInputInvalid("a tool set is offered only in multi-turn rollout: set "
                              "actor_rollout_ref.rollout.multi_turn.enable=true", field="tool_set")
    return _create_and_launch(owner=owner, by=owner, name=name, dataset=dataset, model=model,
                              val_dataset=val_dataset, config=frozen, gpus=gpus, tool_set=tool_set,
                              audit=("", {}))


def run_config_save(*, owner: AbstractBaseUser, name: str, config: dict[str, Any] | None = None,
                    preset: str | None = None, overrides=None, description: str = ""):
    """Save a named config: what the user typed (through the gate), stored without the platform's keys
    (data and model paths, resources: a run sets them from its own record)."""
    from . import gate
    from .models import RunConfig

    checked = _config_or_invalid(config=config or None, preset=None if config else (preset or None),
                                 overrides=overrides)
    if RunConfig.objects.filter(owner=owner, name=name).exists():
        raise RunInputInvalid(f"you already have a config named {name!r}", field="name")
    with transaction.atomic():
        saved = RunConfig.objects.create(owner=owner, name=name, config=gate.user_view(checked),
                                         description=description)
        audit_record(actor=owner, action="config.create", obj=saved, data={"name": name})
    return saved
