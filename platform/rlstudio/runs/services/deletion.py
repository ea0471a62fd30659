"""Deleting a finished run: its records, everything hanging off them, and its own folder on disk.

Who: the run's owner or staff (`check_can_manage`; RunNotPermitted, a 403, for a user it is shared
with). When: only a finished run (stopped, succeeded, failed, lost); anything else is a RunRefused
(409) naming what to do first:
  * a queued, submitting, running or stopping run: stop it first (Stop cancels a queued run at once,
    and a queued run may be admitted and submitted at any moment: only a finished run is deleted);
  * a run resumed from it that has not finished: it starts from a checkpoint in this run's folder;
  * an evaluation, an export or a playground session of the run still queued or running;
  * a catalog model exported from it: its files are in the run's folder (delete that export first).

Before the records go, inside the same transaction and with the run's row locked, the `on_run_delete`
hooks are called with the run: the quotas app registers one that keeps the GPU-hours the run and its
evaluations held in each month (rlstudio.quotas counts a month's GPU-hours from the jobs' records), so
deleting a run never gives its owner's budget back. A hook that raises rolls the deletion back.

What goes, in one transaction: the run's row and, by their foreign keys (on_delete CASCADE), its
events, metric rows, samples, memory points, retention and ingest counts, alert rules, alert state,
alert firings and notifications, evaluations (and their samples), exports, sharing rows; its
playground sessions (those whose targets name the run: they hold its id in JSON, not a foreign key)
are deleted with it. Runs cloned or resumed from it stay (their `parent` is set to NULL; a resumed
run keeps `parent_kind` and `resume_from` as a record of where it started). The audit log keeps its
events, `run.delete` among them. After the commit, the run's folder (`launch.run_folder`, from the
run's record, never user input) is removed only when it is a real folder inside the platform's
RUNS_DIR, no link followed (`runs.folders.remove_tree_inside`); a folder that could not be removed
is logged and reported as a `run.delete_folder_left` audit event, never an error for the caller.
The run's open websockets are told (the `on_access_changed` hooks) and close with 4403.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from django.apps import apps
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record

from ..errors import RunRefused
from ..models import TERMINAL_STATUSES, Run
from .sharing import _access_changed, check_can_manage

log = logging.getLogger(__name__)

# Statuses of a run's evaluations, exports and playground sessions that hold a job or a worker.
_ACTIVE_JOB_STATUSES = ("queued", "running")

_DELETE_HOOKS: list[Callable[[Run], None]] = []


def on_run_delete(hook: Callable[[Run], None]) -> Callable[[Run], None]:
    """Register `hook(run)`, called inside `run_delete`'s transaction with the run (its row locked)
    before its records are deleted (an app keeping what it needs of them: the quotas app, its GPU-hours).
    An exception from a hook aborts the deletion."""
    if hook not in _DELETE_HOOKS:
        _DELETE_HOOKS.append(hook)
    return hook


def _sessions_of(run: Run):
    """The playground sessions whose targets name `run` (a checkpoint target: {"run": id})."""
    session = apps.get_model("playground", "PlaygroundSession")
    return session.objects.filter(targets__contains=[{"run": run.pk}])


def delete_refusal(run: Run) -> str:
    """'' when `run` may be deleted now, else why not and what to do first (one sentence)."""
    if run.status not in TERMINAL_STATUSES:
        what = "cancel it with Stop" if run.status == "queued" else "stop it"
        return (f"the run is {run.status}: {what} first; only a finished run (stopped, succeeded, failed or "
                "lost) can be deleted")
    child = (run.children.filter(parent_kind=Run.ParentKind.RESUME).exclude(status__in=TERMINAL_STATUSES)
             .order_by("pk").first())
    if child is not None:
        return (f"run “{child.name}” (#{child.pk}) resumes from this run's checkpoint and is {child.status}: "
                "stop it or let it finish first")
    for related, what in ((run.evaluations, "evaluation"), (run.exports, "export")):
        job = related.filter(status__in=_ACTIVE_JOB_STATUSES).order_by("pk").first()
        if job is not None:
            return f"{what} #{job.pk} of the run is {job.status}: stop it or let it finish first"
    session = _sessions_of(run).filter(status__in=_ACTIVE_JOB_STATUSES).order_by("pk").first()
    if session is not None:
        return f"playground session #{session.pk} on the run's checkpoints is {session.status}: stop it first"
    model = run.exported_models.order_by("pk").first()
    if model is not None:
        return (f"model “{model.name}” in the catalog was exported from this run and its files are in the run's "
                "folder: delete that export (or the model) first")
    return ""


def run_delete(*, run: Run, by: AbstractBaseUser) -> None:
    """Delete `run` (owner or staff; a finished run only, RunRefused otherwise: `delete_refusal`):
    its records in one transaction, audited as `run.delete`, after the `on_run_delete` hooks, then its
    folder once that commits."""
    from .. import launch

    check_can_manage(user=by, run=run, action="delete")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        refusal = delete_refusal(locked)
        if refusal:
            raise RunRefused(refusal)
        run_id, folder, root = locked.pk, launch.run_folder(locked), launch.runs_dir()
        children = list(locked.children.order_by("pk").values_list("pk", flat=True))
        sessions = _sessions_of(locked)
        audit_record(actor=by, action="run.delete", obj=locked, data={
            "name": locked.name, "owner": locked.owner.get_username(), "status": locked.status,
            "step": locked.step, "children": children, "playground_sessions": list(sessions.values_list("pk", flat=True)),
        })
        for hook in list(_DELETE_HOOKS):
            hook(locked)
        sessions.delete()
        locked.delete()
        transaction.on_commit(lambda: _after_delete(run_id, folder, root))


def _after_delete(run_id: int, folder: Path, root: Path) -> None:
    """Once the delete has committed: close the run's sockets, remove its folder (never raises)."""
    _access_changed(run_id)
    try:
        remove_run_folder(run_id, folder, root)
    except Exception:  # the records are gone; a folder left behind is reported, never the caller's error
        log.exception("run %s: its folder %s could not be removed", run_id, folder)
        _report_left(run_id, folder, "error")


def remove_run_folder(run_id: int, folder: Path, root: Path) -> bool:
    """Remove a deleted run's folder when it is a real folder named after the run inside `root` (the
    platform's RUNS_DIR), no link followed; True when nothing of it is left. A folder that is not the
    run's own (a link, elsewhere) is left alone and reported, as is one that could not be removed."""
    from ..folders import remove_tree_inside

    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return True
    if folder.name != str(run_id) or not remove_tree_inside(folder, root):
        log.warning("run %s: folder %s is not a folder inside %s: left alone", run_id, folder, root)
        _report_left(run_id, folder, "not the run's own folder inside RUNS_DIR")
        return False
    if folder.exists():
        log.error("run %s: folder %s could not be removed completely", run_id, folder)
        _report_left(run_id, folder, "could not be removed completely")
        return False
    return True


def _report_left(run_id: int, folder: Path, why: str) -> None:
    try:
        audit_record(actor=None, action="run.delete_folder_left", data={"run": run_id, "folder": str(folder),
                                                                          "why": why})
    except Exception:
        log.exception("run %s: could not record that its folder was left", run_id)


__all__ = ["delete_refusal", "on_run_delete", "remove_run_folder", "run_delete"]
