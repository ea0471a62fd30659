"""Reads of evaluations. A run's: through the run, so whoever may read a run (owner, shared readers,
staff: `rlstudio.runs.selectors.run_get_for`) reads its evaluations, and nobody else. A catalog
model's: through the model (one the user may see: `rlstudio.catalog.selectors.model_asset_get_for`),
and then only the user's own evaluations of it (staff: all): another user's evaluation of a shared
model shows their dataset's prompts, which may be private.

A failed evaluation's `error` (its reason, no server paths) is every reader's; its `error_log` (the
job log's tail, the error as it was) only its managers' (`can_manage_evaluation`)."""
from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from rlstudio.runs.selectors import can_manage

from .models import Evaluation, EvaluationSample


def evaluation_list_for(*, user, run_id) -> tuple[object, QuerySet[Evaluation]]:
    """(the visible run, its evaluations newest first); Http404 for a run the user may not read."""
    from rlstudio.runs.selectors import run_get_for

    run = run_get_for(user=user, run_id=run_id)
    return run, Evaluation.objects.filter(run=run).select_related("dataset", "owner", "run")


def evaluation_get_for(*, user, run_id, evaluation_id) -> Evaluation:
    """One evaluation of a visible run, or Http404."""
    _run, qs = evaluation_list_for(user=user, run_id=run_id)
    try:
        ev = qs.filter(pk=evaluation_id).first()
    except (TypeError, ValueError):
        ev = None
    if ev is None:
        raise Http404("Not found")
    return ev


def model_evaluation_list_for(*, user, model_id) -> tuple[object, QuerySet[Evaluation]]:
    """(the visible catalog model, the user's evaluations of it, all for staff, newest first);
    Http404 for a model the user may not see."""
    from rlstudio.catalog.selectors import model_asset_get_for

    model = model_asset_get_for(user=user, model_id=model_id)
    return model, model_evaluations_of(user=user, model=model)


def model_evaluations_of(*, user, model) -> QuerySet[Evaluation]:
    """The user's evaluations of `model`, a catalog model already read through the catalog's selector
    (staff: everyone's)."""
    qs = Evaluation.objects.filter(model=model).select_related("dataset", "owner", "model")
    return qs if user.is_staff else qs.filter(owner=user)


def model_evaluation_get_for(*, user, model_id, evaluation_id) -> Evaluation:
    """One of the user's evaluations of a visible model (staff: anyone's), or Http404."""
    _model, qs = model_evaluation_list_for(user=user, model_id=model_id)
    try:
        ev = qs.filter(pk=evaluation_id).first()
    except (TypeError, ValueError):
        ev = None
    if ev is None:
        raise Http404("Not found")
    return ev


def can_manage_evaluation(*, user, ev: Evaluation) -> bool:
    """Whether `user` manages `ev` (stops and deletes it, reads its error log): of a run, the run's
    owner or staff (`rlstudio.runs.selectors.can_manage`); of a catalog model, the evaluation's owner
    or staff."""
    if not getattr(user, "is_authenticated", False):
        return False
    if ev.run_id is not None:
        return can_manage(user=user, run=ev.run)
    return bool(user.is_staff or ev.owner_id == user.pk)


def evaluation_error_log_for(*, user, ev: Evaluation) -> str:
    """`ev`'s error log (the failed job's log tail, the error as it was: they name server paths) for
    its managers; "" for anyone else (a reader of the run)."""
    return ev.error_log if can_manage_evaluation(user=user, ev=ev) else ""


def evaluation_queue_reason_for(*, user, ev: Evaluation) -> str:
    """Why queued `ev` waits, as `user` may read it: as stored for its managers; for a reader of the
    run, one naming the owner's team says only that a team quota of the owner's holds it
    (`runs.queue.reason_for_reader`)."""
    from rlstudio.runs.queue import reason_for_reader

    return ev.queue_reason if can_manage_evaluation(user=user, ev=ev) else reason_for_reader(ev.queue_reason)


def evaluation_samples_for(*, ev: Evaluation, prompt: int, column: str) -> QuerySet[EvaluationSample]:
    """The samples of one cell (a prompt and a column) of an evaluation already read through
    `evaluation_get_for`, in sample order."""
    return EvaluationSample.objects.filter(evaluation=ev, prompt=prompt, column=column).order_by("sample")
