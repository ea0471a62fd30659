"""The staff quota page (/quotas/admin/) and its services: set a quota by user name, cancel or move a
queued run; staff only, POST + CSRF, audited; the cluster's GPUs or "Ray unreachable"."""
import json
import re

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.quotas.models import GpuQuota
from rlstudio.quotas.services import QuotaInvalid, queue_cancel, quota_set
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import RunRefused, run_transition

pytestmark = pytest.mark.django_db
S = RunStatus
PAGE = "/quotas/admin/"
LIMITS = {"max_gpus": 2, "gpu_hours_per_month": 40.5, "max_concurrent_runs": 3, "max_queued_runs": 7}


def _client(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


@pytest.fixture
def no_ray(settings):
    settings.RAY_ADDRESS = None


# ------------------------------------------------------------------ services

def test_quota_set_creates_then_changes_a_users_row_audited(alice, staff):
    quota = quota_set(user=alice, by=staff, **LIMITS)
    assert not quota.is_default and quota.user == alice and quota.max_queued_runs == 7
    created = AuditEvent.objects.get(action="quota.create")
    assert created.actor == staff and created.data["user"] == "alice"
    assert created.data["changed"]["max_gpus"] == [1, 2]  # from the default quota
    quota_set(user=alice, by=staff, **{**LIMITS, "max_gpus": 0})
    assert GpuQuota.objects.filter(user=alice).count() == 1 and GpuQuota.objects.get(user=alice).max_gpus == 0
    assert AuditEvent.objects.get(action="quota.change").data["changed"] == {"max_gpus": [2, 0]}


def test_quota_set_refuses_non_staff_and_bad_values(alice, bob, staff):
    with pytest.raises(PermissionDenied):
        quota_set(user=bob, by=alice, **LIMITS)
    with pytest.raises(QuotaInvalid) as err:
        quota_set(user=bob, by=staff, **{**LIMITS, "gpu_hours_per_month": float("nan")})
    assert err.value.field == "gpu_hours_per_month"
    with pytest.raises(QuotaInvalid):
        quota_set(user=bob, by=staff, **{**LIMITS, "max_concurrent_runs": -1})
    with pytest.raises(QuotaInvalid) as err:
        quota_set(user=bob, by=staff, **{**LIMITS, "max_gpus": 2**31})
    assert err.value.field == "max_gpus"
    assert not GpuQuota.objects.filter(user=bob).exists()
    assert not AuditEvent.objects.filter(action__startswith="quota.").exists()


def test_queue_cancel_stops_a_queued_run_only(alice, staff, make_run):
    waiting, running = make_run(alice, "waiting"), make_run(alice, "running")
    run_transition(run=running, to=S.SUBMITTING)
    run_transition(run=running, to=S.RUNNING)
    with pytest.raises(PermissionDenied):
        queue_cancel(run=waiting, by=alice)
    assert queue_cancel(run=waiting, by=staff).status == S.STOPPED
    event = AuditEvent.objects.get(action="run.queue_cancel")
    assert event.actor == staff and event.data["owner"] == "alice"
    with pytest.raises(RunRefused, match="not queued"):
        queue_cancel(run=running, by=staff)
    assert Run.objects.get(pk=running.pk).status == S.RUNNING


# ------------------------------------------------------------------ the page

def test_anonymous_and_non_staff_are_sent_to_the_admin_login(alice, make_run, client):
    run = make_run(alice, "mine")
    for who in (client, _client(alice)):
        response = who.get(PAGE)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
        for url, data in [(PAGE + "quota/", {"user": "alice", **LIMITS}),
                          (f"{PAGE}queue/{run.pk}/move/", {"to": "front"}),
                          (f"{PAGE}queue/{run.pk}/cancel/", {})]:
            assert who.post(url, data).status_code == 302
    assert not GpuQuota.objects.filter(user=alice).exists()
    assert Run.objects.get(pk=run.pk).status == S.QUEUED
    assert "/quotas/admin/" not in _client(alice).get("/runs/").content.decode()  # no nav link


def test_page_shows_users_usage_the_queue_with_reasons_and_ray_unreachable(alice, bob, staff, make_run, no_ray):
    GpuQuota.objects.create(user=alice, max_gpus=2, gpu_hours_per_month=10, max_concurrent_runs=1)
    held = make_run(alice, "held", gpus=2)
    run_transition(run=held, to=S.SUBMITTING)
    waiting = make_run(alice, "waiting")
    Run.objects.filter(pk=waiting.pk).update(queue_reason="you run 1 of your 1 concurrent run")
    bobs = make_run(bob, "bobs")
    response = _client(staff).get(PAGE)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Ray unreachable" in html and "RAY_ADDRESS is not set" in html
    assert re.search(r'id="cluster-held">2\b', html)
    users = re.findall(r'<tr data-username="([^"]+)"', html)
    assert users == ["alice", "bob", "root"]
    alice_row = html.split('data-username="alice"')[1].split("</tr>")[0]
    assert "own" in alice_row and "2 of 2" in alice_row and "1 of 1" in alice_row
    queue = re.findall(r'<tr data-run-id="(\d+)">', html)
    assert queue == [str(waiting.pk), str(bobs.pk)]
    assert "you run 1 of your 1 concurrent run" in html and "next reconcile" in html
    chart = json.loads(re.search(r'<script id="quota-admin-data" type="application/json">(.*?)</script>',
                                 html).group(1))
    assert [u["username"] for u in chart["users"]] == ["alice", "bob", "root"]
    assert chart["users"][0]["gpus_held"] == 2 and chart["users"][0]["max_concurrent_runs"] == 1
    assert '/static/js/quota_admin.js' in html and 'href="/quotas/admin/"' in html  # nav link for staff
    assert "<script>" not in html  # the CSP allows no inline script without the nonce


def test_page_shows_the_clusters_gpus_when_ray_answers(staff, monkeypatch):
    monkeypatch.setattr("rlstudio.runs.ray_jobs.cluster_total_gpus", lambda: 8.0)
    html = _client(staff).get(PAGE).content.decode()
    assert "Ray unreachable" not in html
    assert re.search(r'id="cluster-gpus">8<', html) and "(8 free)" in html


def test_quota_form_picks_the_user_by_name_and_prefills(alice, staff, no_ray):
    admin = _client(staff)
    form = admin.get(PAGE).content.decode()
    assert '<option value="alice">alice</option>' in form  # a select of names, not a raw id box
    response = admin.post(PAGE + "quota/", {"user": "alice", **LIMITS})
    assert response.status_code == 302 and response["Location"] == PAGE + "?user=alice"
    quota = GpuQuota.objects.get(user=alice)
    assert (quota.max_gpus, quota.gpu_hours_per_month, quota.max_concurrent_runs, quota.max_queued_runs) == (2, 40.5, 3, 7)
    assert AuditEvent.objects.filter(action="quota.create", actor=staff).exists()
    page = admin.get(response["Location"]).content.decode()
    assert "Quota of alice saved" in page
    assert '<option value="alice" selected>alice</option>' in page
    assert 'name="gpu_hours_per_month" value="40.5"' in page


@pytest.mark.parametrize("data, field", [
    ({"user": "nobody", **LIMITS}, "user"),
    ({"user": "alice", **LIMITS, "max_gpus": -1}, "max_gpus"),
    ({"user": "alice", **LIMITS, "gpu_hours_per_month": "lots"}, "gpu_hours_per_month"),
    # Past PostgreSQL's integer column: a 400 on the field, not the database's 500.
    ({"user": "alice", **LIMITS, "max_gpus": 10**20}, "max_gpus"),
    ({"user": "alice", **LIMITS, "max_concurrent_runs": 2**31}, "max_concurrent_runs"),
    ({"user": "alice", **LIMITS, "max_queued_runs": 99999999999}, "max_queued_runs"),
])
def test_quota_form_errors_answer_400_next_to_the_field(alice, staff, no_ray, data, field):
    response = _client(staff).post(PAGE + "quota/", data)
    assert response.status_code == 400
    assert field in response.context["form"].errors
    assert 'class="field-error"' in response.content.decode()
    assert not GpuQuota.objects.filter(user=alice).exists()


def test_move_and_cancel_are_posts_with_csrf(alice, bob, staff, make_run, no_ray):
    first, second = make_run(alice, "first"), make_run(bob, "second")
    admin = _client(staff)
    assert admin.get(f"{PAGE}queue/{second.pk}/move/").status_code == 405
    assert admin.post(f"{PAGE}queue/{second.pk}/move/", {"to": "sideways"}).status_code == 400
    strict = _client(staff, enforce_csrf_checks=True)
    assert strict.post(f"{PAGE}queue/{second.pk}/move/", {"to": "front"}).status_code == 403
    assert strict.post(f"{PAGE}queue/{first.pk}/cancel/", {}).status_code == 403
    assert Run.objects.get(pk=first.pk).status == S.QUEUED

    response = admin.post(f"{PAGE}queue/{second.pk}/move/", {"to": "front"}, follow=True)
    html = response.content.decode()
    assert "moved to the front of the queue" in html
    assert re.findall(r'<tr data-run-id="(\d+)">', html) == [str(second.pk), str(first.pk)]
    html = admin.post(f"{PAGE}queue/{first.pk}/cancel/", {}, follow=True).content.decode()
    assert f"Run #{first.pk} (first) cancelled." in html
    assert Run.objects.get(pk=first.pk).status == S.STOPPED
    assert AuditEvent.objects.filter(action="run.queue_cancel", actor=staff).exists()
    # Cancelling it again is refused with the reason, not a 500.
    html = admin.post(f"{PAGE}queue/{first.pk}/cancel/", {}, follow=True).content.decode()
    assert "is stopped, not queued" in html
    assert admin.post(f"{PAGE}queue/999999/move/", {"to": "front"}).status_code == 404


def test_admin_index_links_the_page_and_the_quota_form_picks_users_by_name(staff):
    admin = _client(staff)
    assert 'href="/quotas/admin/"' in admin.get("/admin/").content.decode()
    add = admin.get("/admin/quotas/gpuquota/add/").content.decode()
    assert "admin-autocomplete" in add and "vForeignKeyRawIdAdminField" not in add
    found = admin.get("/admin/autocomplete/", {"app_label": "quotas", "model_name": "gpuquota",
                                               "field_name": "user", "term": "roo"}).json()
    assert [r["text"] for r in found["results"]] == ["root"]


def test_page_counts_running_evaluations_gpus_as_admission_does(alice, bob, staff, make_run, make_model,
                                                                make_dataset, monkeypatch):
    """A running evaluation holds its GPUs and one concurrent-run slot on the page (the user's row, the
    cluster) exactly as admission counts them; queued or finished ones and playground sessions (on the
    worker's CPU) hold none."""
    from django.utils import timezone

    from rlstudio.evaluations.models import Evaluation, EvaluationStatus as E
    from rlstudio.playground.models import PlaygroundSession, SessionStatus
    from rlstudio.quotas.selectors import quota_usage_for
    from rlstudio.quotas.services import admission_reason

    monkeypatch.setattr("rlstudio.runs.ray_jobs.cluster_total_gpus", lambda: 8.0)
    GpuQuota.objects.create(user=alice, max_gpus=3, gpu_hours_per_month=100, max_concurrent_runs=4)
    held = make_run(alice, "held", gpus=1)
    run_transition(run=held, to=S.SUBMITTING)
    model, data = make_model(alice), make_dataset(alice)
    common = {"model": model, "owner": alice, "dataset": data, "k": 2, "max_prompts": 4}
    Evaluation.objects.create(**common, gpus=2, status=E.RUNNING, started=timezone.now())
    Evaluation.objects.create(**common, gpus=1, status=E.QUEUED)
    Evaluation.objects.create(**common, gpus=1, status=E.SUCCEEDED, started=timezone.now(), finished=timezone.now())
    Evaluation.objects.create(**{**common, "owner": bob}, gpus=0, status=E.RUNNING, started=timezone.now())
    PlaygroundSession.objects.create(owner=alice, status=SessionStatus.RUNNING, started=timezone.now())

    html = _client(staff).get(PAGE).content.decode()
    alice_row = html.split('data-username="alice"')[1].split("</tr>")[0]
    cells = re.findall(r'<td class="num">(\d+) of (\d+)', alice_row)
    assert cells[0] == ("3", "3")  # GPUs held: the run's 1 + the running evaluation's 2
    assert cells[1] == ("2", "4") and "(incl. 1 evaluation)" in alice_row  # runs active: the run + the evaluation
    bob_row = html.split('data-username="bob"')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">(\d+) of', bob_row)[:2] == ["0", "1"]  # a CPU evaluation: a slot, no GPU
    assert re.search(r'id="cluster-held">3 <span class="muted small">\(2 by evaluations\)</span> \(5 free\)', html)

    usage = quota_usage_for(user=alice)  # the page agrees with "Your quota" and with admission
    assert (usage.gpus_held, usage.runs_active) == (3, 2)
    waiting = make_run(alice, "waiting", gpus=1)
    assert admission_reason(run=waiting, cluster_free_gpus=None) == "you hold 3 of your 3 GPUs and this run needs 1"
    Evaluation.objects.filter(status=E.RUNNING).update(status=E.SUCCEEDED, finished=timezone.now())
    alice_row = _client(staff).get(PAGE).content.decode().split('data-username="alice"')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">(\d+) of (\d+)', alice_row)[:2] == [("1", "3"), ("1", "4")]
    assert admission_reason(run=waiting, cluster_free_gpus=None) == ""
