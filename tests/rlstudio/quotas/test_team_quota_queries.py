"""A queue pass's work does not grow with teams or their members: the same queued jobs tried against
their owners' team quotas cost as many queries whether the owners are in one quota'd team of two or in
many teams of many members (each job's team check reads every team of its owner's in a fixed number of
queries; the owners' locks, teammates included, are one query); nor does the admin's Team GPU quotas
list. Real PostgreSQL, no Ray."""
import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from rlstudio.quotas.models import GpuQuota, TeamQuota
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import admission

pytestmark = pytest.mark.django_db
S = RunStatus
FREE = 64.0


def _pass_queries() -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert admission.queue_admit_jobs() == []
    return len(ctx.captured_queries)


def test_a_pass_reads_as_many_queries_with_many_teams_and_members(alice, bob, make_user, make_run, monkeypatch):
    monkeypatch.setattr(admission, "free_gpus", lambda needed: FREE)
    monkeypatch.setattr(admission, "cluster_total_gpus", lambda: FREE)
    for user in (alice, bob):
        GpuQuota.objects.create(user=user, max_gpus=8, gpu_hours_per_month=1000, max_concurrent_runs=10)
    nlp = Group.objects.create(name="nlp")
    nlp.user_set.set([alice, bob])
    TeamQuota.objects.create(team=nlp, max_gpus=2, gpu_hours_per_month=1000)
    held = make_run(bob, "held")
    Run.objects.filter(pk=held.pk).update(status=S.RUNNING, gpus=2, started=timezone.now())
    waiting = [make_run(owner, f"w{i}", gpus=1) for i, owner in enumerate((alice, bob, alice))]
    _pass_queries()  # records each job's reason
    reasons = {r.pk: r.queue_reason for r in Run.objects.filter(pk__in=[w.pk for w in waiting])}
    assert reasons[waiting[0].pk] == reasons[waiting[1].pk] == "your team nlp holds 2 of its 2 GPUs and this run needs 1"
    assert reasons[waiting[2].pk] == f"waiting behind your earlier queued run #{waiting[0].pk}"
    few = _pass_queries()
    # Now each is in 8 more quota'd teams (with room) of 25 more members each, some running jobs.
    others = [make_user(f"m{i}") for i in range(25)]
    for i in range(8):
        team = Group.objects.create(name=f"team-{i}")
        team.user_set.set([alice, bob, *others])
        TeamQuota.objects.create(team=team, max_gpus=500, gpu_hours_per_month=10_000)
    for member in others[:5]:
        Run.objects.filter(pk=make_run(member, "m", gpus=1).pk).update(status=S.RUNNING, started=timezone.now())
    many = _pass_queries()
    assert {r.pk: r.queue_reason for r in Run.objects.filter(pk__in=reasons)} == reasons
    assert many == few, (few, many)


def test_the_admins_team_quota_list_reads_as_many_queries_with_many_teams(staff, alice, bob, make_user, make_run):
    client = Client()
    client.force_login(staff)

    def listing_queries(teams: int) -> int:
        with CaptureQueriesContext(connection) as ctx:
            body = client.get("/admin/quotas/teamquota/").content.decode()
        assert body.count("of 500") == teams  # each team's GPUs held, "1 of 500"
        return len(ctx.captured_queries)

    members = [alice, bob]
    Run.objects.filter(pk=make_run(alice, "a", gpus=1).pk).update(status=S.RUNNING, started=timezone.now())
    for i in range(2):
        team = Group.objects.create(name=f"team-{i}")
        team.user_set.set(members)
        TeamQuota.objects.create(team=team, max_gpus=500, gpu_hours_per_month=10_000)
    few = listing_queries(2)
    members += [make_user(f"m{i}") for i in range(10)]
    for i in range(2, 8):
        team = Group.objects.create(name=f"team-{i}")
        team.user_set.set(members)
        TeamQuota.objects.create(team=team, max_gpus=500, gpu_hours_per_month=10_000)
    assert listing_queries(8) == few
