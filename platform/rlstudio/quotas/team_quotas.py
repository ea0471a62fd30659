"""Reads of team GPU quotas (`TeamQuota`): which of a user's teams have limits, what each team's
members hold and use together, and the sentences admission gives when a team is at its limit
(`rlstudio.quotas.services._reason` asks them, after the user's own quota). Each such sentence names
the team after `runs.queue.TEAM_REASON_MARK`, so that a reader of the job who does not manage it sees
`runs.queue.reason_for_reader`'s sentence instead (the team is its members' and staff's business).

A user's *quota'd teams* are the teams (Django auth groups) they are in that have a TeamQuota row; a
team without one has no team limit. Membership counts when it is read, at each admission and each
page: a team's GPUs held are those of its current members' active runs and running evaluations, and
its month is the sum of its current members' GPU-hours this month (`month_gpu_hours_by_owner`, deleted
jobs' included), every member counted, active or not (a deactivated user's running job still holds
its GPUs). GPU-time is the user's: a member who leaves takes theirs out of the team's month (it stays
in their own), and one who joins brings theirs in.

Only GPU jobs are limited by a team (GPUs at once, GPU-hours a month); a CPU job never is.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Sum
from django.utils import timezone

from rlstudio.runs.models import ACTIVE_STATUSES, Run
from rlstudio.runs.queue import TEAM_REASON_MARK

from .models import TeamQuota
from .selectors import QuotaUsage, month_gpu_hours_by_owner, quota_usage_for


def _memberships():
    """The user ↔ team rows (Django's `User.groups` table)."""
    return get_user_model().groups.through.objects


@dataclass(frozen=True)
class TeamUsage:
    """One team's shared limits next to what its current members hold and used this month."""

    team_id: int
    name: str
    members: int
    max_gpus: int
    gpus_held: int
    gpu_hours_per_month: float
    gpu_hours_this_month: float


def quota_teams_of(*, user_ids: Iterable[int]) -> list[TeamQuota]:
    """The TeamQuota rows of the teams any of `user_ids` is in, by team name (one query)."""
    teams = _memberships().filter(user_id__in=list(user_ids)).values("group_id")
    return list(TeamQuota.objects.filter(team_id__in=teams).select_related("team").order_by("team__name", "team_id"))


def teammate_ids(*, user_ids: Iterable[int]) -> set[int]:
    """The ids of every member of a quota'd team of any of `user_ids` (one query): whose admission
    lock an admission of theirs takes too (`services.lock_owners`)."""
    teams = _memberships().filter(user_id__in=list(user_ids), group__team_quota__isnull=False).values("group_id")
    return set(_memberships().filter(group_id__in=teams).values_list("user_id", flat=True))


def members_of(team_ids: Iterable[int]) -> dict[int, set[int]]:
    """{team id: its members' user ids} of `team_ids` (one query; a team without members: empty)."""
    members: dict[int, set[int]] = {pk: set() for pk in team_ids}
    for group_id, user_id in _memberships().filter(group_id__in=list(members)).values_list("group_id", "user_id"):
        members[group_id].add(user_id)
    return members


def _gpus_held_by_owner(owner_ids: set[int], *, exclude_run: int | None = None,
                        exclude_evaluation: int | None = None) -> dict[int, int]:
    """{owner id: GPUs held} by the active runs and running evaluations of `owner_ids` (two queries),
    as admission counts a user's (`services._reason`)."""
    from rlstudio.evaluations.models import Evaluation, EvaluationStatus

    held: dict[int, int] = {}
    runs = Run.objects.filter(owner_id__in=owner_ids, status__in=ACTIVE_STATUSES)
    evaluations = Evaluation.objects.filter(owner_id__in=owner_ids, status=EvaluationStatus.RUNNING)
    if exclude_run is not None:
        runs = runs.exclude(pk=exclude_run)
    if exclude_evaluation is not None:
        evaluations = evaluations.exclude(pk=exclude_evaluation)
    for qs in (runs, evaluations):
        for owner_id, gpus in qs.order_by().values("owner_id").annotate(g=Sum("gpus")).values_list("owner_id", "g"):
            held[owner_id] = held.get(owner_id, 0) + (gpus or 0)
    return held


def team_usages(quotas: list[TeamQuota], members: dict[int, set[int]], *, now: datetime | None = None,
                exclude_run: int | None = None, exclude_evaluation: int | None = None) -> list[TeamUsage]:
    """Each of `quotas`' teams' usage, its members being `members[team id]` (`members_of`): GPUs held
    and GPU-hours this month, summed over the members (a fixed number of queries, whatever the number of
    teams). `exclude_run` / `exclude_evaluation`: a job not to count (the one being admitted)."""
    if not quotas:
        return []
    everyone = set().union(*(members.get(q.team_id, set()) for q in quotas))
    held = _gpus_held_by_owner(everyone, exclude_run=exclude_run, exclude_evaluation=exclude_evaluation)
    hours = month_gpu_hours_by_owner(now=now or timezone.now(), owner_ids=everyone) if everyone else {}
    usages = []
    for quota in quotas:
        ids = members.get(quota.team_id, set())
        usages.append(TeamUsage(
            team_id=quota.team_id, name=quota.team.name, members=len(ids), max_gpus=quota.max_gpus,
            gpus_held=sum(held.get(pk, 0) for pk in ids), gpu_hours_per_month=quota.gpu_hours_per_month,
            gpu_hours_this_month=round(sum(hours.get(pk, 0.0) for pk in sorted(ids)), 6)))
    return usages


def team_usages_of(*, user, now: datetime | None = None) -> list[TeamUsage]:
    """The usage of `user`'s quota'd teams, by name (the "Your quota" page and the quota API: a user
    sees their own teams only)."""
    if not getattr(user, "is_authenticated", False):
        return []
    quotas = quota_teams_of(user_ids=[user.pk])
    return team_usages(quotas, members_of(q.team_id for q in quotas), now=now)


def team_usages_all(*, now: datetime | None = None) -> list[TeamUsage]:
    """Every quota'd team's usage, by name (the staff quota page; a fixed number of queries)."""
    quotas = list(TeamQuota.objects.select_related("team").order_by("team__name", "team_id"))
    return team_usages(quotas, members_of(q.team_id for q in quotas), now=now)


def _count(n: float) -> str:
    """A number as the team sentences write it: thousands separated, no needless decimals."""
    return f"{n:,.10g}"


def team_gpus_reason(usages: list[TeamUsage], *, gpus: int, what: str) -> str:
    """'' unless a `what` asking `gpus` GPUs would take one of these teams past its max_gpus: then the
    sentence that names the first such team (by name)."""
    for u in usages:
        if u.gpus_held + gpus > u.max_gpus:
            gpu_word = "GPU" if u.max_gpus == 1 else "GPUs"
            return (f"{TEAM_REASON_MARK}{u.name} holds {_count(u.gpus_held)} of its {_count(u.max_gpus)} {gpu_word} "
                    f"and this {what} needs {gpus}")
    return ""


def team_hours_reason(usages: list[TeamUsage]) -> str:
    """'' unless one of these teams used its GPU-hours this month: then the sentence that names it."""
    for u in usages:
        if u.gpu_hours_this_month >= u.gpu_hours_per_month:
            return (f"{TEAM_REASON_MARK}{u.name} used {u.gpu_hours_this_month:,.1f} of its "
                    f"{_count(u.gpu_hours_per_month)} GPU-hours this month")
    return ""


def quota_usage_with_teams(*, user, now: datetime | None = None) -> QuotaUsage:
    """`quota_usage_for(user)` with `teams` filled in: the usage of the user's own quota'd teams
    (what "Your quota" and GET /api/v1/quota/ show)."""
    now = now or timezone.now()
    return replace(quota_usage_for(user=user, now=now), teams=team_usages_of(user=user, now=now))
