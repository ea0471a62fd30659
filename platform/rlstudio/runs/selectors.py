"""Reads of the runs app, always narrowed to what the user may see."""
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import JSONField, OuterRef, QuerySet, Subquery

from rlstudio.ownership import get_visible_or_404, owned_by_or_staff

from .models import Run, RunConfig


def _with_latest_metrics(queryset: QuerySet[Run]) -> QuerySet[Run]:
    """Annotate `latest_metrics`: the metrics JSON of the run's highest step (None before any).

    The metric rows are telemetry's; they are reached through the run's own reverse relation
    (`metric_rows`), so that runs does not import telemetry (which depends on runs)."""
    metric_row = Run._meta.get_field("metric_rows").related_model
    latest = metric_row.objects.filter(run=OuterRef("pk")).order_by("-step").values("metrics")[:1]
    return queryset.annotate(latest_metrics=Subquery(latest, output_field=JSONField()))


def run_list_for(*, user: AbstractBaseUser, status: str | None = None) -> QuerySet[Run]:
    """Runs the user may see, newest first, with their latest metrics; optionally one status."""
    qs = owned_by_or_staff(
        Run.objects.select_related("owner", "dataset", "model", "val_dataset"), user=user
    )
    if status:
        qs = qs.filter(status=status)
    return _with_latest_metrics(qs).order_by("-created", "-id")


def run_get_for(*, user: AbstractBaseUser, run_id) -> Run:
    """One visible run (with latest metrics), or Http404."""
    return get_visible_or_404(run_list_for(user=user), user=user, pk=run_id)


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
    """The run's last `tail` log lines from Ray (the job's driver log), with where they came from."""
    from . import ray_jobs

    if not run.ray_submission_id:
        return {"lines": [], "source": "none", "message": "the run has no Ray job yet"}
    try:
        text = ray_jobs.logs(run.ray_submission_id)
    except ray_jobs.RayUnavailable as exc:
        return {"lines": [], "source": "unavailable", "message": str(exc)}
    return {"lines": text.splitlines()[-tail:], "source": "ray", "message": ""}


def queue_position(*, run: Run) -> int | None:
    """1-based place of a queued run in the whole queue (admission order: services.QUEUE_ORDER), None
    when not queued."""
    if run.status != "queued":
        return None
    from .services.admission import models_q_earlier

    return Run.objects.filter(status="queued").filter(models_q_earlier(run)).count() + 1


def run_duration(run: Run, *, now=None) -> str:
    """H:MM:SS from start to finish (to `now` while it runs); "" before it started."""
    if run.started is None:
        return ""
    from django.utils import timezone

    seconds = max(int(((run.finished or now or timezone.now()) - run.started).total_seconds()), 0)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def run_header_context(*, run: Run, user: AbstractBaseUser) -> dict:
    """Context for templates/runs/_controls.html and _logs.html (LIVE merges it into the run page).

    `can_*` say which buttons make sense now; `progress` is 0–100 when total steps are known;
    `duration` is run_duration's; `clock` holds unix seconds (server's now, started, finished, last
    heartbeat; "" when unset) from which run_controls.js keeps the duration and the heartbeat's age
    ticking between two refreshes of the card.
    """
    from django.utils import timezone

    progress = None
    if run.total_steps:
        progress = min(100, round(100 * run.step / run.total_steps))
    status = run.status
    now = timezone.now()
    clock = {"now": f"{now.timestamp():.3f}"}
    for key, value in (("started", run.started), ("finished", run.finished), ("heartbeat", run.last_heartbeat)):
        clock[key] = f"{value.timestamp():.3f}" if value is not None else ""
    return {
        "run": run,
        "progress": progress,
        "duration": run_duration(run, now=now),
        "clock": clock,
        "queue_position": queue_position(run=run),
        "can_stop": status in ("queued", "running"),
        "can_force_stop": status in ("running", "stopping"),
        "can_resume": status in ("stopped", "failed", "lost", "succeeded") and bool(run.checkpoint_path),
        "can_clone": True,
        "is_live": status in ("queued", "submitting", "running", "stopping"),
    }
