"""A launch's queue pass never breaks the launch: the queue's lock is a transaction-level lock (no failed
transaction can leave it held), a launch waits a bounded time for a pass under way and otherwise leaves
its job queued with a reason, an error of the pass never reaches the client (its job is saved), Ray is
asked at most once per launch (its answer cached a few seconds), a broker that is down costs one try
per pass and every job it admitted says why it waits again, and queue reasons are clipped by one rule.

Real PostgreSQL, no Ray, no broker."""
import contextlib
import io
import json
import threading
import time

import pytest
from django.db import DataError, connections, transaction
from django.test import Client

from rlstudio.accounts.models import AuditEvent
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs import dispatch, ray_jobs
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import admission
from rlstudio.runs.services.admission import (
    LAUNCH_PASS_REASON,
    QUEUE_LOCK,
    SUBMIT_UNSENT_REASON,
    _hold_runs,
    queue_admit_jobs,
)
from rlstudio.runs.services.queue_registry import quota_policy
from tests.rlstudio.conftest import api_client

S, E = RunStatus, EvaluationStatus


def _quota(user, gpus=2, runs=3):
    GpuQuota.objects.update_or_create(user=user, defaults=dict(max_gpus=gpus, gpu_hours_per_month=100,
                                                               max_concurrent_runs=runs))


def _body(ready, name="r", **extra):
    return {"name": name, "dataset": ready["dataset"].pk, "model": ready["model"].pk, "preset": "cpu_smoke",
            **extra}


def _on_other_connection(ask):
    """`ask()`'s answer, asked on a connection of its own, in a thread."""
    out = []

    def run():
        try:
            out.append(ask())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return out[0]


def _other_connection(sql: str) -> bool:
    """`sql` (one boolean answer) on a connection of its own, in a thread; the answer."""
    def ask():
        with connections["default"].cursor() as cur:
            cur.execute(sql, list(QUEUE_LOCK))
            answer = cur.fetchone()[0]
            if answer:
                cur.execute("SELECT pg_advisory_unlock(%s, %s)", list(QUEUE_LOCK))
        return answer

    return _on_other_connection(ask)


class _HeldElsewhere:
    """A lock that another connection, in a thread, takes (`_take`) on entry and holds until exit;
    entering waits `wait_s` at most for it to be taken."""

    wait_s = 30

    def __init__(self):
        self.held, self.done = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold)

    def _scope(self):
        """What the other connection's hold runs inside."""
        return contextlib.nullcontext()

    def _take(self, cur):
        raise NotImplementedError

    def _release(self, cur):
        """Run on the other connection at exit, before it closes."""

    def _hold(self):
        try:
            with self._scope(), connections["default"].cursor() as cur:
                self._take(cur)
                self.held.set()
                self.done.wait(30)
                self._release(cur)
        finally:
            connections.close_all()

    def __enter__(self):
        self.thread.start()
        assert self.held.wait(self.wait_s)
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(30)


class _Holder(_HeldElsewhere):
    """QUEUE_LOCK held by another connection (a pass under way) until exit."""

    def _take(self, cur):
        cur.execute("SELECT pg_advisory_lock(%s, %s)", list(QUEUE_LOCK))

    def _release(self, cur):
        cur.execute("SELECT pg_advisory_unlock(%s, %s)", list(QUEUE_LOCK))


# ------------------------------------------------------------------ 1. the lock never outlives a failure


@pytest.mark.django_db(transaction=True)
def test_a_pass_failing_inside_a_transaction_raises_its_own_error_and_leaves_the_queue_lock_free(
        alice, make_run, monkeypatch):
    _quota(alice)
    make_run(alice, "gpu", gpus=1)

    def failing_sql(*, needed):
        with connections["default"].cursor() as cur:
            cur.execute("SELECT 1 / 0")

    monkeypatch.setattr("rlstudio.runs.services.cluster._cluster_free_gpus", failing_sql)
    with pytest.raises(DataError, match="division by zero"):  # the real error, not the unlock's
        queue_admit_jobs()
    assert _other_connection("SELECT pg_try_advisory_lock(%s, %s)") is True


@pytest.mark.django_db(transaction=True)
def test_a_pass_refuses_to_run_inside_a_callers_transaction(alice, make_run):
    """Its locks would be held, and its submissions sent, only at the caller's commit."""
    run = make_run(alice, "cpu")
    with pytest.raises(RuntimeError, match="durable"):
        with transaction.atomic():
            queue_admit_jobs()
    run.refresh_from_db()
    assert run.status == S.QUEUED


@pytest.mark.django_db(transaction=True)
def test_a_pass_holds_the_queue_lock_only_until_it_commits(alice, make_run):
    make_run(alice, "cpu")
    queue_admit_jobs()
    assert _other_connection("SELECT pg_try_advisory_lock(%s, %s)") is True


# ------------------------------------------------------------------ 2. a failed pass is not a failed launch


@pytest.fixture
def failing_pass(monkeypatch):
    def boom(*, wait_s):
        raise RuntimeError("another user's job broke the pass")

    monkeypatch.setattr(admission, "_queue_pass", boom)


@pytest.mark.django_db
def test_a_launch_whose_pass_fails_is_saved_queued_with_a_reason_not_a_500(alice, ready, failing_pass):
    _quota(alice)
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=1), format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["status"] == S.QUEUED and resp.json()["queue_reason"] == LAUNCH_PASS_REASON
    assert Run.objects.get().queue_reason == LAUNCH_PASS_REASON


@pytest.mark.django_db
def test_an_evaluation_whose_pass_fails_is_saved_queued_with_a_reason(alice, make_dataset, make_model,
                                                                       failing_pass):
    _quota(alice)
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    data = make_dataset(alice, "eval-data", status="ready")
    resp = api_client(alice).post(f"/api/v1/models/{model.pk}/evaluations/", {"dataset": data.pk, "k": 1},
                                  format="json")
    assert resp.status_code == 202, resp.content
    assert resp.json()["status"] == E.QUEUED and resp.json()["queue_reason"] == LAUNCH_PASS_REASON


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("m") / "tiny", preset="smoke", seed=0)


def _form(alice, make_dataset, make_model, tiny_dir, **extra):
    from rlstudio.catalog.models import ModelAsset

    model = ModelAsset.objects.create(owner=alice, name="tiny", path=str(tiny_dir))
    return {"name": "f1", "dataset": make_dataset(alice, status="ready").pk, "preset": "cpu_smoke", "gpus": 0,
            "model": model.pk, **extra}


@pytest.mark.django_db
def test_the_run_form_saves_its_run_and_config_even_when_the_pass_fails(alice, make_dataset, make_model,
                                                                         tiny_dir, failing_pass):
    from rlstudio.runs.models import RunConfig

    _quota(alice)
    page = Client()
    page.force_login(alice)
    resp = page.post("/runs/new/", _form(alice, make_dataset, make_model, tiny_dir, save_as="mine"))
    assert resp.status_code == 302, resp.content
    run = Run.objects.get()
    assert run.status == S.QUEUED and run.queue_reason == LAUNCH_PASS_REASON
    assert RunConfig.objects.filter(owner=alice, name="mine").exists()


@pytest.mark.django_db(transaction=True)
def test_the_run_forms_pass_runs_after_its_transaction_commits(alice, make_dataset, make_model, tiny_dir,
                                                                monkeypatch):
    """The pass is not inside the form's transaction: the run it sees is committed (another connection
    sees it too), and the queue's lock is free once the form answered."""
    seen = []
    original = admission._queue_pass

    def spy(*, wait_s):
        seen.append(_other_connection_count_runs())
        return original(wait_s=wait_s)

    monkeypatch.setattr(admission, "_queue_pass", spy)
    _quota(alice)
    page = Client()
    page.force_login(alice)
    assert page.post("/runs/new/", _form(alice, make_dataset, make_model, tiny_dir)).status_code == 302
    assert seen == [1]
    assert Run.objects.get().status == S.SUBMITTING
    assert _other_connection("SELECT pg_try_advisory_lock(%s, %s)") is True


def _other_connection_count_runs() -> int:
    return _on_other_connection(Run.objects.count)


# ------------------------------------------------------------------ 3. bounded waits, Ray asked once


@pytest.mark.django_db(transaction=True)
def test_a_launch_behind_a_pass_under_way_returns_within_the_bound_queued(alice, ready, monkeypatch):
    monkeypatch.setattr(admission, "LAUNCH_LOCK_WAIT_S", 0.3)
    _quota(alice)
    with _Holder():
        started = time.monotonic()
        resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=0), format="json")
        took = time.monotonic() - started
    assert resp.status_code == 201, resp.content
    assert took < 3.0  # the launch's pass waited 0.3 s (its transaction never waits for a pass)
    assert resp.json()["status"] == S.QUEUED and resp.json()["queue_reason"] == LAUNCH_PASS_REASON
    # The reconcile's pass admits it once the lock is free.
    assert [j.id for j in queue_admit_jobs()] == [resp.json()["id"]]


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_behind_a_pass_under_way_returns_within_the_bound_queued(alice, make_dataset, make_model,
                                                                                monkeypatch):
    monkeypatch.setattr(admission, "LAUNCH_LOCK_WAIT_S", 0.3)
    _quota(alice)
    model = make_model(alice, "alice-base", tokenizer_ok=True)
    data = make_dataset(alice, "eval-data", status="ready")
    with _Holder():
        started = time.monotonic()
        resp = api_client(alice).post(f"/api/v1/models/{model.pk}/evaluations/", {"dataset": data.pk, "k": 1},
                                      format="json")
        took = time.monotonic() - started
    assert resp.status_code == 202, resp.content
    assert took < 3.0
    assert resp.json()["status"] == E.QUEUED and resp.json()["queue_reason"] == LAUNCH_PASS_REASON


class _FakeRay:
    """Ray's dashboard node summary, as `urlopen` would return it; counts the requests."""

    def __init__(self, body):
        self.body, self.calls = body, 0

    def __call__(self, url, timeout=None):
        self.calls += 1
        return io.BytesIO(json.dumps(self.body).encode())


def _summary(*gpus):
    return {"data": {"summary": [{"raylet": {"state": "ALIVE", "resourcesTotal": {"GPU": g}}} for g in gpus]}}


@pytest.fixture
def fake_ray(settings, monkeypatch):
    settings.RAY_ADDRESS = "http://ray-head.invalid:8265"
    fake = _FakeRay(_summary(1.0))
    monkeypatch.setattr(ray_jobs.urllib.request, "urlopen", fake)
    return fake


@pytest.mark.django_db
def test_a_gpu_launch_asks_ray_at_most_once(alice, ready, fake_ray):
    _quota(alice, gpus=4)
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=2), format="json")  # over the cluster's 1
    assert resp.status_code == 201, resp.content
    assert resp.json()["status"] == S.QUEUED
    assert fake_ray.calls == 1
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, name="r2", gpus=1), format="json")
    assert resp.status_code == 201
    assert fake_ray.calls == 1  # within CLUSTER_TOTAL_TTL_S: the cached answer


@pytest.mark.django_db
def test_clusters_total_is_cached_for_its_ttl_and_cleared_on_demand(fake_ray, monkeypatch):
    assert ray_jobs.cluster_total_gpus() == 1.0
    fake_ray.body = _summary(1.0, 2.0)
    assert ray_jobs.cluster_total_gpus() == 1.0 and fake_ray.calls == 1
    monkeypatch.setattr(ray_jobs, "CLUSTER_TOTAL_TTL_S", 0.0)
    assert ray_jobs.cluster_total_gpus() == 3.0 and fake_ray.calls == 2
    monkeypatch.setattr(ray_jobs, "CLUSTER_TOTAL_TTL_S", 60.0)
    fake_ray.body = _summary(4.0)
    ray_jobs.cluster_total_gpus_clear()
    assert ray_jobs.cluster_total_gpus() == 4.0 and fake_ray.calls == 3


@pytest.mark.django_db
def test_clusters_total_is_cached_per_ray_address(fake_ray, settings):
    assert ray_jobs.cluster_total_gpus() == 1.0
    settings.RAY_ADDRESS = "http://another-ray-head.invalid:8265"
    fake_ray.body = _summary(8.0)
    assert ray_jobs.cluster_total_gpus() == 8.0 and fake_ray.calls == 2  # not the other cluster's answer


@pytest.mark.django_db
def test_an_unparsable_node_summary_is_ray_unavailable(fake_ray):
    fake_ray.body = _summary("lots")
    with pytest.raises(ray_jobs.RayUnavailable):
        ray_jobs.cluster_total_gpus()


@pytest.mark.django_db
def test_a_launch_on_an_unparsable_node_summary_is_queued_not_a_500(alice, ready, fake_ray):
    _quota(alice)
    fake_ray.body = _summary("lots")
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, gpus=1), format="json")
    assert resp.status_code == 201, resp.content
    assert resp.json()["status"] == S.QUEUED
    assert resp.json()["queue_reason"] == "the cluster has 0 free GPUs and this run needs 1"


# ------------------------------------------------------------------ 4. the preview warns on the cluster


@pytest.mark.django_db
def test_the_preview_warns_not_errs_when_the_cluster_has_too_few_gpus(alice, make_dataset, make_model, tiny_dir,
                                                                      fake_ray):
    _quota(alice, gpus=4)
    page = Client()
    page.force_login(alice)
    form = _form(alice, make_dataset, make_model, tiny_dir, gpus=2)
    body = page.post("/runs/new/preview/", form).json()
    assert not [e for e in body["errors"] if e["field"] == "gpus"]
    assert {"field": "gpus", "message": "this run asks 2 GPUs; the cluster has 1 GPU in all: it would wait, "
                                        "queued, until the cluster has 2 GPUs"} in body["warnings"]
    page.post("/runs/new/preview/", form)
    assert fake_ray.calls == 1  # every edit does not ask Ray again
    body = page.post("/runs/new/preview/", {**form, "gpus": 8}).json()
    assert {"field": "gpus", "message": "this run asks 8 GPUs; your quota allows at most 4 at a time",
            "form_field": "gpus"} in body["errors"]


# ------------------------------------------------------------------ 7a. the broker down


def _broker_down(monkeypatch) -> list:
    """dispatch.publish answering as it does when the broker is down; the names of the tasks it was
    asked to send (a list that grows)."""
    tries = []

    def down(name, *args):
        tries.append(name)
        return ConnectionError("broker down")

    monkeypatch.setattr(dispatch, "publish", down)
    return tries


@pytest.mark.django_db(transaction=True)
def test_with_the_broker_down_a_pass_tries_it_once_and_every_job_it_admitted_says_why_it_waits(
        alice, bob, ready, make_run, monkeypatch):
    tries = _broker_down(monkeypatch)
    _quota(alice)
    _quota(bob)
    older = make_run(bob, "bobs-older")
    resp = api_client(alice).post("/api/v1/runs/", _body(ready, name="new", gpus=0), format="json")
    assert resp.status_code == 201, resp.content
    assert len(tries) == 1  # the second submission did not wait for the broker again
    older.refresh_from_db()
    assert older.status == S.QUEUED and older.queue_reason == SUBMIT_UNSENT_REASON
    assert resp.json()["status"] == S.QUEUED and resp.json()["queue_reason"] == SUBMIT_UNSENT_REASON


# ------------------------------------------------------------------ 7b. one rule for a reason's length


@pytest.mark.django_db
def test_a_long_reason_is_clipped_alike_for_runs_and_evaluations(alice, make_run, make_dataset, make_model):
    from rlstudio.evaluations.queue import EvaluationQueue

    run = make_run(alice, "long")
    reason = "x" * 400
    _hold_runs([run.pk], reason)
    _hold_runs([run.pk], reason)  # the same reason again: nothing changes, nothing audited again
    run.refresh_from_db()
    assert run.queue_reason == "x" * Run._meta.get_field("queue_reason").max_length
    assert AuditEvent.objects.filter(action="run.queue").count() == 1
    ev = Evaluation.objects.create(owner=alice, model=make_model(alice, "m", tokenizer_ok=True), gpus=0, k=1,
                                   dataset=make_dataset(alice, "d", status="ready"), include_base=True,
                                   checkpoints=[], max_prompts=1, sampling={})
    EvaluationQueue().hold(job_ids=[ev.pk], reason=reason)
    ev.refresh_from_db()
    assert ev.queue_reason == run.queue_reason


# ------------------------------------------------------------------ every taker of QUEUE_LOCK alike


@pytest.mark.django_db(transaction=True)
def test_a_queue_move_holds_the_queue_lock_while_it_locks_the_queued_rows(alice, staff, make_run, monkeypatch):
    from rlstudio.runs.services import run_queue_move

    seen = []
    original = admission.audit_record

    def spy(**kwargs):
        seen.append(_other_connection("SELECT pg_try_advisory_lock(%s, %s)"))
        return original(**kwargs)

    monkeypatch.setattr(admission, "audit_record", spy)
    run = make_run(alice, "moved")
    run_queue_move(run=run, by=staff, to="front")
    assert seen == [False]
    assert _other_connection("SELECT pg_try_advisory_lock(%s, %s)") is True  # freed at its commit


@pytest.mark.django_db(transaction=True)
def test_a_queue_move_behind_a_pass_under_way_is_refused_within_its_bound_and_moves_nothing(
        alice, staff, make_run, monkeypatch):
    from rlstudio.runs.services import RunRefused, run_queue_move

    monkeypatch.setattr(admission, "QUEUE_MOVE_WAIT_S", 0.3)
    first, second = make_run(alice, "first"), make_run(alice, "second")
    with _Holder():
        started = time.monotonic()
        with pytest.raises(RunRefused, match="try again in a moment"):
            run_queue_move(run=second, by=staff, to="front")
        assert time.monotonic() - started < 3.0
        # the staff page says so, as it says any refusal
        page = Client()
        page.force_login(staff)
        resp = page.post(f"/quotas/admin/queue/{second.pk}/move/", {"to": "front"}, follow=True)
        assert "try again in a moment" in resp.content.decode()
    assert list(Run.objects.filter(pk__in=[first.pk, second.pk]).values_list("queue_priority", flat=True)) == [0, 0]
    assert not AuditEvent.objects.filter(action="run.queue_move").exists()
    run_queue_move(run=second, by=staff, to="front")  # once the pass is over
    assert Run.objects.get(pk=second.pk).queue_priority == 1


@pytest.mark.django_db(transaction=True)
def test_a_pass_locks_the_queued_jobs_owners_in_id_order(alice, bob, make_run):
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _quota(alice, runs=0)
    _quota(bob, runs=0)
    make_run(bob, "bobs")  # queued first, its owner's id the higher
    make_run(alice, "alices")
    with CaptureQueriesContext(connection) as queries:
        queue_admit_jobs()
    table = get_user_model()._meta.db_table
    locks = [q["sql"] for q in queries.captured_queries
             if f'FROM "{table}"' in q["sql"] and "FOR NO KEY UPDATE" in q["sql"]]
    # the pass's first lock takes both owners in one query, its rows in id order (the key: column 1)
    assert f'IN ({min(alice.pk, bob.pk)}, {max(alice.pk, bob.pk)}) ORDER BY 1 ASC FOR NO KEY UPDATE' in locks[0]


def _owner_row_free(user_id: int) -> bool:
    """Whether another connection could lock user `user_id`'s row as an admission does, now."""
    from django.contrib.auth import get_user_model
    from django.db import OperationalError

    def ask():
        try:
            with transaction.atomic():
                list(get_user_model().objects.select_for_update(no_key=True, nowait=True).filter(pk=user_id)
                     .values_list("pk"))
            return True
        except OperationalError:
            return False

    return _on_other_connection(ask)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("answer_s", [0.0, 0.3])
def test_a_pass_asks_ray_before_it_locks_the_owners(alice, make_run, fake_ray, monkeypatch, answer_s):
    """An export, a playground session or a launch of a queued job's owner never waits on Ray (up to
    5 s) behind a pass: when the pass asks Ray, the owner's lock is still free; and Ray is asked once,
    even when its answer takes longer than the cache's life (kept from when it answered)."""
    monkeypatch.setattr(ray_jobs, "CLUSTER_TOTAL_TTL_S", 0.25)
    _quota(alice, gpus=1)
    make_run(alice, "gpu", gpus=1)
    seen = []

    def ask(url, timeout=None):
        seen.append(_owner_row_free(alice.pk))
        time.sleep(answer_s)
        return io.BytesIO(json.dumps(_summary(1.0)).encode())

    monkeypatch.setattr(ray_jobs.urllib.request, "urlopen", ask)
    ray_jobs.cluster_total_gpus_clear()
    assert [j.label for j in queue_admit_jobs()]
    assert seen == [True]


@pytest.mark.django_db(transaction=True)
def test_while_the_broker_was_down_at_its_last_try_a_pass_admits_one_job_only(alice, bob, make_run, monkeypatch):
    monkeypatch.setattr(dispatch, "publish", lambda name, *args: ConnectionError("broker down"))
    dispatch.send_now("submit_run", 0)  # this process's last try failed
    assert dispatch.broker_was_down()
    _quota(alice)
    _quota(bob)
    first, after = make_run(bob, "first"), make_run(alice, "after")
    assert [j.id for j in queue_admit_jobs()] == [first.pk]  # its submission tried the broker again
    first.refresh_from_db(), after.refresh_from_db()
    assert first.status == S.QUEUED and first.queue_reason == SUBMIT_UNSENT_REASON
    assert after.status == S.QUEUED and after.queue_reason == ""  # not tried: not admitted only to come back


# ------------------------------------------------------------------ one job's failure is that job's only


def _evaluation(owner, make_dataset, make_model) -> Evaluation:
    """A new (queued) evaluation of `owner`'s: model "m" on a ready dataset "d", one prompt, k 1, no GPU."""
    data = make_dataset(owner, "d", status="ready")
    return Evaluation.objects.create(owner=owner, model=make_model(owner, "m"), dataset=data, include_base=True,
                                     k=1, max_prompts=1, gpus=0)


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_deleted_mid_pass_leaves_the_queue_and_the_others_are_still_admitted(
        alice, bob, make_run, make_dataset, make_model, monkeypatch):
    _quota(alice)
    _quota(bob)
    ev = _evaluation(alice, make_dataset, make_model)
    run = make_run(bob, "after-the-evaluation")
    policy = quota_policy()
    original = policy.owners_locked

    @contextlib.contextmanager
    def lock_then_delete(*, user_ids):
        with original(user_ids=user_ids):
            Evaluation.objects.filter(pk=ev.pk).delete()  # after the pass loaded it, before its try
            yield

    monkeypatch.setattr(policy, "owners_locked", lock_then_delete)
    assert [j.label for j in queue_admit_jobs()] == [f"run #{run.pk}"]
    run.refresh_from_db()
    assert run.status == S.SUBMITTING


@pytest.mark.django_db(transaction=True)
def test_a_database_error_admitting_one_job_rolls_back_that_job_only(alice, bob, make_run, monkeypatch):
    _quota(alice)
    _quota(bob)
    broken, fine = make_run(alice, "broken"), make_run(bob, "fine")
    original = admission._try_admit_run

    def try_admit(run, free):
        if run.pk == broken.pk:
            Run.objects.filter(pk=run.pk).update(queue_reason="half-done")  # undone with its savepoint
            with connections["default"].cursor() as cur:
                cur.execute("SELECT 1 / 0")
        return original(run, free)

    monkeypatch.setattr(admission, "_try_admit_run", try_admit)
    assert [j.id for j in queue_admit_jobs()] == [fine.pk]
    broken.refresh_from_db(), fine.refresh_from_db()
    assert broken.status == S.QUEUED and broken.queue_reason == ""
    assert fine.status == S.SUBMITTING


@pytest.mark.django_db
def test_a_failing_queue_pass_does_not_skip_the_reconciles_pass_hooks(monkeypatch):
    from rlstudio.runs import reconcile

    called = []
    monkeypatch.setattr(reconcile, "queue_admit_jobs", lambda: 1 / 0)
    monkeypatch.setattr(reconcile, "_PASS_HOOKS", [lambda: called.append(True)])
    result = reconcile.reconcile_all()
    assert called == [True] and result["admitted_jobs"] == []
    assert any("queue pass failed" in e for e in result["errors"])


@pytest.mark.django_db(transaction=True)
def test_a_send_whose_unsent_handling_raises_never_stops_the_later_sends(monkeypatch):
    sent, unsent = [], []
    monkeypatch.setattr(dispatch, "publish",
                        lambda name, *args: RuntimeError("bad task") if args == (1,) else sent.append(args))

    def boom(error):
        raise RuntimeError("the unsent handling broke")

    with transaction.atomic():
        dispatch.send_after_commit("submit_run", 1, on_unsent=boom)
        dispatch.send_after_commit("submit_run", 2, on_unsent=unsent.append)
    assert sent == [(2,)] and unsent == []


@pytest.mark.django_db(transaction=True)
def test_a_send_that_raises_still_calls_its_unsent_handling(monkeypatch):
    unsent = []

    def raises(name, *args):
        raise TypeError("not serializable")

    monkeypatch.setattr(dispatch, "publish", raises)
    with transaction.atomic():
        dispatch.send_after_commit("submit_run", 1, on_unsent=unsent.append)
    assert len(unsent) == 1 and isinstance(unsent[0], TypeError)


class _RowHolder(_HeldElsewhere):
    """`table`'s row `pk` held FOR UPDATE by another connection (a bulk delete under way) until exit."""

    wait_s = 10

    def __init__(self, table: str, pk: int):
        super().__init__()
        self.sql = f'SELECT 1 FROM "{table}" WHERE id = %s FOR UPDATE'
        self.pk = pk

    def _scope(self):
        return transaction.atomic()

    def _take(self, cur):
        cur.execute(self.sql, [self.pk])


@pytest.mark.django_db(transaction=True)
def test_a_pass_skips_a_job_whose_row_is_locked_elsewhere_and_leaves_it_queued(
        alice, bob, make_run, make_dataset, make_model):
    _quota(alice)
    _quota(bob)
    ev = _evaluation(alice, make_dataset, make_model)
    locked_run, free_run = make_run(alice, "locked"), make_run(bob, "free")
    with connections["default"].cursor() as cur:
        cur.execute("SET lock_timeout = '3s'")  # the old code waited (here: failed after 3 s)
    try:
        with _RowHolder(Run._meta.db_table, locked_run.pk), _RowHolder(Evaluation._meta.db_table, ev.pk):
            started = time.monotonic()
            admitted = queue_admit_jobs()
            elapsed = time.monotonic() - started
            # asked directly (not by a pass), the locked run is refused, never an unexpected error
            from rlstudio.runs.services import RunRefused, run_admit

            with pytest.raises(RunRefused, match="being changed by another request"):
                run_admit(run=locked_run)
    finally:
        with connections["default"].cursor() as cur:
            cur.execute("RESET lock_timeout")
    assert elapsed < 2.0
    assert [j.id for j in admitted] == [free_run.pk]
    locked_run.refresh_from_db(), ev.refresh_from_db()
    assert locked_run.status == S.QUEUED and ev.status == E.QUEUED
    # Skipped, not gone: the next pass admits them.
    assert {j.label for j in queue_admit_jobs()} == {f"run #{locked_run.pk}", f"evaluation #{ev.pk}"}


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_admitted_while_the_broker_is_down_goes_back_to_the_queue_saying_why(
        alice, bob, make_run, make_dataset, make_model, monkeypatch):
    tries = _broker_down(monkeypatch)
    _quota(alice)
    _quota(bob)
    ev = _evaluation(alice, make_dataset, make_model)
    run = make_run(bob, "after")
    queue_admit_jobs()
    assert tries == ["evaluations.submit_evaluation"]  # one try per pass, through the runs' dispatch
    ev.refresh_from_db(), run.refresh_from_db()
    assert ev.status == E.QUEUED and ev.queue_reason == SUBMIT_UNSENT_REASON and ev.started is None
    assert run.status == S.QUEUED and run.queue_reason == SUBMIT_UNSENT_REASON
    # The next pass, with the broker still down at its last try, admits the evaluation only.
    queue_admit_jobs()
    run.refresh_from_db()
    assert len(tries) == 2 and run.status == S.QUEUED


def test_the_brokers_last_failure_is_forgotten_after_its_ttl(monkeypatch):
    monkeypatch.setattr(dispatch, "publish", lambda name, *args: ConnectionError("broker down"))
    dispatch.send_now("submit_run", 0)
    assert dispatch.broker_was_down()
    now = time.monotonic()
    monkeypatch.setattr(dispatch.time, "monotonic", lambda: now + dispatch.BROKER_DOWN_TTL_S + 1)
    assert not dispatch.broker_was_down()  # the broker may be back: a pass admits every job again
