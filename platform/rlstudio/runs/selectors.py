"""Reads of the runs app, always narrowed to what the user may see.

A run is seen by its owner, by staff, by the users it is shared with, by the users its project is
shared with, by the members of a team it or its project is shared with (members at the time of the
request) and, when its visibility is `everyone`, by every signed-in user (`visible_runs`); anyone
else gets a 404, exactly as for a run that does not exist. Seeing is reading only: who may control a run (stop, resume, clone, edit its
tags and note, share it) is `can_manage`'s answer, the owner and staff.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import (
    Case,
    CharField,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    When,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Cast, Coalesce, Now
from django.db.models.lookups import Exact
from django.http import Http404

from rlstudio.accounts.teams import team_ids_subquery
from rlstudio.ownership import get_visible_or_404, owned_by_or_staff

from .models import Run, RunConfig, RunVisibility


def _with_latest_metrics(queryset: QuerySet[Run]) -> QuerySet[Run]:
    """Annotate `latest_metrics`: the metrics JSON of the run's highest step (None before any).

    The metric rows are telemetry's; they are reached through the run's own reverse relation
    (`metric_rows`), so that runs does not import telemetry (which depends on runs)."""
    metric_row = Run._meta.get_field("metric_rows").related_model
    latest = metric_row.objects.filter(run=OuterRef("pk")).order_by("-step").values("metrics")[:1]
    return queryset.annotate(latest_metrics=Subquery(latest, output_field=JSONField()))


def _shared_with(user: AbstractBaseUser) -> Q:
    """The runs shared with `user` by name or with a team they are in (read when the query runs:
    joining a team gives its shares, leaving takes them away): the run itself, or the project it is in.
    (The projects app's share rows are reached through `Run.project`'s model, so that runs does not
    import projects; all are read as subqueries, so no run comes twice.)"""
    teams = team_ids_subquery(user)
    shared = Run.shared_with.through.objects.filter(user_id=user.pk).values("run_id")
    team_shared = Run.shared_with_teams.through.objects.filter(group_id__in=teams).values("run_id")
    return Q(pk__in=shared) | Q(pk__in=team_shared) | Q(project_id__in=_project_ids_shared_with_q(user))


def _project_ids_shared_with_q(user: AbstractBaseUser) -> QuerySet:
    """A subquery of the ids of the projects shared with `user`, by name or with a team they are in."""
    project_model = Run._meta.get_field("project").related_model
    by_name = project_model.shared_with.through.objects.filter(user_id=user.pk).values("project_id")
    by_team = project_model.shared_with_teams.through.objects.filter(group_id__in=team_ids_subquery(user))
    return project_model.objects.filter(Q(pk__in=by_name) | Q(pk__in=by_team.values("project_id"))).values("pk")


def project_ids_shared_with(user: AbstractBaseUser) -> set[int]:
    """The ids of the projects shared with `user`, by name or with one of their teams (whose name they
    may read on a run)."""
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(_project_ids_shared_with_q(user).values_list("pk", flat=True))


def run_project_for(*, user: AbstractBaseUser, run: Run, shared_projects: set[int] | None = None) -> dict | None:
    """{"id", "name"} of `run`'s project when `user` may see that project (the run's owner, staff, or
    a user the project is shared with; `shared_projects`: `project_ids_shared_with(user)`, read once
    for a list), else None: a run shared with a user by name does not show them the owner's project."""
    if run.project_id is None:
        return None
    if not can_manage(user=user, run=run):
        if shared_projects is None:
            shared_projects = project_ids_shared_with(user)
        if run.project_id not in shared_projects:
            return None
    return {"id": run.project_id, "name": run.project.name}


def project_choices_of(owner) -> list[tuple[int, str]]:
    """(id, name) of the projects `owner` owns, by name: where a run of theirs may go (the launch
    form's picker, the run page's move control)."""
    if owner is None or not getattr(owner, "pk", None):
        return []
    projects = Run._meta.get_field("project").related_model.objects.filter(owner_id=owner.pk)
    return list(projects.order_by("name", "id").values_list("id", "name"))


def visible_runs(queryset: QuerySet[Run], *, user: AbstractBaseUser) -> QuerySet[Run]:
    """`queryset` narrowed to the runs `user` may read: their own, the ones shared with them (by name, with
    a team they are in, or through their project's share) or with everyone; every run for staff; none
    for an anonymous user."""
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    if user.is_staff:
        return queryset
    return queryset.filter(Q(owner=user) | Q(visibility=RunVisibility.EVERYONE) | _shared_with(user))


def can_manage(*, user: AbstractBaseUser, run: Run) -> bool:
    """True when `user` controls `run` (stop, resume, clone, tags and note, sharing): its owner or staff."""
    return bool(getattr(user, "is_authenticated", False) and (user.is_staff or run.owner_id == user.pk))


def run_config_for(*, user: AbstractBaseUser, run: Run) -> dict:
    """`run`'s frozen config as `user` may see it: whole for its owner and staff (`can_manage`); for a
    reader (shared by name or with everyone) `gate.user_view`'s, the platform's keys (dataset files,
    model and reward paths, the run's folder, ...) reset to the schema's defaults."""
    if can_manage(user=user, run=run):
        return run.config
    from .gate.changes import user_view

    return user_view(run.config or {})


def run_configs_comparable_for(*, user: AbstractBaseUser, runs: Sequence[Run]) -> list[dict]:
    """The frozen configs of `runs` for a side-by-side diff: whole when `user` manages every one;
    otherwise every one as `gate.user_view` gives it, so that a key the platform sets (hidden on a
    run the user only reads) is never reported as differing from the user's own run."""
    if all(can_manage(user=user, run=r) for r in runs):
        return [r.config for r in runs]
    from .gate.changes import user_view

    return [user_view(r.config or {}) for r in runs]


def run_checkpoint_for(*, user: AbstractBaseUser, run: Run) -> str:
    """`run`'s last checkpoint path (in the run's own folder) for its owner and staff; "" for a reader."""
    return run.checkpoint_path if can_manage(user=user, run=run) else ""


def run_error_log_for(*, user: AbstractBaseUser, run: Run) -> str:
    """`run`'s error log (a failed run's job log tail or traceback, which name server paths) for its
    owner and staff; "" for a reader."""
    return run.error_log if can_manage(user=user, run=run) else ""


def run_queue_reason_for(*, user: AbstractBaseUser, run: Run) -> str:
    """Why queued `run` waits, as `user` may read it: as stored for its owner and staff; for a reader,
    one that names the owner's team says only that a team quota of the owner's holds it
    (`queue.reason_for_reader`)."""
    from .queue import reason_for_reader

    return run.queue_reason if can_manage(user=user, run=run) else reason_for_reader(run.queue_reason)


def run_access(*, user: AbstractBaseUser, run: Run) -> str:
    """Why `user` sees `run`: "owner", "staff" (another user's run, with its controls) or "shared"
    (read-only: shared with them, with their team, through its project, or with everyone)."""
    if run.owner_id == getattr(user, "pk", None):
        return "owner"
    return "staff" if getattr(user, "is_staff", False) else "shared"


# What the runs list's `scope` filter keeps: every run the user sees, only their own, or only the
# ones others shared with them (with them by name, with their team, or with everyone).
RUN_SCOPES = ("", "mine", "shared")


@dataclass(frozen=True)
class RunFilter:
    """Filters of the runs list (the home page and GET /api/v1/runs/); None or "" = not filtered.

    `tag` keeps runs carrying that tag, `model` / `dataset` runs on that catalog id (`dataset` matches
    the validation dataset too), `q` a text in the name or the note (case-insensitive), `project` runs
    in that project (id)."""

    status: str | None = None
    tag: str | None = None
    model: int | None = None
    dataset: int | None = None
    q: str | None = None
    scope: str = ""
    project: int | None = None


def run_list_for(*, user: AbstractBaseUser, status: str | None = None,
                 flt: RunFilter | None = None) -> QuerySet[Run]:
    """Runs the user may see (`visible_runs`), newest first, with their latest metrics; narrowed by
    `status` and the filters of `flt`."""
    qs = visible_runs(Run.objects.select_related("owner", "dataset", "model", "val_dataset", "project"), user=user)
    flt = flt or RunFilter()
    status = status or flt.status
    if status:
        qs = qs.filter(status=status)
    if flt.tag:
        qs = qs.filter(tags__contains=[flt.tag])
    if flt.model is not None:
        qs = qs.filter(model_id=flt.model)
    if flt.dataset is not None:
        qs = qs.filter(Q(dataset_id=flt.dataset) | Q(val_dataset_id=flt.dataset))
    if flt.q:
        qs = qs.filter(Q(name__icontains=flt.q) | Q(note__icontains=flt.q))
    if flt.project is not None:
        qs = qs.filter(project_id=flt.project)
    if flt.scope == "mine":
        qs = qs.filter(owner=user)
    elif flt.scope == "shared":
        qs = qs.exclude(owner=user)
        if getattr(user, "is_staff", False):  # staff see every run; "shared" is still what was shared
            qs = qs.filter(Q(visibility=RunVisibility.EVERYONE) | _shared_with(user))
    return _with_latest_metrics(qs).order_by("-created", "-id")


def _latest_reward_expr():
    """The latest `critic/score/mean` of a queryset annotated by `_with_latest_metrics`, as a float
    (null when the latest step did not report a number)."""
    value = KeyTransform("critic/score/mean", "latest_metrics")
    kind = Func(value, function="jsonb_typeof", output_field=CharField())
    number = Cast(KeyTextTransform("critic/score/mean", "latest_metrics"), FloatField())
    return Case(When(Exact(kind, "number"), then=number), default=None, output_field=FloatField())


# ?sort= keys of the runs list (a leading "-": descending): what each orders by; a run without a value
# (no reward reported, not started) comes last either way.
RUN_SORTS = {
    "created": lambda: F("created"),
    "name": lambda: F("name"),
    "status": lambda: F("status"),
    "project": lambda: F("project__name"),
    "step": lambda: F("step"),
    "started": lambda: F("started"),
    "owner": lambda: F("owner__username"),
    "dataset": lambda: F("dataset__name"),
    "model": lambda: F("model__name"),
    "reward": _latest_reward_expr,
    "duration": lambda: ExpressionWrapper(Coalesce(F("finished"), Now()) - F("started"), output_field=DurationField()),
}


def runs_sorted(queryset: QuerySet[Run], sort: str) -> QuerySet[Run]:
    """`queryset` (from `run_list_for`) ordered by a RUN_SORTS key, `-key` descending, ties by id."""
    desc = sort.startswith("-")
    expr = RUN_SORTS[sort.lstrip("-")]()
    order = expr.desc(nulls_last=True) if desc else expr.asc(nulls_last=True)
    return queryset.order_by(order, "-id" if desc else "id")


def run_get_for(*, user: AbstractBaseUser, run_id) -> Run:
    """One visible run (with latest metrics), or Http404 (also for a malformed id)."""
    try:
        run = run_list_for(user=user).filter(pk=run_id).first()
    except (TypeError, ValueError):
        run = None
    if run is None:
        raise Http404("Not found")
    return run


def runs_get_for(*, user: AbstractBaseUser, run_ids: list[int]) -> list[Run]:
    """The visible runs `run_ids`, in that order; Http404 naming the first id the user may not see
    (or that does not exist: the two look the same)."""
    found = {r.pk: r for r in run_list_for(user=user).filter(pk__in=run_ids)}
    for run_id in run_ids:
        if run_id not in found:
            raise Http404(f"no run with id {run_id}")
    return [found[run_id] for run_id in run_ids]


def run_tags_for(*, user: AbstractBaseUser) -> list[str]:
    """Every tag on a run the user sees, sorted (the runs list's tag filter offers these)."""
    tags = (visible_runs(Run.objects.all(), user=user).annotate(tag=Func("tags", function="unnest"))
            .order_by().values_list("tag", flat=True).distinct())
    return sorted(set(tags), key=str.lower)


def run_filter_choices(*, user: AbstractBaseUser) -> dict[str, list]:
    """What the runs list's filters offer: the tags, models and datasets of the runs the user sees
    ({"tags": [...], "models": [(id, name)], "datasets": [(id, name)], "projects": [(id, label)]},
    sorted by name; the projects are the ones the user sees: their own, shared with them, every one for
    staff, another owner's labelled "name (owner)")."""
    runs = visible_runs(Run.objects.all(), user=user)
    models = set(runs.values_list("model_id", "model__name"))
    datasets = set(runs.values_list("dataset_id", "dataset__name"))
    datasets |= {d for d in runs.filter(val_dataset__isnull=False).values_list("val_dataset_id", "val_dataset__name")}
    by_name = lambda pair: (pair[1].lower(), pair[0])  # noqa: E731
    return {"tags": run_tags_for(user=user), "models": sorted(models, key=by_name),
            "datasets": sorted(datasets, key=by_name), "projects": _project_filter_choices(user)}


def _project_filter_choices(user: AbstractBaseUser) -> list[tuple[int, str]]:
    project_model = Run._meta.get_field("project").related_model
    projects = project_model.objects.select_related("owner").order_by("name", "id")
    if not getattr(user, "is_staff", False):
        projects = projects.filter(Q(owner_id=user.pk) | Q(pk__in=project_ids_shared_with(user)))
    return [(p.pk, p.name if p.owner_id == user.pk else f"{p.name} ({p.owner.get_username()})") for p in projects]


def run_shared_users(*, run: Run) -> list[str]:
    """Usernames the run is shared with by name, sorted."""
    return sorted(run.shared_with.values_list("username", flat=True))


def run_shared_teams(*, run: Run) -> list[str]:
    """Names of the teams the run is shared with, sorted."""
    return sorted(run.shared_with_teams.values_list("name", flat=True))


def run_config_list_for(*, user: AbstractBaseUser) -> QuerySet[RunConfig]:
    """Saved configs the user may see, newest first."""
    return owned_by_or_staff(RunConfig.objects.select_related("owner"), user=user).order_by("-created", "-id")


def run_config_get_for(*, user: AbstractBaseUser, config_id) -> RunConfig:
    """One visible saved config, or Http404."""
    return get_visible_or_404(RunConfig.objects.select_related("owner"), user=user, pk=config_id)


def latest_reward(run: Run) -> float | None:
    """The latest `critic/score/mean` of a run annotated by `run_list_for`, if it reported one."""
    metrics = getattr(run, "latest_metrics", None) or {}
    value = metrics.get("critic/score/mean")
    return float(value) if isinstance(value, (int, float)) else None


def run_logs(*, run: Run, tail: int = 200) -> dict:
    """The run's last `tail` log lines from Ray (the job's driver log), with where they came from: at
    most the last ray_jobs.LOG_TAIL_MAX_BYTES of the log, read from its end (never the whole log)."""
    from . import ray_jobs

    if not run.ray_submission_id:
        return {"lines": [], "source": "none", "message": "the run has no Ray job yet"}
    try:
        text = ray_jobs.logs(run.ray_submission_id, lines=max(1, min(int(tail), ray_jobs.LOG_TAIL_MAX_LINES)))
    except ray_jobs.RayUnavailable as exc:
        return {"lines": [], "source": "unavailable", "message": str(exc)}
    return {"lines": text.splitlines()[-tail:], "source": "ray", "message": ""}


def queue_position(*, run: Run) -> int | None:
    """1-based place of a queued run in the one queue of runs and the other kinds' jobs (evaluations),
    in admission order (`rlstudio.runs.queue`), None when not queued: COUNT queries of the jobs ahead
    (`services.queue_order.queue_position_of`), never the whole queue loaded."""
    if run.status != "queued":
        return None
    from .services.queue_order import queue_position_of, run_job

    return queue_position_of(run_job(run))


def run_duration(run: Run, *, now=None) -> str:
    """H:MM:SS from start to finish (to `now` while it runs); "" before it started."""
    if run.started is None:
        return ""
    from django.utils import timezone

    seconds = max(int(((run.finished or now or timezone.now()) - run.started).total_seconds()), 0)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def checkpoint_step(path: str | None) -> int | None:
    """N of a checkpoint folder named global_step_N (the trainer's `STEP_DIR`), else None."""
    from trainer.step_dirs import step_of

    return step_of(path)


def trained_to_the_end(*, run: Run, checkpoint: str | None) -> bool:
    """Whether `run` succeeded with `checkpoint` at (or past) its last step: a resume from it has
    nothing left to do. (A run that failed or was stopped after its last checkpoint may still have its
    end to finish: the final validation and export.)"""
    step = checkpoint_step(checkpoint)
    return (run.status == "succeeded" and bool(run.total_steps) and step is not None
            and step >= run.total_steps)


# The run page's Fork form: the fork-changeable keys it has an input for (input name, dotted key, label,
# and the switch of the run's config that must be on for the key to do anything, or None).
FORK_FORM_FIELDS = (
    ("lr", "actor_rollout_ref.actor.optim.lr", "learning rate", None),
    ("kl_loss_coef", "actor_rollout_ref.actor.kl_loss_coef", "KL loss coefficient", "actor_rollout_ref.actor.use_kl_loss"),
    ("kl_coef", "algorithm.kl_ctrl.kl_coef", "KL-in-reward coefficient", "algorithm.use_kl_in_reward"),
    ("temperature", "actor_rollout_ref.rollout.temperature", "temperature", None),
    ("total_training_steps", "trainer.total_training_steps", "total training steps", None),
)


def fork_origin(*, run: Run, user: AbstractBaseUser) -> dict | None:
    """For a fork: {"step": the checkpoint's step (None when its record names no global_step_N),
    "changes": [{"key", "old", "new"}] the user keys it changed from its parent's config, as kept when it
    was made (`Run.fork_changes`; a fork without them is compared with its parent's config now: None when
    the parent is gone or a config no longer reads), "parent_visible": whether `user` reads the parent,
    "old_visible": whether `user` sees the old values (the parent's reader, or the fork's owner and staff:
    a fork is its parent's owner's; for anyone else each change's "old" is None)}; None for any other run."""
    from .config_diff import stored_changes

    if run.parent_kind != Run.ParentKind.FORK:
        return None
    parent = run.parent
    visible = parent is not None and visible_runs(Run.objects.filter(pk=parent.pk), user=user).exists()
    old_visible = visible or can_manage(user=user, run=run)
    changes = run.fork_changes
    if changes is None and parent is not None:
        found = stored_changes(before=parent.config, after=run.config)
        changes = None if found is None else [c.as_dict() for c in found]
    if changes is not None and not old_visible:
        changes = [{"key": c["key"], "old": None, "new": c["new"]} for c in changes]
    return {"step": checkpoint_step(run.resume_from), "parent_visible": visible, "old_visible": old_visible,
            "changes": changes}


def fork_form_context(*, run: Run) -> dict:
    """What the run page's Fork form offers: "steps", the run's kept checkpoint steps newest first, and
    "fields", the inputs of FORK_FORM_FIELDS that do something in this run (a KL coefficient only
    where its KL is on) with the run's value of each (shown as the placeholder: left empty, it is
    unchanged)."""
    from trainer.config.fork import dotted

    from .checkpoints import checkpoint_steps

    return {"steps": sorted(checkpoint_steps(run), reverse=True),
            "fields": [{"name": name, "key": key, "label": label, "current": dotted(run.config, key)}
                       for name, key, label, switch in FORK_FORM_FIELDS
                       if switch is None or dotted(run.config, switch) is True]}


# The audit action of a run the platform's shutdown stopped (`manage.py rlstudio_stop_runs`).
SHUTDOWN_STOP_ACTION = "run.shutdown_stop"


def run_stopped_by_shutdown(*, run: Run) -> bool:
    """Whether `run` is stopped because the platform was shut down (its owner pressed nothing)."""
    from rlstudio.accounts.models import AuditEvent

    return run.status == "stopped" and AuditEvent.objects.filter(
        action=SHUTDOWN_STOP_ACTION, object_type=Run._meta.label_lower, object_id=str(run.pk)).exists()


def run_header_context(*, run: Run, user: AbstractBaseUser) -> dict:
    """Context for templates/runs/_controls.html and _logs.html (LIVE merges it into the run page).

    `queue_reason` is a queued run's reason as `user` may read it (`run_queue_reason_for`); `can_*` say
    which buttons make sense now (none for a user the run is only shared with:
    `can_manage` false, `access` "shared"; `can_fork`: a finished run with a kept checkpoint, whose
    steps and inputs `fork_form` holds); `fork_origin` is a fork's step and changes; `progress` is 0–100 when total steps are known;
    `duration` is run_duration's; `stopped_by_shutdown` whether the platform's shutdown stopped it; `clock` holds unix seconds (server's now, started, finished, last
    heartbeat; "" when unset) from which run_controls.js keeps the duration and the heartbeat's age
    ticking between two refreshes of the card.
    """
    from django.utils import timezone

    progress = None
    if run.total_steps:
        progress = min(100, round(100 * run.step / run.total_steps))
    status = run.status
    manage = can_manage(user=user, run=run)
    now = timezone.now()
    clock = {"now": f"{now.timestamp():.3f}"}
    fork_form = fork_form_context(run=run) if manage and run.is_terminal else {"steps": [], "fields": []}
    for key, value in (("started", run.started), ("finished", run.finished), ("heartbeat", run.last_heartbeat)):
        clock[key] = f"{value.timestamp():.3f}" if value is not None else ""
    return {
        "run": run,
        "progress": progress,
        "duration": run_duration(run, now=now),
        "clock": clock,
        "queue_position": queue_position(run=run),
        # Why it waits, as this user may read it (a reader: no team of the owner's): the run page and
        # the controls card it refreshes on each status event both show it.
        "queue_reason": run_queue_reason_for(user=user, run=run) if status == "queued" else "",
        "can_manage": manage,
        "access": run_access(user=user, run=run),
        "project": run_project_for(user=user, run=run),
        "project_choices": project_choices_of(run.owner) if manage else [],
        "can_stop": manage and status in ("queued", "running"),
        "can_force_stop": manage and status in ("running", "stopping"),
        "can_resume": (manage and status in ("stopped", "failed", "lost", "succeeded") and bool(run.checkpoint_path)
                       and not trained_to_the_end(run=run, checkpoint=run.checkpoint_path)),
        "can_clone": manage,
        "can_fork": bool(fork_form["steps"]),
        "fork_form": fork_form,
        "fork_origin": fork_origin(run=run, user=user),
        # The run it was made from is linked only for whoever reads it (else its id, as a dead link is no use).
        "parent_visible": run.parent_id is not None and visible_runs(
            Run.objects.filter(pk=run.parent_id), user=user).exists(),
        "can_delete": manage and status in ("stopped", "failed", "lost", "succeeded"),
        "is_live": status in ("queued", "submitting", "running", "stopping"),
        "stopped_by_shutdown": run_stopped_by_shutdown(run=run),
    }
