"""Reads of exports: through the run, so whoever may read a run (owner, shared readers, staff:
`rlstudio.runs.selectors.run_get_for`) sees its exports, and nobody else (404). A failed export's
`error` (its reason, no server paths) is every reader's; its `error_log` (the error as it was, the
traceback) only the run's owner's and staff's (`export_error_log_for`)."""
from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from rlstudio.runs.selectors import can_manage

from .models import Export


def export_list_for(*, user, run_id) -> tuple[object, QuerySet[Export]]:
    """(the visible run, its exports newest first); Http404 for a run the user may not read."""
    from rlstudio.runs.selectors import run_get_for

    run = run_get_for(user=user, run_id=run_id)
    return run, Export.objects.filter(run=run).select_related("owner", "model", "run")


def export_get_for(*, user, run_id, export_id) -> Export:
    """One export of a visible run, or Http404."""
    _run, qs = export_list_for(user=user, run_id=run_id)
    try:
        export = qs.filter(pk=export_id).first()
    except (TypeError, ValueError):
        export = None
    if export is None:
        raise Http404("Not found")
    return export


def export_error_log_for(*, user, export: Export) -> str:
    """`export`'s error log (the error as it was and its traceback: they name server paths) for the
    run's owner and staff (`rlstudio.runs.selectors.can_manage`); "" for a reader of the run."""
    return export.error_log if can_manage(user=user, run=export.run) else ""
