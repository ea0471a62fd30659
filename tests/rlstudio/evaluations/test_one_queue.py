"""Runs and evaluations wait in one queue: admitted in the order they were queued when they compete for
the same capacity (the owner's quota, the cluster's GPUs), one admission pass for both kinds, serialized
by one lock; the staff quota page lists queued evaluations with their kind, owner and position."""
import re
import threading
from datetime import datetime, timedelta, timezone as dt_tz

import pytest
from django.db import connections
from django.test import Client
from django.utils import timezone

from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.quotas.models import GpuQuota
from rlstudio.quotas.selectors import queue_in_order, quota_usage_for
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.queue import Attempt, QueuedJob, admission_pass, queue_order
from rlstudio.runs.reconcile import reconcile_all
from rlstudio.runs.services import run_admit, run_queue_move
from rlstudio.runs.services.admission import QUEUE_LOCK, queue_admit_all, queue_admit_jobs

pytestmark = pytest.mark.django_db
E, R = EvaluationStatus, RunStatus
T0 = datetime(2026, 12, 1, 16, 29, tzinfo=dt_tz.utc)


@pytest.fixture
def free_gpus(free_gpus):
    """The evaluations' `free_gpus`, one free to start with."""
    free_gpus.value = 1.0
    return free_gpus


def _quota(*users, gpus=1, runs=1):
    for user in users:
        GpuQuota.objects.create(user=user, max_gpus=gpus, gpu_hours_per_month=100, max_concurrent_runs=runs)


def _queued_at(obj, minute: int):
    type(obj).objects.filter(pk=obj.pk).update(created=T0 + timedelta(minutes=minute))
    obj.refresh_from_db()
    return obj


def _evaluation(owner, data, make_model, *, minute: int, gpus: int = 0, reason: str = "") -> Evaluation:
    model = make_model(owner, f"{owner.username}-policy-{minute}")
    ev = Evaluation.objects.create(owner=owner, model=model, dataset=data, include_base=True, k=1, max_prompts=1,
                                   gpus=gpus, queue_reason=reason)
    return _queued_at(ev, minute)


def _run(owner, make_run, name, *, minute: int, gpus: int = 0) -> Run:
    return _queued_at(make_run(owner, name, gpus=gpus), minute)


def _busy(owner, make_run):
    busy = make_run(owner, f"{owner.username}-busy")
    Run.objects.filter(pk=busy.pk).update(status=R.RUNNING, started=timezone.now())
    return busy


def _end(run):
    Run.objects.filter(pk=run.pk).update(status=R.SUCCEEDED, finished=timezone.now())


# The one queue's order and pass, by hand (no database).

def _job(kind, id, minute, *, owner=1, gpus=0, priority=0):
    return QueuedJob(kind=kind, id=id, owner_id=owner, gpus=gpus, queued_at=T0 + timedelta(minutes=minute),
                     priority=priority)


@pytest.mark.django_db(False)
def test_the_queue_orders_by_priority_then_queue_time_across_kinds():
    ev1 = _job("evaluation", 1, 0)
    run4 = _job("run", 4, 2)
    run2 = _job("run", 2, 0)  # queued at the same instant as ev1: runs first, then by id
    moved = _job("run", 9, 10, priority=1)
    back = _job("run", 3, -5, priority=-1)
    assert queue_order([run4, ev1, back, run2, moved]) == [moved, run2, ev1, run4, back]


@pytest.mark.django_db(False)
def test_the_pass_tries_each_job_in_order_and_hands_the_clusters_gpus_out_once():
    older_ev = _job("evaluation", 1, 0, owner=1, gpus=1)
    newer_run = _job("run", 4, 2, owner=2, gpus=1)
    cpu_run = _job("run", 5, 3, owner=3)
    tried, asked = [], []

    def try_admit(job, free):
        tried.append((job.label, free))
        if job.gpus and free < job.gpus:
            return Attempt(admitted=False, reason=f"the cluster has {free:g} free GPUs", cluster=True)
        return Attempt(admitted=True)

    admitted = admission_pass([cpu_run, newer_run, older_ev], free_gpus=lambda n: asked.append(n) or 1.0,
                              try_admit=try_admit)
    assert admitted == [older_ev, cpu_run]
    assert asked == [1]  # the cluster is asked once, at the first GPU job
    # the newer GPU run sees the GPU the older evaluation took; a CPU job is not held back by the cluster
    assert tried == [("evaluation #1", 1.0), ("run #4", 0.0), ("run #5", None)]


@pytest.mark.django_db(False)
def test_the_pass_keeps_later_gpu_jobs_of_any_kind_behind_one_waiting_for_the_cluster():
    big = _job("run", 1, 0, gpus=2, owner=1)
    small_ev = _job("evaluation", 2, 1, gpus=1, owner=2)
    cpu_ev = _job("evaluation", 3, 2, owner=3)
    gone = _job("run", 4, 3, owner=4)
    answers = {big.label: Attempt(admitted=False, reason="the cluster has 1 free GPUs", cluster=True),
               cpu_ev.label: Attempt(admitted=True), gone.label: None}
    tried = []

    def try_admit(job, free):
        tried.append(job.label)
        return answers[job.label]

    assert admission_pass([gone, cpu_ev, small_ev, big], free_gpus=lambda n: 1.0, try_admit=try_admit) == [cpu_ev]
    assert tried == ["run #1", "evaluation #3", "run #4"]  # the small GPU evaluation does not overtake


@pytest.mark.django_db(False)
def test_a_job_whose_submission_cannot_be_sent_ends_the_pass():
    first, second = _job("run", 1, 0), _job("evaluation", 2, 1, owner=2)
    tried = []

    def try_admit(job, free):
        tried.append(job.label)
        return Attempt(admitted=False, reason="waiting to be submitted", unsent=True)

    assert admission_pass([second, first], free_gpus=lambda n: None, try_admit=try_admit) == []
    assert tried == ["run #1"]


# The one pass, with the database.

def test_an_older_queued_evaluation_gets_the_freed_gpu_before_a_newer_queued_run(alice, bob, data, make_model,
                                                                                   make_run, free_gpus):
    _quota(alice, bob)
    ev = _evaluation(alice, data, make_model, minute=0, gpus=1)
    run = _run(bob, make_run, "bob-run4", minute=2, gpus=1)
    free_gpus.value = 0.0
    assert queue_admit_jobs() == []
    free_gpus.value = 1.0  # bob's run 2 ended: one GPU is free
    assert [j.label for j in queue_admit_jobs()] == [f"evaluation #{ev.pk}"]
    ev.refresh_from_db()
    run.refresh_from_db()
    assert ev.status == E.RUNNING and ev.started
    assert run.status == R.QUEUED and run.queue_reason == "the cluster has 0 free GPUs and this run needs 1"


def test_an_older_queued_run_gets_the_freed_gpu_before_a_newer_queued_evaluation(alice, bob, data, make_model,
                                                                                   make_run, free_gpus):
    _quota(alice, bob)
    run = _run(bob, make_run, "bob-run", minute=0, gpus=1)
    ev = _evaluation(alice, data, make_model, minute=2, gpus=1)
    assert queue_admit_all() == [run.pk]
    ev.refresh_from_db()
    assert ev.status == E.QUEUED and ev.queue_reason == "the cluster has 0 free GPUs and this evaluation needs 1"


def test_the_reconcile_admits_an_older_evaluation_before_the_owners_newer_run(alice, data, make_model, make_run):
    """The repro: evaluation queued at 16:29 behind the owner's concurrent-run cap, run 4 queued at 16:31;
    when the running run ends, the evaluation takes the slot and run 4 waits for it."""
    _quota(alice, runs=1)
    busy = _busy(alice, make_run)
    ev = _evaluation(alice, data, make_model, minute=0)
    run4 = _run(alice, make_run, "run4", minute=2)
    _end(busy)
    result = reconcile_all()
    assert result["admitted_jobs"] == [f"evaluation #{ev.pk}"] and result["admitted"] == []
    ev.refresh_from_db()
    run4.refresh_from_db()
    assert ev.status == E.RUNNING
    assert run4.status == R.QUEUED and "1 of your 1 concurrent run" in run4.queue_reason


def test_the_owners_older_run_goes_before_her_newer_evaluation(alice, data, make_model, make_run):
    _quota(alice, runs=1)
    busy = _busy(alice, make_run)
    run = _run(alice, make_run, "older-run", minute=0)
    ev = _evaluation(alice, data, make_model, minute=2)
    _end(busy)
    assert queue_admit_all() == [run.pk]
    ev.refresh_from_db()
    assert ev.status == E.QUEUED and "1 of your 1 concurrent run" in ev.queue_reason


def test_each_owners_quota_still_applies_to_both_kinds(alice, bob, data, make_model, make_run):
    _quota(alice, bob, runs=1)
    ev = _evaluation(alice, data, make_model, minute=0)
    alices_run = _run(alice, make_run, "alice-run", minute=1)
    bobs_run = _run(bob, make_run, "bob-run", minute=2)
    bobs_ev = _evaluation(bob, data, make_model, minute=3)
    admitted = queue_admit_jobs()
    assert [j.label for j in admitted] == [f"evaluation #{ev.pk}", f"run #{bobs_run.pk}"]
    alices_run.refresh_from_db()
    bobs_ev.refresh_from_db()
    assert alices_run.status == R.QUEUED and "1 of your 1 concurrent run" in alices_run.queue_reason
    assert bobs_ev.status == E.QUEUED and "you run 1 of your 1 concurrent run" in bobs_ev.queue_reason


def test_a_launch_waits_behind_the_owners_older_queued_evaluation_and_vice_versa(alice, data, make_model,
                                                                                 make_run):
    from rlstudio.evaluations.services import evaluation_admit

    _quota(alice, runs=1)
    busy = _busy(alice, make_run)
    ev = _evaluation(alice, data, make_model, minute=0)
    _end(busy)  # the slot is free, the queue pass has not run yet
    late = make_run(alice, "late")
    assert run_admit(run=late) is False
    assert late.queue_reason == f"waiting behind your earlier queued evaluation #{ev.pk}"
    # the mirror: an evaluation waits behind its owner's older queued run
    ev2_owner_run = _run(alice, make_run, "first", minute=-10)
    assert evaluation_admit(evaluation_id=ev.pk) is False
    ev.refresh_from_db()
    assert ev.queue_reason == f"waiting behind your earlier queued run #{ev2_owner_run.pk}"


def test_a_run_moved_to_the_front_goes_before_older_queued_evaluations(alice, bob, staff, data, make_model,
                                                                        make_run, free_gpus):
    _quota(alice, bob)
    ev = _evaluation(alice, data, make_model, minute=0, gpus=1)
    run = _run(bob, make_run, "only-run", minute=2, gpus=1)
    run_queue_move(run=run, by=staff, to="front")
    assert [(q.kind, q.id) for q in queue_in_order()] == [("run", run.pk), ("evaluation", ev.pk)]
    assert queue_admit_all() == [run.pk]


def test_a_pass_finding_another_under_way_admits_nothing(alice, make_run):
    run = make_run(alice, "waiting")
    held, done = threading.Event(), threading.Event()

    def hold():
        try:
            with connections["default"].cursor() as cur:
                cur.execute("SELECT pg_advisory_lock(%s, %s)", list(QUEUE_LOCK))
                held.set()
                done.wait(30)
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", list(QUEUE_LOCK))
        finally:
            connections.close_all()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(30)
        assert queue_admit_jobs() == []
        assert Run.objects.get(pk=run.pk).status == R.QUEUED
    finally:
        done.set()
        thread.join(30)
    assert queue_admit_all() == [run.pk]  # the lock is free again


# What the pages show.

def test_the_quota_page_lists_queued_evaluations_with_kind_owner_and_position(alice, bob, staff, data,
                                                                             make_model, make_run):
    _quota(alice, bob, runs=0)
    run1 = _run(bob, make_run, "bob-run", minute=0)
    ev = _evaluation(alice, data, make_model, minute=1, reason="you run 0 of your 0 concurrent runs")
    run2 = _run(bob, make_run, "bob-later", minute=2)
    entries = queue_in_order()
    assert [(q.position, q.kind, q.id, q.owner) for q in entries] == [
        (1, "run", run1.pk, "bob"), (2, "evaluation", ev.pk, "alice"), (3, "run", run2.pk, "bob")]
    assert [(q.name, q.position) for q in quota_usage_for(user=bob).queued] == [("bob-run", 1), ("bob-later", 3)]
    client = Client()
    client.force_login(staff)
    html = client.get("/quotas/admin/").content.decode()
    rows = re.findall(r'<tr data-(run|evaluation)-id="(\d+)">(.*?)</tr>', html, re.S)
    assert [(kind, int(pk)) for kind, pk, _ in rows] == [("run", run1.pk), ("evaluation", ev.pk), ("run", run2.pk)]
    ev_row = rows[1][2]
    assert ">2<" in ev_row and ">evaluation<" in ev_row and ">alice<" in ev_row
    assert f"evaluation of model {ev.model.name}" in ev_row and "0 of your 0 concurrent runs" in ev_row
    assert "queue_cancel" not in ev_row and "To the front" not in ev_row  # staff move and cancel runs only
    assert re.search(r"Queued evaluations</dt><dd>1<", html)


def test_a_runs_place_on_its_page_counts_the_evaluations_queued_before_it(alice, bob, data, make_model, make_run):
    from rlstudio.runs.selectors import queue_position

    first = _run(bob, make_run, "first", minute=0)
    _evaluation(alice, data, make_model, minute=1)
    later = _run(bob, make_run, "later", minute=2)
    assert [queue_position(run=r) for r in (first, later)] == [1, 3]


def test_the_quota_api_and_page_give_the_callers_queued_evaluation_its_place(alice, bob, data, make_model,
                                                                            make_run):
    from rest_framework.test import APIClient

    _quota(alice, bob, runs=0)
    _run(bob, make_run, "bob-run", minute=0)
    ev = _evaluation(alice, data, make_model, minute=1, reason="you run 0 of your 0 concurrent runs")
    mine = _run(alice, make_run, "alice-run", minute=2)
    api = APIClient()
    api.force_authenticate(alice)
    body = api.get("/api/v1/quota/").json()
    assert body["queued"] == [{"id": mine.pk, "name": "alice-run", "position": 3, "reason": ""}]
    assert body["queued_evaluations"] == [{"id": ev.pk, "name": f"evaluation of model {ev.model.name}",
                                           "position": 2, "reason": "you run 0 of your 0 concurrent runs",
                                           "run": None, "model": ev.model_id}]
    api.force_authenticate(bob)
    assert api.get("/api/v1/quota/").json()["queued_evaluations"] == []
    client = Client()
    client.force_login(alice)
    html = client.get("/runs/quota/").content.decode()
    row = html.split(f'data-evaluation-id="{ev.pk}"')[1].split("</tr>")[0]
    assert ">2<" in row and "0 of your 0 concurrent runs" in row
