"""Quotas: the effective quota and the usage GET /api/v1/quota/ reports."""
from datetime import datetime, timedelta, timezone as dt_tz

import pytest
from django.test import Client

from rlstudio.quotas.models import GpuQuota
from rlstudio.quotas.selectors import gpu_hours_between, quota_for, quota_usage_for
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_transition

pytestmark = pytest.mark.django_db
S = RunStatus


def test_default_applies_until_a_user_row_exists(alice):
    assert quota_for(user=alice).is_default
    own = GpuQuota.objects.create(user=alice, max_gpus=8, gpu_hours_per_month=500, max_concurrent_runs=4)
    assert quota_for(user=alice) == own


def test_the_quota_by_owner_id_is_the_same_rule_and_the_policy_reads_it(alice, bob):
    """quota_for by id: the user's own row, else the default (put back if deleted); the quota policy's
    max_gpus (what admission and launches ask by owner id) is that quota's."""
    from rlstudio.quotas.services import Quotas

    own = GpuQuota.objects.create(user=alice, max_gpus=8, gpu_hours_per_month=500, max_concurrent_runs=4)
    assert quota_for(user_id=alice.pk) == own and Quotas().max_gpus(owner_id=alice.pk) == 8
    default = quota_for(user_id=bob.pk)
    assert default.is_default and Quotas().max_gpus(owner_id=bob.pk) == default.max_gpus
    GpuQuota.objects.filter(is_default=True).update(max_gpus=3)
    assert Quotas().max_gpus(owner_id=bob.pk) == 3
    GpuQuota.objects.filter(is_default=True).delete()
    assert quota_for(user_id=bob.pk).is_default  # the shipped default, put back
    with pytest.raises(TypeError):
        quota_for(user=alice, user_id=alice.pk)


def test_gpu_hours_clip_runs_to_the_window(alice, make_run):
    start = datetime(2026, 11, 1, tzinfo=dt_tz.utc)
    end = datetime(2026, 11, 20, tzinfo=dt_tz.utc)
    a, b, c, d = (make_run(alice, n, gpus=g) for n, g in [("a", 2), ("b", 4), ("c", 1), ("d", 8)])
    # a: 2 GPUs for 3 h inside the window → 6; b: 4 GPUs, started 1 h before the window, ran 2 h → 4
    # c: still running since 10 h before `end` → 10; d: finished before the window → 0.
    Run.objects.filter(pk=a.pk).update(started=start + timedelta(days=2), finished=start + timedelta(days=2, hours=3))
    Run.objects.filter(pk=b.pk).update(started=start - timedelta(hours=1), finished=start + timedelta(hours=1))
    Run.objects.filter(pk=c.pk).update(started=end - timedelta(hours=10), finished=None)
    Run.objects.filter(pk=d.pk).update(started=start - timedelta(days=3), finished=start - timedelta(days=2))
    assert gpu_hours_between(user=alice, start=start, end=end) == pytest.approx(6 + 4 + 10)


def test_usage_counts_active_runs_and_queue_positions(alice, bob, make_run):
    bob_first = make_run(bob, "bob-queued")
    held = make_run(alice, "held", gpus=2)
    for to in [S.SUBMITTING, S.RUNNING]:
        run_transition(run=held, to=to)
    stopping = make_run(alice, "stopping", gpus=1)
    for to in [S.SUBMITTING, S.RUNNING, S.STOPPING]:
        run_transition(run=stopping, to=to)
    done = make_run(alice, "done", gpus=4)
    for to in [S.SUBMITTING, S.RUNNING, S.SUCCEEDED]:
        run_transition(run=done, to=to)
    waiting = make_run(alice, "waiting", gpus=1)
    run_transition(run=waiting, to=S.SUBMITTING)
    run_transition(run=waiting, to=S.QUEUED, reason="you hold 3 of your 1 GPUs")
    usage = quota_usage_for(user=alice)
    assert usage.gpus_held == 3 and usage.runs_active == 2
    assert usage.max_gpus == 1 and usage.is_default
    assert [(q.name, q.position, q.reason) for q in usage.queued] == [("waiting", 2, "you hold 3 of your 1 GPUs")]
    assert bob_first.status == S.QUEUED

    client = Client()
    client.force_login(alice)
    body = client.get("/api/v1/quota/").json()
    assert body["gpus_held"] == 3 and body["runs_active"] == 2 and body["max_concurrent_runs"] == 2
    assert body["queued"] == [{"id": waiting.pk, "name": "waiting", "position": 2, "reason": "you hold 3 of your 1 GPUs"}]
    assert body["gpu_hours_this_month"] >= 0


def test_a_deleted_default_quota_is_put_back_as_shipped_not_a_500(alice):
    """Deleting the default row (admin, or a test emptying the table) once made every launch and
    quota page answer 500; the shipped default (finite, editable in the admin) comes back instead."""
    from rlstudio.quotas.models import SHIPPED_DEFAULT

    GpuQuota.objects.all().delete()
    client = Client()
    client.force_login(alice)
    response = client.get("/api/v1/quota/")
    assert response.status_code == 200, response.content
    assert response.json()["max_gpus"] == SHIPPED_DEFAULT["max_gpus"]
    restored = GpuQuota.objects.get(is_default=True)
    assert (restored.max_gpus, restored.gpu_hours_per_month, restored.max_concurrent_runs) == (1, 100.0, 2)
    assert quota_for(user=alice) == restored and GpuQuota.objects.count() == 1


def test_admin_list_shows_usage_and_queued_runs(alice, staff, make_run):
    GpuQuota.objects.create(user=alice, max_gpus=2, gpu_hours_per_month=10, max_concurrent_runs=1)
    running = make_run(alice, "running", gpus=2)
    run_transition(run=running, to=S.SUBMITTING)
    waiting = make_run(alice, "waiting", gpus=1)
    Run.objects.filter(pk=waiting.pk).update(queue_reason="you run 1 of your 1 concurrent run")
    admin = Client()
    admin.force_login(staff)
    page = admin.get("/admin/quotas/gpuquota/").content.decode()
    assert "2 GPUs / 1 runs" in page
    assert f"#{waiting.pk} at 1: you run 1 of your 1 concurrent run" in page
