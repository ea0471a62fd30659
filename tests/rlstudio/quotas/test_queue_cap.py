"""The queued-runs cap: `check_queue_cap` (quotas.services), the quota field behind it, its default,
its place in the quota API and the admin."""
import threading

import pytest
from django.db import connection, transaction
from django.test import Client

from rlstudio.quotas.models import GpuQuota, default_max_queued_runs
from rlstudio.quotas.selectors import quota_for
from rlstudio.quotas.services import QueueCapReached, check_queue_cap, lock_owner
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_transition

pytestmark = pytest.mark.django_db
S = RunStatus


def _queued(make_run, owner, n, prefix="q"):
    return [make_run(owner, f"{prefix}{i}") for i in range(n)]


def test_refused_at_the_cap_with_the_numbers_in_the_message(alice, make_run):
    GpuQuota.objects.create(user=alice, max_queued_runs=3)
    _queued(make_run, alice, 2)
    check_queue_cap(user=alice)  # 2 of 3: room for one more
    make_run(alice, "third")
    with pytest.raises(QueueCapReached) as exc:
        check_queue_cap(user=alice)
    assert (exc.value.queued, exc.value.limit) == (3, 3)
    assert exc.value.message == str(exc.value) == (
        "you already have 3 queued runs (your quota's max_queued_runs is 3); stop one or wait for one to start")


def test_only_the_users_own_queued_runs_count(alice, bob, make_run):
    GpuQuota.objects.create(user=alice, max_queued_runs=2)
    _queued(make_run, bob, 3, prefix="bob")  # another user's queue is not alice's
    first, second = _queued(make_run, alice, 2)
    with pytest.raises(QueueCapReached):
        check_queue_cap(user=alice)
    # A run that left the queue (submitting, running, stopped) frees its place.
    run_transition(run=first, to=S.SUBMITTING)
    check_queue_cap(user=alice)
    run_transition(run=first, to=S.RUNNING)
    run_transition(run=second, to=S.STOPPED)
    check_queue_cap(user=alice)
    # ...and one sent back to the queue (waiting for quota) takes it again.
    third = make_run(alice, "third")
    run_transition(run=third, to=S.SUBMITTING)
    run_transition(run=third, to=S.QUEUED, reason="you run 1 of your 2 concurrent runs")
    make_run(alice, "fourth")
    with pytest.raises(QueueCapReached):
        check_queue_cap(user=alice)
    assert Run.objects.filter(owner=alice, status=S.QUEUED).count() == 2


def test_staff_are_held_to_their_quota_unless_it_says_otherwise(staff, make_run):
    default = quota_for(user=staff)
    assert default.is_default
    GpuQuota.objects.filter(pk=default.pk).update(max_queued_runs=1)
    make_run(staff, "one")
    with pytest.raises(QueueCapReached):
        check_queue_cap(user=staff)
    GpuQuota.objects.create(user=staff, max_queued_runs=10)  # the staff user's own, larger quota
    check_queue_cap(user=staff)


def test_a_zero_cap_says_so(alice):
    GpuQuota.objects.create(user=alice, max_queued_runs=0)
    with pytest.raises(QueueCapReached) as exc:
        check_queue_cap(user=alice)
    assert exc.value.limit == 0 and "allows no queued runs" in exc.value.message


def test_safe_inside_the_callers_transaction_after_lock_owner(alice, make_run):
    """The lead's launch path: lock_owner, check, create, all in one transaction; a refusal leaves
    that transaction usable (the caller decides what to roll back), and a deleted default quota is
    put back inside it without breaking it."""
    GpuQuota.objects.all().delete()  # quota_for re-creates the default in a savepoint
    with transaction.atomic():
        lock_owner(user=alice)
        check_queue_cap(user=alice)
        _queued(make_run, alice, default_max_queued_runs())
        with pytest.raises(QueueCapReached):
            check_queue_cap(user=alice)
        assert Run.objects.filter(owner=alice).count() == default_max_queued_runs()  # still usable
    assert GpuQuota.objects.get(is_default=True).max_queued_runs == default_max_queued_runs()


def test_default_comes_from_the_setting(settings, alice, bob):
    settings.RLSTUDIO_DEFAULT_MAX_QUEUED_RUNS = 7
    assert GpuQuota.objects.create(user=alice).max_queued_runs == 7
    GpuQuota.objects.all().delete()
    assert quota_for(user=bob).max_queued_runs == 7  # the shipped default, put back


def test_quota_api_and_admin_show_the_field(alice, staff, make_run):
    GpuQuota.objects.create(user=alice, max_queued_runs=4)
    make_run(alice, "waiting")
    client = Client()
    client.force_login(alice)
    body = client.get("/api/v1/quota/").json()
    assert body["max_queued_runs"] == 4 and len(body["queued"]) == 1
    schema = client.get("/api/v1/schema/?format=json").json()
    assert "max_queued_runs" in schema["components"]["schemas"]["QuotaUsage"]["properties"]

    admin = Client()
    admin.force_login(staff)
    quota = GpuQuota.objects.get(user=alice)
    form = admin.get(f"/admin/quotas/gpuquota/{quota.pk}/change/").content.decode()
    assert 'name="max_queued_runs"' in form and 'value="4"' in form
    response = admin.post(f"/admin/quotas/gpuquota/{quota.pk}/change/", {
        "user": alice.pk, "max_gpus": 1, "gpu_hours_per_month": 100, "max_concurrent_runs": 2,
        "max_queued_runs": 9, "dataset_storage_gb": 20})
    assert response.status_code == 302, response.content.decode()[:2000]
    quota.refresh_from_db()
    assert quota.max_queued_runs == 9
    assert "<td class=\"field-max_queued_runs\">9</td>" in admin.get("/admin/quotas/gpuquota/").content.decode()
    refused = admin.post(f"/admin/quotas/gpuquota/{quota.pk}/change/", {
        "user": alice.pk, "max_gpus": 1, "gpu_hours_per_month": 100, "max_concurrent_runs": 2,
        "max_queued_runs": -1, "dataset_storage_gb": 20})
    assert refused.status_code == 200  # the form again, with the constraint's error
    quota.refresh_from_db()
    assert quota.max_queued_runs == 9


@pytest.mark.django_db(transaction=True)
def test_two_launches_under_lock_owner_cannot_both_take_the_last_place(alice, make_run):
    """Two transactions that each lock_owner, check and create: the second waits for the first and
    then sees its run, so exactly one is refused."""
    GpuQuota.objects.create(user=alice, max_queued_runs=1)
    outcomes: list[str] = []
    first_locked, release_first = threading.Event(), threading.Event()

    def launch(name: str, *, hold: bool):
        try:
            with transaction.atomic():
                lock_owner(user=alice)
                if hold:
                    first_locked.set()
                    release_first.wait(10)
                try:
                    check_queue_cap(user=alice)
                except QueueCapReached:
                    outcomes.append(f"{name}: refused")
                    return
                make_run(alice, name)
                outcomes.append(f"{name}: created")
        finally:
            connection.close()

    a = threading.Thread(target=launch, args=("a",), kwargs={"hold": True})
    a.start()
    assert first_locked.wait(10)
    b = threading.Thread(target=launch, args=("b",), kwargs={"hold": False})
    b.start()
    b.join(0.5)
    assert b.is_alive()  # b waits on a's lock
    release_first.set()
    a.join(10)
    b.join(10)
    assert outcomes == ["a: created", "b: refused"]
    assert list(Run.objects.filter(owner=alice).values_list("name", flat=True)) == ["a"]
