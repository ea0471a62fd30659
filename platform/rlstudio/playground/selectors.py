"""Reads of the playground, narrowed to what the user may use: catalog models they see (own, shared,
all for staff: `catalog.selectors`), checkpoints of runs they see (owner, shared readers, staff:
`runs.selectors`) found only in the run's own folder, and their own sessions (staff: all)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.http import Http404
from django.utils import timezone

from .models import ACTIVE_SESSION_STATUSES, PlaygroundSession, SessionStatus

PAGE_RUNS = 30  # runs whose checkpoints the page offers (the newest the user sees)
QUEUE_MAX_S = 120  # a session no worker started within this is not started (its page has long given up)


def stale_q(now=None) -> Q:
    """Active sessions no worker will end: queued past QUEUE_MAX_S (no worker took it), running past
    the time limit (RLSTUDIO_PLAYGROUND_MAX_S) plus a minute (its worker died)."""
    now = now or timezone.now()
    return (Q(status=SessionStatus.QUEUED, created__lt=now - timedelta(seconds=QUEUE_MAX_S))
            | Q(status=SessionStatus.RUNNING,
                started__lt=now - timedelta(seconds=int(settings.RLSTUDIO_PLAYGROUND_MAX_S) + 60)))


def session_get_for(*, user, session_id) -> PlaygroundSession:
    """The user's own session (any for staff), or Http404."""
    qs = PlaygroundSession.objects.select_related("owner")
    if not getattr(user, "is_authenticated", False):
        raise Http404("Not found")
    if not user.is_staff:
        qs = qs.filter(owner=user)
    try:
        session = qs.filter(pk=session_id).first()
    except (TypeError, ValueError):
        session = None
    if session is None:
        raise Http404("Not found")
    return session


def session_targets_visible(*, user, session: PlaygroundSession) -> bool:
    """Whether `user` may still use every target `session` answers from: read every run whose
    checkpoint it is (owner, shared readers, staff: `runs.selectors.visible_runs`) and see every
    catalog model still in the catalog (own, shared, staff: `catalog.selectors`), so a run or a
    model no longer shared with them ends their socket."""
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.catalog.selectors import model_asset_list_for
    from rlstudio.runs.models import Run
    from rlstudio.runs.selectors import visible_runs

    targets = [t for t in session.targets if isinstance(t, dict)]
    runs = {t["run"] for t in targets if isinstance(t.get("run"), int)}
    models = {t["model"] for t in targets if isinstance(t.get("model"), int)}
    if runs and visible_runs(Run.objects.filter(pk__in=runs), user=user).count() != len(runs):
        return False
    if not models:
        return True
    seen = model_asset_list_for(user=user).filter(pk__in=models).values("pk")
    return not ModelAsset.objects.filter(pk__in=models).exclude(pk__in=seen).exists()  # a deleted one hides nothing


def checkpoint_steps(run) -> dict[int, Path]:
    """The run's committed step folders, by step (read from the run's own folder only)."""
    from rlstudio.runs.checkpoints import checkpoint_steps as steps

    return steps(run)


def visible_model(*, user, model_id):
    """A catalog model the user may use, or Http404."""
    from rlstudio.catalog.selectors import model_asset_get_for

    return model_asset_get_for(user=user, model_id=model_id)


def visible_run(*, user, run_id):
    """A run the user may read (its checkpoints with it), or Http404."""
    from rlstudio.runs.selectors import run_get_for

    return run_get_for(user=user, run_id=run_id)


@dataclass(frozen=True)
class TargetOption:
    value: str  # "model:<id>" or "run:<id>:<step>" (what the page's select sends)
    label: str


def model_target(model_id: int) -> str:
    """The picker's value for a catalog model (also what /playground/?target= takes)."""
    return f"model:{int(model_id)}"


def checkpoint_target(run_id: int, step: int) -> str:
    """The picker's value for a run's checkpoint (also what /playground/?target= takes)."""
    return f"run:{int(run_id)}:{int(step)}"


def _model_option(m, *, exported: bool = False) -> TargetOption:
    """A catalog model's option; an export of a run's checkpoint says so, as its name ("<run> (run N,
    step S)") reads much like that checkpoint's own option in the other group."""
    return TargetOption(model_target(m.pk), f"{m.name} (exported)" if exported else m.name)


def _exported_ids(models: list) -> set[int]:
    """Which of these catalog models came out of a run: an export of one of its checkpoints, or its
    final export (registered by the run itself, source run_export)."""
    from rlstudio.catalog.models import ModelAsset
    from rlstudio.exports.models import Export

    ids = [m.pk for m in models]
    found = set(Export.objects.filter(model_id__in=ids).values_list("model_id", flat=True)) if ids else set()
    return found | {m.pk for m in models if m.source == ModelAsset.Source.RUN_EXPORT}


def _checkpoint_option(run, step: int) -> TargetOption:
    return TargetOption(checkpoint_target(run.pk, step), f"{run.name} (#{run.pk}) step {step}")


def target_options_for(*, user) -> dict[str, list[TargetOption]]:
    """What the page offers: {"models": [...], "checkpoints": [...]} (the newest PAGE_RUNS runs the user
    sees that have a checkpoint, newest step first)."""
    from rlstudio.catalog.selectors import model_asset_list_for
    from rlstudio.runs.selectors import visible_runs
    from rlstudio.runs.models import Run

    assets = [m for m in model_asset_list_for(user=user)[:100]
              if getattr(m, "kind", "policy") != "reward"]  # a reward model scores, it does not chat
    exported = _exported_ids(assets)
    models = [_model_option(m, exported=m.pk in exported) for m in assets]
    checkpoints = []
    runs = visible_runs(Run.objects.select_related("owner"), user=user).order_by("-created", "-id")[:PAGE_RUNS]
    for run in runs:
        for step in sorted(checkpoint_steps(run), reverse=True):
            checkpoints.append(_checkpoint_option(run, step))
    return {"models": models, "checkpoints": checkpoints}


TARGET_RE = re.compile(r"model:([1-9][0-9]{0,17})|run:([1-9][0-9]{0,17}):(0|[1-9][0-9]{0,8})")


def target_option_for(*, user, value: str) -> tuple[str, TargetOption] | None:
    """A target named by the page's `?target=` ("model:<id>" or "run:<id>:<step>"), as ("models" or
    "checkpoints", its option), when the user may use it: a policy model they see, a committed checkpoint
    of a run they may read; None for anything else (malformed, unknown, not theirs to see, a reward model,
    no such step). The query only chooses among what the server would offer; it is never trusted."""
    m = TARGET_RE.fullmatch(value or "")
    if m is None:
        return None
    try:
        if m.group(1):
            model = visible_model(user=user, model_id=int(m.group(1)))
            if getattr(model, "kind", "policy") == "reward":
                return None
            return "models", _model_option(model, exported=bool(_exported_ids([model])))
        run, step = visible_run(user=user, run_id=int(m.group(2))), int(m.group(3))
    except Http404:
        return None
    if step not in checkpoint_steps(run):
        return None
    return "checkpoints", _checkpoint_option(run, step)


def sessions_on(*, model_id: int | None = None, run_id: int | None = None):
    """The sessions one of whose targets is catalog model `model_id`, or a checkpoint of run `run_id`
    (targets name them by id in JSON, no foreign key)."""
    target = {"model": model_id} if model_id is not None else {"run": run_id}
    return PlaygroundSession.objects.filter(targets__contains=[target])


def _live_session_on(**target) -> PlaygroundSession | None:
    """The first active session on the target that a worker may still end (a stale one never blocks)."""
    return sessions_on(**target).filter(status__in=ACTIVE_SESSION_STATUSES).exclude(stale_q()).order_by("pk").first()


def model_delete_refusal(model) -> str:
    """'' unless a queued or running session answers from catalog model `model`, else why it cannot be
    deleted: the catalog's `on_model_delete_refusal` check (registered in apps.py)."""
    session = _live_session_on(model_id=model.pk)
    if session is None:
        return ""
    return f"is answering in playground session #{session.pk} ({session.status}): stop it first"


def run_delete_refusal(run) -> str:
    """'' unless a queued or running session answers from a checkpoint of `run`, else why it cannot be
    deleted: the runs app's `on_run_delete_refusal` check (registered in apps.py)."""
    session = _live_session_on(run_id=run.pk)
    if session is None:
        return ""
    return f"playground session #{session.pk} on the run's checkpoints is {session.status}: stop it first"
