"""The cluster's GPUs as admission counts them: all Ray has (`cluster_total_gpus`, None when Ray does
not answer), those free of the platform's active runs and other jobs (`cluster_free_gpus`), and the
launch's checks of a job's GPUs against its owner's quota and team quotas (`gpus_refusal`) and the cluster
(`gpus_cluster_warning`)."""
from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from ..models import Run
from ..queue import QUOTA_REMEDY, TEAM_QUOTA_REMEDY, gpus_over_cluster, gpus_over_quota
from .queue_registry import other_jobs_gpus, quota_policy


def cluster_total_gpus() -> float | None:
    """The GPUs the cluster has in all (Ray's alive nodes; `ray_jobs.cluster_total_gpus`, cached a few
    seconds per process); None when Ray does not answer."""
    from ..ray_jobs import RayUnavailable
    from ..ray_jobs import cluster_total_gpus as ray_total_gpus

    try:
        return ray_total_gpus()
    except RayUnavailable:
        return None


def _held_gpus() -> float:
    """GPUs our active runs and the other jobs (evaluations) hold now."""
    from django.db.models import Sum

    from ..models import ACTIVE_STATUSES

    return (Run.objects.filter(status__in=ACTIVE_STATUSES).aggregate(n=Sum("gpus"))["n"] or 0) + other_jobs_gpus()


def _cluster_free_gpus(*, needed: int) -> float | None:
    """GPUs Ray has minus those our active runs and other jobs hold (0.0 when Ray does not answer);
    None when the run needs none (not checked)."""
    if needed <= 0:
        return None
    total = cluster_total_gpus()
    return 0.0 if total is None else max(total - _held_gpus(), 0.0)


def cluster_free_gpus(*, needed: int) -> float | None:
    """`_cluster_free_gpus` for other jobs' admission (0.0 when Ray does not answer)."""
    return _cluster_free_gpus(needed=needed)


def quota_gpu_limits(*, owner_id: int) -> list[tuple[str, int]]:
    """The most GPUs a job of user `owner_id` may ever hold at once, limit by limit: ("", their own
    quota's max_gpus) first, then (team name, its max_gpus) for each of their teams with a team quota,
    by name (`QuotaPolicy.max_gpus`, `QuotaPolicy.team_max_gpus`)."""
    policy = quota_policy()
    return [("", policy.max_gpus(owner_id=owner_id)), *policy.team_max_gpus(owner_id=owner_id)]


def gpus_over_limits(limits: list[tuple[str, int]], *, what: str, gpus: int, whose: str = "your") -> tuple[str, str]:
    """('', '') unless a `what` asking `gpus` GPUs is over one of `limits` (`quota_gpu_limits`); else
    the sentence for the first one it is over (`gpus_over_quota`, naming the team for a team's) and the
    remedy an admin can give (QUOTA_REMEDY, TEAM_QUOTA_REMEDY)."""
    for team, most in limits:
        if why := gpus_over_quota(what=what, gpus=gpus, most=most, whose=whose, team=team):
            return why, TEAM_QUOTA_REMEDY if team else QUOTA_REMEDY
    return "", ""


def gpus_refusal(*, user: AbstractBaseUser, gpus: int, what: str = "run",
                 by: AbstractBaseUser | None = None) -> str:
    """'' unless a `what` ("run", "evaluation") of `user` asking `gpus` GPUs could never be admitted:
    more than the user's quota allows at once (its `max_gpus`), or more than one of their teams' team
    quota allows (its `max_gpus`: the sentence names the team); else the sentence that says so. A
    launch raises it as an input error on `gpus` before anything is recorded. Ray is not asked: a job
    asking more than the cluster has in all now is accepted and waits, queued, for GPUs to join
    (`gpus_cluster_warning` says so beforehand). `by`: who asks, when not `user` (staff acting on
    another user's run read "its owner's quota", "its owner's team nlp's quota")."""
    if gpus <= 0:
        return ""
    whose = "your" if by is None or by.pk == user.pk else "its owner's"
    return gpus_over_limits(quota_gpu_limits(owner_id=user.pk), what=what, gpus=gpus, whose=whose)[0]


def gpus_cluster_warning(*, gpus: int, what: str = "run") -> str:
    """'' unless a `what` asking `gpus` GPUs asks more than the cluster has in all now (Ray's answer,
    cached a few seconds; '' when Ray does not answer); else a sentence saying that it would be queued
    and start only once enough GPUs join the cluster (the run form's preview shows it as a warning)."""
    why = gpus_over_cluster(what=what, gpus=gpus, total=cluster_total_gpus()) if gpus > 0 else ""
    return f"{why}: it would wait, queued, until the cluster has {gpus} GPUs" if why else ""
