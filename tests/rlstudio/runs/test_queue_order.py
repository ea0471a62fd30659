"""The queue's order: admission takes queued runs by (-queue_priority, created, id), and staff move a
run to the front or back of it (`run_queue_move`), per-user FIFO following the same order."""
import pytest
from django.core.exceptions import PermissionDenied

from rlstudio.accounts.models import AuditEvent
from rlstudio.quotas.models import GpuQuota
from rlstudio.quotas.selectors import queue_in_order, quota_usage_for
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.selectors import queue_position
from rlstudio.runs.services import RunRefused, queue_admit_all, run_admit, run_queue_move, run_transition

pytestmark = pytest.mark.django_db
S = RunStatus


def _order() -> list[str]:
    return [q.name for q in queue_in_order()]


def test_moving_a_users_later_run_to_the_front_lets_it_go_first(alice, staff, make_run):
    first, second = make_run(alice, "first"), make_run(alice, "second")
    assert run_admit(run=second, by=alice) is False  # per-user FIFO: behind "first"
    run_queue_move(run=second, by=staff, to="front")
    assert _order() == ["second", "first"]
    assert run_admit(run=first, by=alice) is False
    assert f"earlier queued run #{second.pk}" in Run.objects.get(pk=first.pk).queue_reason
    assert run_admit(run=second, by=alice) is True
    event = AuditEvent.objects.get(action="run.queue_move")
    assert event.actor == staff and event.object_id == str(second.pk)
    assert event.data["to"] == "front" and event.data["priority"] > event.data["priority_before"]


def test_queue_admit_all_hands_the_clusters_gpus_out_in_the_moved_order(alice, bob, staff, make_run, monkeypatch):
    for user in (alice, bob):
        GpuQuota.objects.create(user=user, max_gpus=1, gpu_hours_per_month=100, max_concurrent_runs=1)
    older, newer = make_run(alice, "alice-gpu", gpus=1), make_run(bob, "bob-gpu", gpus=1)
    monkeypatch.setattr("rlstudio.runs.services.cluster._cluster_free_gpus", lambda *, needed: 1.0)
    run_queue_move(run=newer, by=staff, to="front")
    assert queue_admit_all() == [newer.pk]
    older.refresh_from_db()
    assert older.status == S.QUEUED
    assert older.queue_reason == "the cluster has 0 free GPUs and this run needs 1"


def test_back_puts_a_run_behind_every_other_and_positions_follow(alice, bob, staff, make_run):
    a1, b1, a2 = make_run(alice, "a1"), make_run(bob, "b1"), make_run(alice, "a2")
    assert _order() == ["a1", "b1", "a2"]
    run_queue_move(run=a1, by=staff, to="back")
    assert _order() == ["b1", "a2", "a1"]
    assert [queue_position(run=Run.objects.get(pk=r.pk)) for r in (b1, a2, a1)] == [1, 2, 3]
    assert [(q.name, q.position) for q in quota_usage_for(user=alice).queued] == [("a2", 2), ("a1", 3)]
    run_queue_move(run=a1, by=staff, to="front")
    assert _order() == ["a1", "b1", "a2"]
    # A second move to the front of a run already there changes nothing but is still recorded.
    run_queue_move(run=a1, by=staff, to="front")
    assert _order() == ["a1", "b1", "a2"]
    assert AuditEvent.objects.filter(action="run.queue_move").count() == 3


def test_only_staff_move_only_queued_runs(alice, staff, make_run):
    first, second = make_run(alice, "first"), make_run(alice, "second")
    with pytest.raises(PermissionDenied):
        run_queue_move(run=second, by=alice, to="front")
    assert _order() == ["first", "second"]
    assert not AuditEvent.objects.filter(action="run.queue_move").exists()
    with pytest.raises(ValueError, match="unknown queue move"):
        run_queue_move(run=second, by=staff, to="middle")
    run_transition(run=first, to=S.SUBMITTING)
    with pytest.raises(RunRefused, match="not queued"):
        run_queue_move(run=first, by=staff, to="back")
    assert Run.objects.get(pk=first.pk).queue_priority == 0


def test_runs_asks_quotas_through_the_registered_policy_never_none(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    from rlstudio.quotas.services import Quotas
    from rlstudio.runs.services import queue_registry

    assert isinstance(queue_registry.quota_policy(), Quotas)  # registered by QuotasConfig.ready
    monkeypatch.setattr(queue_registry, "_QUOTA_POLICY", [])
    with pytest.raises(ImproperlyConfigured, match="no quota policy"):
        queue_registry.quota_policy()
