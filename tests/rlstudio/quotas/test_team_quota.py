"""Team GPU quotas (`TeamQuota`): a GPU run or evaluation waits while any of its owner's quota'd teams
would go over its GPUs at once or its GPU-hours this month, with a reason that names the team; one
asking more than a team's max_gpus can never start; the owner's own quota still applies; membership
counts at admission; the quota API and pages show a user their own teams only, staff every team;
names are escaped; staff set the limits in the admin, checked and audited (real PostgreSQL)."""
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.quotas.models import GpuHoursSpent, GpuQuota, TeamQuota
from rlstudio.quotas.selectors import month_start
from rlstudio.quotas.services import QuotaInvalid, admission_reason, job_reason, team_quota_set
from rlstudio.quotas.team_quotas import team_usages_all, team_usages_of
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.queue import NEVER_PREFIX
from rlstudio.runs.services import run_admit

pytestmark = pytest.mark.django_db
S = RunStatus
FREE = 64  # the cluster's free GPUs in these tests: never the limit


@pytest.fixture
def nlp(alice, bob):
    """Team "nlp" (alice and bob) sharing 8 GPUs and 2,000 GPU-hours a month; each member's own quota
    allows more than the team."""
    for user in (alice, bob):
        GpuQuota.objects.create(user=user, max_gpus=16, gpu_hours_per_month=10_000, max_concurrent_runs=10)
    team = Group.objects.create(name="nlp")
    team.user_set.set([alice, bob])
    TeamQuota.objects.create(team=team, max_gpus=8, gpu_hours_per_month=2000)
    return team


def _active(run, gpus, *, status=S.RUNNING, started=None):
    Run.objects.filter(pk=run.pk).update(status=status, gpus=gpus, started=started or timezone.now())
    run.refresh_from_db()
    return run


def _spent(user, hours):
    """`hours` GPU-hours of `user` this month, as a deleted job's kept time."""
    GpuHoursSpent.objects.create(user=user, month=month_start(timezone.now()).date(),
                                 gpu_microseconds=int(hours * 3_600_000_000), job="run #0 “gone”")


def test_a_run_waits_while_its_team_would_hold_more_than_its_gpus(alice, bob, nlp, make_run):
    _active(make_run(bob, "bobs"), 5)
    _active(make_run(alice, "alices"), 2)
    waiting = make_run(alice, "waiting", gpus=2)
    assert admission_reason(run=waiting, cluster_free_gpus=FREE) == (
        "your team nlp holds 7 of its 8 GPUs and this run needs 2")
    assert run_admit(run=waiting, cluster_free_gpus=FREE) is False
    waiting.refresh_from_db()
    assert waiting.status == S.QUEUED and waiting.queue_reason.startswith("your team nlp holds 7 of its 8")
    one = make_run(bob, "one-more", gpus=1)  # exactly the last GPU: starts
    assert run_admit(run=one, cluster_free_gpus=FREE) is True


def test_a_team_without_a_quota_limits_nothing_and_a_cpu_run_is_never_held_by_a_team(alice, bob, nlp, make_run):
    _active(make_run(bob, "bobs"), 8)
    assert admission_reason(run=make_run(alice, "cpu", gpus=0), cluster_free_gpus=FREE) == ""
    TeamQuota.objects.filter(team=nlp).delete()
    assert admission_reason(run=make_run(alice, "gpu", gpus=4), cluster_free_gpus=FREE) == ""
    # a team alice is not in counts nothing for her
    other = Group.objects.create(name="vision")
    other.user_set.set([bob])
    TeamQuota.objects.create(team=other, max_gpus=0, gpu_hours_per_month=0)
    assert admission_reason(run=make_run(alice, "gpu2", gpus=4), cluster_free_gpus=FREE) == ""


def test_the_users_own_quota_still_applies_first(alice, bob, nlp, make_run):
    GpuQuota.objects.filter(user=alice).update(max_gpus=2)
    _active(make_run(alice, "alices"), 2)
    _active(make_run(bob, "bobs"), 6)
    assert admission_reason(run=make_run(alice, "w", gpus=1), cluster_free_gpus=FREE) == (
        "you hold 2 of your 2 GPUs and this run needs 1")


def test_a_team_that_used_its_month_holds_its_members_gpu_jobs(alice, bob, nlp, make_run):
    _spent(bob, 1500.5)
    _spent(alice, 500.8)
    waiting = make_run(alice, "w", gpus=1)
    assert admission_reason(run=waiting, cluster_free_gpus=FREE) == (
        "your team nlp used 2,001.3 of its 2,000 GPU-hours this month")
    assert admission_reason(run=make_run(alice, "cpu"), cluster_free_gpus=FREE) == ""  # GPU jobs only
    # the user's own month is checked before the team's
    GpuQuota.objects.filter(user=alice).update(gpu_hours_per_month=400)
    assert admission_reason(run=waiting, cluster_free_gpus=FREE) == (
        "you used 500.8 of your 400 GPU-hours this month")


def test_membership_counts_at_admission_a_past_members_hours_stay_theirs(alice, bob, make_user, nlp, make_run):
    _spent(bob, 1999)
    waiting = make_run(alice, "w", gpus=1)
    assert admission_reason(run=waiting, cluster_free_gpus=FREE) == ""
    _spent(alice, 1)
    assert "used 2,000.0 of its 2,000" in admission_reason(run=waiting, cluster_free_gpus=FREE)
    nlp.user_set.remove(bob)  # bob leaves: his GPU-hours leave the team's month with him
    assert admission_reason(run=waiting, cluster_free_gpus=FREE) == ""
    assert [u.gpu_hours_this_month for u in team_usages_of(user=alice)] == [1.0]
    _active(make_run(bob, "bobs"), 8)  # nor do his GPUs count
    assert admission_reason(run=waiting, cluster_free_gpus=FREE) == ""
    carol = make_user("carol")
    _active(make_run(carol, "carols"), 8)
    nlp.user_set.add(carol)  # a new member brings hers
    assert admission_reason(run=waiting, cluster_free_gpus=FREE) == (
        "your team nlp holds 8 of its 8 GPUs and this run needs 1")


def test_a_members_deleted_run_and_evaluation_stay_in_the_teams_month_counted_once(alice, bob, nlp, make_run,
                                                                                   make_dataset):
    from rlstudio.quotas.services import gpu_time_keep

    now = timezone.now()
    start = max(month_start(now), now - timedelta(hours=2))
    run = make_run(bob, "done", gpus=2)
    Run.objects.filter(pk=run.pk).update(status=S.SUCCEEDED, started=start, finished=now)
    run.refresh_from_db()
    Evaluation.objects.create(owner=alice, run=run, dataset=make_dataset(alice, "ev"), gpus=1, k=1, max_prompts=1,
                              status=EvaluationStatus.SUCCEEDED, started=start, finished=now)
    expected = 3 * (now - start).total_seconds() / 3600  # the run's 2 GPUs (bob's) and the evaluation's 1 (alice's)
    before = team_usages_of(user=alice, now=now)[0].gpu_hours_this_month
    assert before == pytest.approx(expected)
    with transaction.atomic():
        assert len(gpu_time_keep(run, now=now)) == 2  # one row each, each for its own owner
        run.delete()  # its evaluation with it
    assert team_usages_of(user=alice, now=now)[0].gpu_hours_this_month == before


def test_every_quotad_team_is_checked_and_the_one_over_is_named(alice, bob, make_user, nlp, make_run):
    carol = make_user("carol")
    GpuQuota.objects.create(user=carol, max_gpus=16, gpu_hours_per_month=10_000, max_concurrent_runs=10)
    rl = Group.objects.create(name="a <b>rl</b> & co")  # sorts before nlp
    rl.user_set.set([alice, carol])
    TeamQuota.objects.create(team=rl, max_gpus=3, gpu_hours_per_month=10)
    _active(make_run(carol, "carols"), 3)
    _active(make_run(bob, "bobs"), 1)
    assert admission_reason(run=make_run(alice, "w", gpus=1), cluster_free_gpus=FREE) == (
        "your team a <b>rl</b> & co holds 3 of its 3 GPUs and this run needs 1")
    assert admission_reason(run=make_run(bob, "b", gpus=1), cluster_free_gpus=FREE) == ""  # bob: nlp only


def test_more_than_a_teams_max_gpus_can_never_start_and_holds_no_later_job_back(alice, nlp, make_run):
    big = make_run(alice, "big", gpus=9)
    reason = admission_reason(run=big, cluster_free_gpus=FREE)
    assert reason.startswith(NEVER_PREFIX + "this run asks 9 GPUs; your team nlp's quota allows at most 8 GPUs at a time")
    assert reason.endswith("ask an admin to raise your team's quota")
    assert run_admit(run=big, cluster_free_gpus=FREE) is False
    later = make_run(alice, "later", gpus=1)
    assert run_admit(run=later, cluster_free_gpus=FREE) is True  # not "waiting behind your earlier ..."


def test_a_teammates_running_evaluation_holds_team_gpus_and_an_evaluation_waits_for_the_team(
        alice, bob, nlp, make_run, make_dataset):
    run = make_run(bob, "bobs")
    Evaluation.objects.create(owner=bob, run=run, dataset=make_dataset(bob, "eval-data"), gpus=7, k=1, max_prompts=3,
                              status=EvaluationStatus.RUNNING, started=timezone.now())
    assert job_reason(user=alice, gpus=2, cluster_free_gpus=FREE) == (
        "your team nlp holds 7 of its 8 GPUs and this evaluation needs 2")
    assert admission_reason(run=make_run(alice, "w", gpus=1), cluster_free_gpus=FREE) == ""


def test_the_team_quota_rows_are_checked_by_postgresql(nlp):
    other = Group.objects.create(name="other")
    for values in ({"max_gpus": -1}, {"gpu_hours_per_month": -0.5}):
        with pytest.raises(IntegrityError), transaction.atomic():
            TeamQuota.objects.create(team=other, **values)
    with pytest.raises(IntegrityError), transaction.atomic():
        TeamQuota.objects.create(team=nlp)  # one row per team


def test_team_quota_set_checks_staff_and_values_and_audits(alice, staff, nlp):
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        team_quota_set(team=nlp, by=alice, max_gpus=100, gpu_hours_per_month=1)
    for field, values in (("max_gpus", {"max_gpus": -1, "gpu_hours_per_month": 1}),
                          ("max_gpus", {"max_gpus": 2**31, "gpu_hours_per_month": 1}),
                          ("gpu_hours_per_month", {"max_gpus": 1, "gpu_hours_per_month": float("inf")})):
        with pytest.raises(QuotaInvalid) as exc:
            team_quota_set(team=nlp, by=staff, **values)
        assert exc.value.field == field
    assert TeamQuota.objects.get(team=nlp).max_gpus == 8
    team_quota_set(team=nlp, by=staff, max_gpus=4, gpu_hours_per_month=2000)
    event = AuditEvent.objects.get(action="team_quota.change")
    assert event.data == {"team": "nlp", "changed": {"max_gpus": [8, 4]}} and event.actor == staff
    vision = Group.objects.create(name="vision")
    created = team_quota_set(team=vision, by=staff, max_gpus=2, gpu_hours_per_month=5.5)
    assert (created.max_gpus, created.gpu_hours_per_month) == (2, 5.5)
    assert AuditEvent.objects.get(action="team_quota.create").data["team"] == "vision"


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def test_the_quota_api_shows_the_callers_teams_only(alice, bob, make_user, nlp, make_run):
    carol = make_user("carol")
    secret = Group.objects.create(name="secret-team")
    secret.user_set.set([bob, carol])
    TeamQuota.objects.create(team=secret, max_gpus=1, gpu_hours_per_month=1)
    Group.objects.create(name="no-quota").user_set.set([alice])
    _active(make_run(bob, "bobs"), 3)
    _spent(alice, 12.25)
    body = _api(alice).get("/api/v1/quota/").json()
    hours = body["teams"][0].pop("gpu_hours_this_month")  # alice's 12.25 and bob's running seconds
    assert body["teams"] == [{"name": "nlp", "members": 2, "max_gpus": 8, "gpus_held": 3,
                              "gpu_hours_per_month": 2000.0}]
    assert hours == pytest.approx(12.25, abs=0.01)
    assert body["gpus_held"] == 0  # alice's own figures are still hers alone
    assert [t["name"] for t in _api(bob).get("/api/v1/quota/").json()["teams"]] == ["nlp", "secret-team"]
    assert _api(carol).get("/api/v1/quota/").json()["teams"][0]["name"] == "secret-team"
    assert "nlp" not in str(_api(carol).get("/api/v1/quota/").json())
    assert _api(make_user("dave")).get("/api/v1/quota/").json()["teams"] == []


def test_the_quota_page_lists_the_users_teams_escaped(alice, bob, make_user, nlp, make_run):
    nlp.name = "<script>alert(1)</script>"
    nlp.save()
    Group.objects.create(name="hidden-team").user_set.set([bob])
    TeamQuota.objects.create(team=Group.objects.get(name="hidden-team"), max_gpus=1, gpu_hours_per_month=1)
    _active(make_run(bob, "bobs"), 5)
    client = Client()
    client.force_login(alice)
    page = client.get("/runs/quota/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "5 of 8" in page and "hidden-team" not in page
    client.force_login(make_user("dave"))
    assert 'id="team-quotas"' not in client.get("/runs/quota/").content.decode()


def test_the_staff_quota_page_lists_every_teams_usage_escaped(alice, bob, staff, nlp, make_run):
    vision = Group.objects.create(name="vision & <i>co</i>")
    vision.user_set.set([bob])
    TeamQuota.objects.create(team=vision, max_gpus=2, gpu_hours_per_month=30)
    _active(make_run(bob, "bobs"), 2)
    assert [(u.name, u.members, u.gpus_held) for u in team_usages_all()] == [
        ("nlp", 2, 2), ("vision & <i>co</i>", 1, 2)]
    client = Client()
    client.force_login(staff)
    page = client.get("/quotas/admin/").content.decode()
    assert 'id="teams"' in page and "vision &amp; &lt;i&gt;co&lt;/i&gt;" in page and "<i>co</i>" not in page
    assert "2 of 8" in page and "2 of 2" in page
    client.force_login(alice)
    assert client.get("/quotas/admin/").status_code == 302  # staff only (to the admin's login)


def test_staff_set_a_team_quota_in_the_admin_checked_and_audited(staff, alice, nlp):
    vision = Group.objects.create(name="vision")
    client = Client()
    client.force_login(staff)
    add = "/admin/quotas/teamquota/add/"
    assert client.get(add).status_code == 200
    bad = client.post(add, {"team": vision.pk, "max_gpus": -1, "gpu_hours_per_month": 10})
    assert bad.status_code == 200 and not TeamQuota.objects.filter(team=vision).exists()
    assert client.post(add, {"team": vision.pk, "max_gpus": 4, "gpu_hours_per_month": 10}).status_code == 302
    row = TeamQuota.objects.get(team=vision)
    assert AuditEvent.objects.filter(action="team_quota.create", object_id=str(row.pk)).exists()
    dup = client.post(add, {"team": nlp.pk, "max_gpus": 1, "gpu_hours_per_month": 1})  # nlp has one
    assert dup.status_code == 200 and TeamQuota.objects.get(team=nlp).max_gpus == 8
    change = f"/admin/quotas/teamquota/{row.pk}/change/"
    resp = client.post(change, {"team": nlp.pk, "max_gpus": 6, "gpu_hours_per_month": 12})
    assert resp.status_code == 302
    row.refresh_from_db()
    assert (row.team_id, row.max_gpus, row.gpu_hours_per_month) == (vision.pk, 6, 12.0)  # the team stays
    assert AuditEvent.objects.get(action="team_quota.change").data["changed"] == {
        "max_gpus": [4, 6], "gpu_hours_per_month": [10.0, 12.0]}
    listing = client.get("/admin/quotas/teamquota/").content.decode()
    assert "vision" in listing and "0 of 6" in listing
    nlp.name = "<b>nlp</b>"
    nlp.save()
    listing = client.get("/admin/quotas/teamquota/").content.decode()
    assert "&lt;b&gt;nlp&lt;/b&gt;" in listing and "<b>nlp</b>" not in listing
    assert client.post(f"/admin/quotas/teamquota/{row.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not TeamQuota.objects.filter(pk=row.pk).exists()
    assert AuditEvent.objects.get(action="team_quota.delete").data == {
        "team": "vision", "max_gpus": 6, "gpu_hours_per_month": 12.0}
    client.force_login(alice)
    assert client.get(add).status_code == 302  # not staff: the admin's login


def test_deleting_a_team_takes_its_quota_away(alice, nlp):
    nlp.delete()
    assert not TeamQuota.objects.exists() and team_usages_of(user=alice) == []


def test_a_members_running_job_counts_in_the_teams_gpus_and_month(alice, bob, nlp, make_run):
    now = timezone.now()
    started = max(now - timedelta(hours=1), month_start(now))
    _active(make_run(bob, "bobs"), 2, started=started)
    usage = team_usages_of(user=alice)[0]
    expected = 2 * (timezone.now() - started).total_seconds() / 3600
    assert usage.gpus_held == 2 and usage.gpu_hours_this_month == pytest.approx(expected, rel=1e-3)


def test_a_reader_of_a_shared_run_sees_no_team_in_why_it_waits(alice, bob, make_user, staff, nlp, make_run,
                                                                make_dataset):
    from rlstudio.runs.services import run_share

    carol = make_user("carol")  # reads alice's run, is in none of her teams
    _active(make_run(bob, "bobs"), 8)
    big = make_run(alice, "big", gpus=9)  # first: it never holds "waiting" back
    waiting = make_run(alice, "waiting", gpus=1)
    for run in (big, waiting):
        run_admit(run=run, cluster_free_gpus=FREE)
        run_share(run=run, by=alice, users=["carol"])
    ev = Evaluation.objects.create(owner=alice, run=waiting, dataset=make_dataset(alice, "ev-data"), gpus=1, k=1,
                                   max_prompts=3, queue_reason="your team nlp holds 8 of its 8 GPUs and this "
                                                               "evaluation needs 1")
    stored = Run.objects.get(pk=waiting.pk).queue_reason
    assert stored == "your team nlp holds 8 of its 8 GPUs and this run needs 1"
    for user in (alice, staff):  # the owner and staff: as stored
        assert _api(user).get(f"/api/v1/runs/{waiting.pk}/").json()["queue_reason"] == stored
        assert _api(user).get(f"/api/v1/runs/{waiting.pk}/evaluations/").json()[0]["queue_reason"] == (
            ev.queue_reason)
    reader = _api(carol)
    assert reader.get(f"/api/v1/runs/{waiting.pk}/").json()["queue_reason"] == "waiting for a team quota of its owner's"
    assert reader.get(f"/api/v1/runs/{big.pk}/").json()["queue_reason"] == (
        NEVER_PREFIX + "it asks more GPUs than a team quota of its owner's allows at a time")
    listed = {r["id"]: r["queue_reason"] for r in reader.get("/api/v1/runs/").json()["results"]}
    assert listed[waiting.pk] == "waiting for a team quota of its owner's"
    assert reader.get(f"/api/v1/runs/{waiting.pk}/evaluations/").json()[0]["queue_reason"] == (
        "waiting for a team quota of its owner's")
    page = Client()
    page.force_login(carol)
    body = page.get(f"/runs/{waiting.pk}/").content.decode()
    assert "nlp" not in body and "waiting for a team quota of its owner&#x27;s" in body
    # Nor anywhere else a reader reads the run: the runs list, compare (page and API), their own quota page.
    for url in ("/runs/", f"/runs/compare/?ids={big.pk},{waiting.pk}", f"/api/v1/runs/compare/?ids={big.pk},{waiting.pk}",
                "/runs/quota/", "/api/v1/quota/"):
        resp = page.get(url)
        assert resp.status_code == 200 and "nlp" not in resp.content.decode(), url
    # The controls card the run page refreshes on each status event (the websocket's) says the same.
    controls = page.get(f"/runs/{waiting.pk}/controls/").content.decode()
    assert "nlp" not in controls and "waiting for a team quota of its owner&#x27;s" in controls
    page.force_login(alice)
    assert "your team nlp holds 8 of its 8 GPUs and this run needs 1" in page.get(f"/runs/{waiting.pk}/").content.decode()
    assert "your team nlp holds 8 of its 8 GPUs and this run needs 1" in page.get(
        f"/runs/{waiting.pk}/controls/").content.decode()
