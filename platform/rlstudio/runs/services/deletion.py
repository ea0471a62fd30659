"""Deleting a finished run: its records, everything hanging off them, and its own folder on disk.

Who: the run's owner or staff (`check_can_manage`; RunNotPermitted, a 403, for a user it is shared
with). When: only a finished run (stopped, succeeded, failed, lost); anything else is a RunRefused
(409) naming what to do first:
  * a queued, submitting, running or stopping run: stop it first (Stop cancels a queued run at once,
    and a queued run may be admitted and submitted at any moment: only a finished run is deleted);
  * a run resumed or forked from it that has not finished: it starts from a checkpoint in this run's
    folder;
  * an evaluation or an export of the run still queued or running, or what an `on_run_delete_refusal`
    check says (the playground's: a session on the run's checkpoints still queued or running);
  * a catalog model exported from it: its files are in the run's folder (delete that export first).

Before the records go, inside the same transaction and with the run's row locked, the `on_run_delete`
hooks are called with the run: the quotas app registers one that keeps the GPU-hours the run and its
evaluations held in each month (rlstudio.quotas counts a month's GPU-hours from the jobs' records), so
deleting a run never gives its owner's budget back; the playground registers one that deletes the
sessions on the run's checkpoints (they name it in JSON, not by a foreign key). A hook that raises
rolls the deletion back.

What goes, in one transaction: the run's row and, by their foreign keys (on_delete CASCADE), its
events, metric rows, samples, memory points, retention and ingest counts, alert rules, alert state,
alert firings and notifications, evaluations (and their samples), exports, sharing rows; and its
playground sessions, by the playground's hook. Runs cloned, resumed or forked from it stay (their `parent`
is set to NULL; a resumed or forked run keeps `parent_kind` and `resume_from` as a record of where it
started). The audit log keeps its
events, `run.delete` among them. After the commit, the run's folder (`launch.run_folder`, from the
run's record, never user input) is removed only when it is a real folder inside the platform's
RUNS_DIR, no link followed (`runs.folders.remove_tree_inside`); a folder that could not be removed
is logged and reported as a `run.delete_folder_left` audit event, never an error for the caller.
The run's open websockets are told (the `on_access_changed` hooks) and close with 4403.

Many at once (`runs_delete`: the API's bulk-delete, the runs list's Delete selected): all or none. The
ids (1 to RLSTUDIO_RUNS_BULK_DELETE_MAX, distinct) are locked and checked first; any run the user does
not see (told apart from a missing one by nothing), only reads, or that `delete_refusal` refuses makes
it delete nothing and name every such run (RunsNotDeleted); otherwise every owner whose admission lock
the deletions take (the runs' and their evaluations') is locked in id order, then each run goes through
the single delete's deletion (`_delete_locked`) in one transaction, so a bulk delete keeps GPU-hours,
audits and removes folders as single ones do.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from rlstudio.accounts.services import audit_record

from ..errors import DeleteRefusal, RunInputInvalid, RunRefused, RunsNotDeleted
from ..models import TERMINAL_STATUSES, Run
from .sharing import _access_changed, check_can_manage

log = logging.getLogger(__name__)

# Statuses of a run's evaluations and exports that hold a job or a worker.
_ACTIVE_JOB_STATUSES = ("queued", "running")

_DELETE_HOOKS: list[Callable[[Run], None]] = []


def on_run_delete(hook: Callable[[Run], None]) -> Callable[[Run], None]:
    """Register `hook(run)`, called inside `run_delete`'s transaction with the run (its row locked)
    before its records are deleted (an app keeping what it needs of them: the quotas app, its GPU-hours).
    An exception from a hook aborts the deletion."""
    if hook not in _DELETE_HOOKS:
        _DELETE_HOOKS.append(hook)
    return hook


_DELETE_REFUSALS: list[Callable[[Run], str]] = []


def on_run_delete_refusal(check: Callable[[Run], str]) -> Callable[[Run], str]:
    """Register `check(run)`: '' when the registering app has nothing live on `run`, else why the run
    cannot be deleted now and what to do first (one sentence, `delete_refusal`'s). An app whose records
    name a run without a foreign key (the playground: its sessions hold run ids in JSON) registers one
    from its AppConfig.ready, so the runs app never reaches into it."""
    if check not in _DELETE_REFUSALS:
        _DELETE_REFUSALS.append(check)
    return check


def delete_refusal(run: Run) -> str:
    """'' when `run` may be deleted now, else why not and what to do first (one sentence)."""
    if run.status not in TERMINAL_STATUSES:
        what = "cancel it with Stop" if run.status == "queued" else "stop it"
        return (f"the run is {run.status}: {what} first; only a finished run (stopped, succeeded, failed or "
                "lost) can be deleted")
    child = (run.children.filter(parent_kind__in=(Run.ParentKind.RESUME, Run.ParentKind.FORK))
             .exclude(status__in=TERMINAL_STATUSES).order_by("pk").first())
    if child is not None:
        how = "is forked from" if child.parent_kind == Run.ParentKind.FORK else "resumes from"
        return (f"run “{child.name}” (#{child.pk}) {how} this run's checkpoint and is {child.status}: "
                "stop it or let it finish first")
    for related, what in ((run.evaluations, "evaluation"), (run.exports, "export")):
        job = related.filter(status__in=_ACTIVE_JOB_STATUSES).order_by("pk").first()
        if job is not None:
            return f"{what} #{job.pk} of the run is {job.status}: stop it or let it finish first"
    for check in list(_DELETE_REFUSALS):
        why = check(run)
        if why:
            return why
    model = run.exported_models.order_by("pk").first()
    if model is not None:
        return (f"model “{model.name}” in the catalog was exported from this run and its files are in the run's "
                "folder: delete that export (or the model) first")
    return ""


def run_delete(*, run: Run, by: AbstractBaseUser) -> None:
    """Delete `run` (owner or staff; a finished run only, RunRefused otherwise: `delete_refusal`):
    its records in one transaction, audited as `run.delete`, after the `on_run_delete` hooks, then its
    folder once that commits."""
    check_can_manage(user=by, run=run, action="delete")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        refusal = delete_refusal(locked)
        if refusal:
            raise RunRefused(refusal)
        _delete_locked(locked, by=by)


def _delete_locked(locked: Run, *, by: AbstractBaseUser) -> None:
    """The deletion itself, of a run whose row the caller's transaction locked and checked (may
    manage, `delete_refusal` empty): the audit, the `on_run_delete` hooks, the records, and the
    folder and sockets once the transaction commits."""
    from .. import launch

    run_id, folder, root = locked.pk, launch.run_folder(locked), launch.runs_dir()
    children = list(locked.children.order_by("pk").values_list("pk", flat=True))
    audit_record(actor=by, action="run.delete", obj=locked, data={
        "name": locked.name, "owner": locked.owner.get_username(), "status": locked.status,
        "step": locked.step, "children": children,
    })
    for hook in list(_DELETE_HOOKS):
        hook(locked)
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


# ------------------------------------------------------------------ bulk delete
def bulk_delete_max() -> int:
    """The most runs one bulk delete takes (the RLSTUDIO_RUNS_BULK_DELETE_MAX setting)."""
    return int(settings.RLSTUDIO_RUNS_BULK_DELETE_MAX)


def clean_run_ids(ids) -> list[int]:
    """A bulk delete's ids as given, checked: a list of 1 to `bulk_delete_max()` distinct positive
    integers (RunInputInvalid on `ids` otherwise, saying what is wrong)."""
    if not isinstance(ids, list):
        raise RunInputInvalid("ids must be a list of run ids", field="ids")
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RunInputInvalid(f"ids must be positive integers, got {str(value)[:40]!r}", field="ids")
    if not ids:
        raise RunInputInvalid("ids is empty: give at least one run id", field="ids")
    limit = bulk_delete_max()
    if len(ids) > limit:
        raise RunInputInvalid(f"at most {limit} runs at once, got {len(ids)}", field="ids")
    seen: set[int] = set()
    for value in ids:
        if value in seen:
            raise RunInputInvalid(f"run id {value} is given twice", field="ids")
        seen.add(value)
    return list(ids)


def bulk_delete_refusals(*, run_ids: list[int], by: AbstractBaseUser, runs: dict[int, Run] | None = None
                         ) -> list[DeleteRefusal]:
    """Why each of `run_ids` that `by` may not delete now cannot be, in the order given ([] when all
    can): `not_found` for a run `by` does not see (or that does not exist: the two read the same),
    `permission_denied` for one shared with them read-only, `conflict` with `delete_refusal`'s reason
    for a live run or one something still needs. `runs`: the runs already read (locked), by id."""
    from ..selectors import can_manage, visible_runs

    if runs is None:
        runs = {r.pk: r for r in Run.objects.select_related("owner").filter(pk__in=run_ids)}
    visible = set(visible_runs(Run.objects.filter(pk__in=list(runs)), user=by).values_list("pk", flat=True))
    refusals = []
    for run_id in run_ids:
        run = runs.get(run_id)
        if run is None or run_id not in visible:
            refusals.append(DeleteRefusal(run_id, "not_found", f"no run with id {run_id}"))
        elif not can_manage(user=by, run=run):
            refusals.append(DeleteRefusal(run_id, "permission_denied", (
                f"run “{run.name}” is shared with you read-only: only its owner ({run.owner.get_username()}) "
                "or staff can delete it")))
        elif reason := delete_refusal(run):
            refusals.append(DeleteRefusal(run_id, "conflict", f"run “{run.name}”: {reason}"))
    return refusals


def _lock_owners(run_ids: list[int]) -> None:
    """Take, in id order, the admission lock (`QuotaPolicy.lock_owner`) of every user whose lock the
    deletions of `run_ids` take: the runs' owners and the owners of their evaluations (whose GPU-hours
    the `on_run_delete` ledger hook keeps under their owner's lock). Each single delete orders the
    owners of its own run only, so without this a bulk delete would take them in the order the ids
    were given, and deadlock with a delete (or a launch) that takes them in id order."""
    from .queue_registry import quota_policy

    pairs = Run.objects.filter(pk__in=run_ids).values_list("owner_id", "evaluations__owner_id")
    quota_policy().lock_owners(user_ids={owner for pair in pairs for owner in pair if owner is not None})


def runs_delete(*, run_ids, by: AbstractBaseUser) -> list[tuple[int, str]]:
    """Delete the runs `run_ids` (`clean_run_ids`' rules), all of them or none, in one transaction:
    their rows are locked (in id order) and checked first (`bulk_delete_refusals`); any run `by` may not
    delete now raises RunsNotDeleted naming every such run, deleting nothing. Then every owner involved
    is locked, in id order (`_lock_owners`), before any run is deleted. Each run then goes through
    the single delete's deletion (`_delete_locked`), so the hooks (GPU-hours kept), the audit
    (`run.delete` per run), the folders and the websockets are exactly a single delete's; a hook that
    raises rolls all of them back. Returns the (id, name) of the deleted runs, in the order given."""
    run_ids = clean_run_ids(run_ids)
    with transaction.atomic():
        runs = {r.pk: r for r in Run.objects.select_for_update(of=("self",)).select_related("owner")
                .filter(pk__in=run_ids).order_by("pk")}
        refusals = bulk_delete_refusals(run_ids=run_ids, by=by, runs=runs)
        if refusals:
            raise RunsNotDeleted(refusals, total=len(run_ids))
        _lock_owners(run_ids)
        done = []
        for run_id in run_ids:  # each locked and checked above, as `run_delete` does for one
            _delete_locked(runs[run_id], by=by)
            done.append((run_id, runs[run_id].name))
    return done


__all__ = ["bulk_delete_max", "bulk_delete_refusals", "clean_run_ids", "delete_refusal", "on_run_delete",
           "on_run_delete_refusal", "remove_run_folder", "run_delete", "runs_delete"]
