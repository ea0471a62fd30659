"""A launch admits its job only as the one queue's pass would: a GPU run or evaluation launched now
never takes free GPUs ahead of an older queued GPU job of ANOTHER user that waits for the cluster's
GPUs; a user at their quota holds no one back; a CPU job is not held back by the cluster. The launch
records its job queued, then runs a pass of the whole queue (`queue_admit_launched`)."""
import threading
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.evaluations.services import evaluation_new_for_model
from rlstudio.quotas.models import GpuQuota
from rlstudio.quotas.services import Quotas
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_new
from rlstudio.runs.services.admission import HELD_BACK_REASON, QUEUE_LOCK, queue_admit_jobs

pytestmark = pytest.mark.django_db
E, R = EvaluationStatus, RunStatus


@pytest.fixture
def data(alice, make_dataset):
    return make_dataset(alice, "eval-data", status="ready", visibility="everyone")


@pytest.fixture
def policy(alice, make_model):
    return make_model(alice, "alice-policy", tokenizer_ok=True, visibility="everyone")


def _quota(*users, gpus=2, runs=2):
    for user in users:
        GpuQuota.objects.create(user=user, max_gpus=gpus, gpu_hours_per_month=100, max_concurrent_runs=runs)


def _older(obj, minutes=10):
    type(obj).objects.filter(pk=obj.pk).update(created=timezone.now() - timedelta(minutes=minutes))
    obj.refresh_from_db()
    return obj


def _launch(owner, data, policy, name, gpus=1):
    return run_new(owner=owner, name=name, dataset=data, model=policy, preset="cpu_smoke", gpus=gpus)


def test_a_launched_gpu_run_does_not_take_the_gpu_another_users_older_queued_run_waits_for(
        alice, bob, data, policy, make_run, free_gpus):
    _quota(alice, bob)
    bobs = _older(make_run(bob, "bob-waits", gpus=1))
    assert queue_admit_jobs() == []  # no free GPU: bob's run waits for the cluster
    bobs.refresh_from_db()
    assert bobs.queue_reason.startswith("the cluster has 0 free GPUs")
    free_gpus.value = 1.0  # a GPU frees up; the reconcile's pass has not run yet
    launched = _launch(alice, data, policy, "alice-new")
    bobs.refresh_from_db()
    assert bobs.status == R.SUBMITTING  # the older job got the GPU...
    assert launched.status == R.QUEUED  # ...and the launch waits behind it
    assert launched.queue_reason == "the cluster has 0 free GPUs and this run needs 1"


def test_a_launch_behind_an_older_job_still_waiting_for_the_cluster_is_held_back(
        alice, bob, data, policy, make_run, free_gpus):
    """Bob's older run needs 2 GPUs and 1 is free: alice's 1-GPU run would fit, but does not overtake."""
    _quota(alice, bob)
    bobs = _older(make_run(bob, "bob-big", gpus=2))
    free_gpus.value = 1.0
    launched = _launch(alice, data, policy, "alice-small")
    bobs.refresh_from_db()
    assert bobs.status == R.QUEUED and bobs.queue_reason == "the cluster has 1 free GPUs and this run needs 2"
    assert launched.status == R.QUEUED and launched.queue_reason == HELD_BACK_REASON


def test_a_launched_gpu_evaluation_waits_behind_another_users_older_run_waiting_for_the_cluster(
        alice, bob, data, policy, make_run, free_gpus, published):
    _quota(alice, bob)
    bobs = _older(make_run(bob, "bob-big", gpus=2))
    free_gpus.value = 1.0
    ev = evaluation_new_for_model(user=alice, model=policy, dataset=data, data={"k": 1, "gpus": 1})
    assert ev.status == E.QUEUED and ev.queue_reason == HELD_BACK_REASON
    assert Run.objects.get(pk=bobs.pk).status == R.QUEUED
    free_gpus.value = 2.0  # bob's run goes first, then the evaluation when GPUs are left for it
    assert [j.label for j in queue_admit_jobs()] == [f"run #{bobs.pk}"]
    free_gpus.value = 1.0
    assert [j.label for j in queue_admit_jobs()] == [f"evaluation #{ev.pk}"]


def test_a_launched_gpu_run_waits_behind_another_users_older_evaluation_waiting_for_the_cluster(
        alice, bob, data, policy, free_gpus, published):
    _quota(alice, bob)
    ev = evaluation_new_for_model(user=bob, model=policy, dataset=data, data={"k": 1, "gpus": 1})
    assert ev.status == E.QUEUED
    _older(ev)
    free_gpus.value = 1.0
    launched = _launch(alice, data, policy, "alice-new")
    assert Evaluation.objects.get(pk=ev.pk).status == E.RUNNING
    assert launched.status == R.QUEUED


def test_an_older_job_whose_owner_is_at_quota_holds_no_launch_back(alice, bob, data, policy, make_run,
                                                                   free_gpus):
    _quota(alice)
    _quota(bob, gpus=1)  # bob holds his one GPU: his run waits for his quota, not for the cluster
    Run.objects.filter(pk=make_run(bob, "bob-holder", gpus=1).pk).update(status=R.RUNNING)
    bobs = _older(make_run(bob, "bob-over-quota", gpus=1))
    free_gpus.value = 1.0
    launched = _launch(alice, data, policy, "alice-new")
    assert launched.status == R.SUBMITTING
    bobs.refresh_from_db()
    assert bobs.status == R.QUEUED and bobs.queue_reason.startswith("you hold 1 of your 1 GPU")


def test_a_cpu_launch_is_not_held_back_by_gpu_jobs_waiting_for_the_cluster(alice, bob, data, policy, make_run,
                                                                           free_gpus):
    _quota(alice, bob)
    _older(make_run(bob, "bob-big", gpus=2))
    free_gpus.value = 1.0
    assert _launch(alice, data, policy, "alice-cpu", gpus=0).status == R.SUBMITTING


def test_a_launch_is_admitted_at_once_when_nothing_older_waits(alice, data, policy, free_gpus):
    _quota(alice)
    free_gpus.value = 1.0
    launched = _launch(alice, data, policy, "alice-first")
    assert launched.status == R.SUBMITTING and launched.queue_reason == ""


@pytest.mark.django_db(transaction=True)  # committed: a pass's transaction-level lock ends with it
def test_a_launchs_transaction_never_takes_the_queues_lock(alice, bob, data, policy, free_gpus, published,
                                                            monkeypatch):
    """A launch's transaction (a run's, an evaluation's) holds no queue lock when it takes its owner's:
    launches never serialize on the queue's lock, and a pass holding it that waits for the owner's lock
    is never waited for by that launch (its own pass runs after it commits)."""
    seen = []
    original = Quotas.lock_owner

    def queue_lock_free() -> bool:
        try:
            with connections["default"].cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s, %s)", list(QUEUE_LOCK))
                free = cur.fetchone()[0]
                if free:
                    cur.execute("SELECT pg_advisory_unlock(%s, %s)", list(QUEUE_LOCK))
                return free
        finally:
            connections.close_all()

    def lock_owner(self, *, user):
        if not seen:  # the launch's own lock, before any pass
            thread = threading.Thread(target=lambda: seen.append(queue_lock_free()))
            thread.start()
            thread.join(30)
        original(self, user=user)

    monkeypatch.setattr(Quotas, "lock_owner", lock_owner)
    _quota(alice, bob)
    _launch(alice, data, policy, "alice-run", gpus=0)
    assert seen == [True]
    seen.clear()
    evaluation_new_for_model(user=bob, model=policy, dataset=data, data={"k": 1})
    assert seen == [True]
