"""Places in the one queue and the staff overview do bounded work: a run's place (its page), the
caller's places (`/runs/quota/`, the quota API) and the staff overview's queue never read every queued
row. Places are COUNT queries with the queue's order as conditions, and still match the pure
`queue_order` on a mixed queue (priorities, runs and evaluations queued at the same instant); the
overview lists the queue's first QUEUE_SHOWN jobs and the total."""
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone as dt_tz

import pytest
from django.db import connection
from django.test import Client

from rlstudio.evaluations.models import Evaluation
from rlstudio.evaluations.services import evaluation_job
from rlstudio.quotas import selectors
from rlstudio.quotas.selectors import queue_in_order, quota_admin_overview, quota_usage_for
from rlstudio.runs.models import Run
from rlstudio.runs.queue import queue_order
from rlstudio.runs.selectors import queue_position
from rlstudio.runs.services.queue_order import run_job

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=dt_tz.utc)


@pytest.fixture
def no_ray(settings):
    settings.RAY_ADDRESS = None


@contextmanager
def db_work():
    """Count the queries run and the rows they returned (`.queries`, `.rows`)."""
    class Work:
        queries = rows = 0

    def wrapper(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        Work.queries += 1
        rowcount = context["cursor"].rowcount
        Work.rows += max(rowcount, 0) if sql.lstrip().upper().startswith("SELECT") else 0
        return result

    with connection.execute_wrapper(wrapper):
        yield Work


class Queue:
    """A mixed queue built from the fixtures: `run(owner, minute, priority=0)`, `evaluation(owner, minute)`."""

    def __init__(self, make_user, make_run, make_model, make_dataset):
        self.make_user, self.make_run, self.make_model = make_user, make_run, make_model
        self.data = None
        self.make_dataset = make_dataset
        self.n = 0

    def _at(self, obj, minute, **fields):
        type(obj).objects.filter(pk=obj.pk).update(created=T0 + timedelta(minutes=minute), **fields)
        obj.refresh_from_db()
        return obj

    def run(self, owner, minute, priority=0, gpus=0):
        self.n += 1
        return self._at(self.make_run(owner, f"{owner.username}-r{self.n}", gpus=gpus), minute,
                        queue_priority=priority)

    def evaluation(self, owner, minute):
        self.n += 1
        if self.data is None:
            self.data = self.make_dataset(owner, "eval-data", status="ready")
        model = self.make_model(owner, f"{owner.username}-m{self.n}")
        ev = Evaluation.objects.create(owner=owner, model=model, dataset=self.data, include_base=True, k=1,
                                       max_prompts=1)
        return self._at(ev, minute)

    def others(self, users=3, runs=10, minute=30):
        """More users, each with `runs` queued runs and a queued evaluation, after the others (or before)."""
        for i in range(users):
            user = self.make_user(f"other{self.n}-{i}")
            for j in range(runs):
                self.run(user, minute + i * runs + j)
            self.evaluation(user, minute + i)


@pytest.fixture
def queue(make_user, make_run, make_model, make_dataset):
    return Queue(make_user, make_run, make_model, make_dataset)


def _pure_positions():
    jobs = [run_job(r) for r in Run.objects.filter(status="queued")]
    jobs += [evaluation_job(e) for e in Evaluation.objects.filter(status="queued")]
    return {(j.kind, j.id): i + 1 for i, j in enumerate(queue_order(jobs))}


def _mixed(queue, alice, bob, carol):
    queue.run(alice, 1)
    queue.evaluation(bob, 1)       # queued at the same instant as alice's run: after it
    queue.run(bob, 1)              # same instant again: runs first, then by id
    queue.evaluation(carol, 0)
    queue.run(alice, 5, priority=1)   # moved to the front
    queue.run(carol, 0, priority=-1)  # moved to the back
    queue.run(bob, 2)
    ev = queue.evaluation(alice, 3)
    Evaluation.objects.create(owner=alice, model=ev.model, dataset=ev.dataset, include_base=True, k=1,
                              max_prompts=1, created=ev.created)  # same instant as another evaluation: by id
    Evaluation.objects.filter(owner=alice).order_by("-id").update(created=ev.created)


def test_places_match_the_pure_queue_order_on_a_mixed_queue(alice, bob, make_user, queue):
    carol = make_user("carol")
    _mixed(queue, alice, bob, carol)
    expected = _pure_positions()
    assert len(expected) == 9
    for run in Run.objects.filter(status="queued"):
        assert queue_position(run=run) == expected["run", run.pk], run.name
    for user in (alice, bob, carol):
        usage = quota_usage_for(user=user)
        assert {("run", q.id): q.position for q in usage.queued} == {
            k: p for k, p in expected.items() if k[0] == "run" and Run.objects.get(pk=k[1]).owner_id == user.pk}
        assert {("evaluation", q.id): q.position for q in usage.queued_evaluations} == {
            k: p for k, p in expected.items()
            if k[0] == "evaluation" and Evaluation.objects.get(pk=k[1]).owner_id == user.pk}
    in_order = sorted(expected, key=expected.get)
    assert [(q.kind, q.id) for q in queue_in_order()] == in_order
    assert [(q.kind, q.id, q.position) for q in queue_in_order(limit=4)] == [
        (kind, id, i + 1) for i, (kind, id) in enumerate(in_order[:4])]


def test_a_runs_place_is_counted_not_loaded(alice, bob, make_user, queue):
    _mixed(queue, alice, bob, make_user("carol"))
    last = queue.run(alice, 20)
    with db_work() as small:
        small_place = queue_position(run=last)
    queue.others()
    with db_work() as large:
        large_place = queue_position(run=last)
    assert large_place == small_place == _pure_positions()["run", last.pk]
    assert large.queries == small.queries and large.rows == small.rows


def test_the_callers_places_do_not_read_the_rest_of_the_queue(alice, bob, make_user, queue):
    _mixed(queue, alice, bob, make_user("carol"))
    with db_work() as small:
        quota_usage_for(user=alice)
    queue.others(minute=-100)  # older than alice's jobs: her places change, her work does not
    with db_work() as large:
        usage = quota_usage_for(user=alice)
    expected = _pure_positions()
    assert [q.position for q in usage.queued] == [expected["run", q.id] for q in usage.queued]
    assert [q.position for q in usage.queued_evaluations] == [expected["evaluation", q.id]
                                                              for q in usage.queued_evaluations]
    assert large.queries == small.queries and large.rows == small.rows


def test_the_staff_overview_lists_the_queues_head_and_its_total(alice, bob, staff, make_user, queue, no_ray,
                                                               monkeypatch):
    monkeypatch.setattr(selectors, "QUEUE_SHOWN", 5)
    _mixed(queue, alice, bob, make_user("carol"))
    with db_work() as small:
        quota_admin_overview()
    queue.others()
    with db_work() as large:
        overview = quota_admin_overview()
    in_order = sorted(_pure_positions(), key=_pure_positions().get)
    assert [(q.kind, q.id, q.position) for q in overview.queue] == [
        (kind, id, i + 1) for i, (kind, id) in enumerate(in_order[:5])]
    assert overview.queue_total == len(in_order) == 9 + 33
    assert large.queries == small.queries
    # rows: the users' table grows with the 3 new users (their row, their count of queued runs, their
    # datasets' bytes...), the queue's rows do not grow with their 33 jobs
    assert large.rows - small.rows <= 3 * 4
    client = Client()
    client.force_login(staff)
    page = client.get("/quotas/admin/").content.decode()
    assert "The first 5 of 42 queued jobs" in page
    assert page.count("data-run-id=") + page.count("data-evaluation-id=") == 5
