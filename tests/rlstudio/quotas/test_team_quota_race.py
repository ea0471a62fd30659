"""Team quotas under concurrency (real PostgreSQL, threads on their own connections): an admission
holds the admission locks of every member of its owner's quota'd teams, taken in the one sorted query
(`lock_owners`), so two members racing for their team's last GPU cannot both start; a member who
joined after those locks were taken is locked before their jobs are counted; a queue pass admits
only what the team has room for."""
import logging
import threading
from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import OperationalError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from rlstudio.quotas import owner_locks
from rlstudio.quotas.models import GpuQuota, TeamQuota
from rlstudio.quotas.services import admission_reason, lock_owner
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import admission, run_admit

pytestmark = pytest.mark.django_db(transaction=True)
S = RunStatus
FREE = 64


@pytest.fixture
def nlp(alice, bob):
    """Team "nlp" (alice, bob): 2 GPUs at once together; each member's own quota allows 4."""
    for user in (alice, bob):
        GpuQuota.objects.create(user=user, max_gpus=4, gpu_hours_per_month=1000, max_concurrent_runs=5)
    team = Group.objects.create(name="nlp")
    team.user_set.set([alice, bob])
    TeamQuota.objects.create(team=team, max_gpus=2, gpu_hours_per_month=1000)
    return team


def _running(run, gpus):
    Run.objects.filter(pk=run.pk).update(status=S.RUNNING, gpus=gpus, started=timezone.now())


def _thread(fn, results: list, errors: list):
    def body():
        try:
            results.append(fn())
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_two_members_racing_for_the_last_team_gpu_only_one_starts(alice, bob, nlp, make_run, published):
    _running(make_run(bob, "bobs-held"), 1)
    alices, bobs = make_run(alice, "alices", gpus=1), make_run(bob, "bobs", gpus=1)
    admitted, done = threading.Event(), threading.Event()
    a_results, b_results, errors = [], [], []

    def alice_admits_and_waits():
        with transaction.atomic():
            ok = run_admit(run=alices, cluster_free_gpus=FREE)  # the last team GPU, not committed yet
            admitted.set()
            done.wait(30)
        return ok

    a = _thread(alice_admits_and_waits, a_results, errors)
    assert admitted.wait(30) and not errors
    b = _thread(lambda: run_admit(run=bobs, cluster_free_gpus=FREE), b_results, errors)
    b.join(1.0)
    bob_waited = b.is_alive()  # for alice's admission lock, a teammate's
    done.set()
    a.join(30)
    b.join(30)
    assert not errors, errors
    assert a_results == [True] and b_results == [False], "both took the team's last GPU"
    assert bob_waited
    assert Run.objects.get(pk=alices.pk).status == S.SUBMITTING
    bobs.refresh_from_db()
    assert bobs.status == S.QUEUED
    assert bobs.queue_reason == "your team nlp holds 2 of its 2 GPUs and this run needs 1"


def test_an_owners_lock_takes_its_quotad_teammates_in_one_sorted_query(alice, bob, make_user, nlp):
    carol = make_user("carol")
    Group.objects.create(name="no-quota").user_set.set([alice, carol])  # no TeamQuota: not locked
    table = get_user_model()._meta.db_table
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        lock_owner(user=alice)
    locks = [q["sql"] for q in queries.captured_queries if f'FROM "{table}"' in q["sql"] and "FOR NO KEY UPDATE" in q["sql"]]
    ids = sorted([alice.pk, bob.pk])
    assert len(locks) == 1 and f"IN ({ids[0]}, {ids[1]}) ORDER BY 1 ASC FOR NO KEY UPDATE" in locks[0]


def _hold_lock(user, *, hold: threading.Event, done: threading.Event, errors: list):
    def body():
        try:
            with transaction.atomic():
                lock_owner(user=user)
                hold.set()
                done.wait(30)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            hold.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def _alice_waits_for_bobs_lock(alice, bob) -> bool:
    """Whether alice's admission lock waits while bob's admission (another connection) holds his."""
    hold, done, errors = threading.Event(), threading.Event(), []
    thread = _hold_lock(bob, hold=hold, done=done, errors=errors)
    try:
        assert hold.wait(30) and not errors
        try:
            with transaction.atomic():
                with connection.cursor() as cur:
                    cur.execute("SET LOCAL lock_timeout = '500ms'")
                lock_owner(user=alice)
        except OperationalError as exc:
            assert "lock timeout" in str(exc)
            return True
        return False
    finally:
        done.set()
        thread.join(30)
        assert not errors


def test_a_teammates_admission_lock_excludes_the_owners_but_a_team_without_quota_does_not(alice, bob, nlp):
    assert _alice_waits_for_bobs_lock(alice, bob)
    TeamQuota.objects.filter(team=nlp).delete()
    assert not _alice_waits_for_bobs_lock(alice, bob)  # no team limit: bob's admissions are not alice's


JOINED = ("your team {} has a new member whose own admission or launch is under way: tried again at the next "
          "queue pass")


def test_a_member_who_joined_after_the_lock_is_locked_before_their_jobs_are_counted(
        alice, bob, make_user, nlp, make_run, monkeypatch):
    carol = make_user("carol")
    _running(make_run(carol, "carols"), 2)
    waiting = make_run(alice, "w", gpus=1)
    hold, done, errors = threading.Event(), threading.Event(), []
    thread = _hold_lock(carol, hold=hold, done=done, errors=errors)  # carol's own admission, say
    try:
        assert hold.wait(30) and not errors
        nlp.user_set.add(carol)  # she joins between an owner's lock and its check
        with monkeypatch.context() as patched, transaction.atomic():
            patched.setattr(owner_locks, "teammate_ids", lambda user_ids: set())  # the lock read before
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '500ms'")
            lock_owner(user=alice)
            # Her lock is held elsewhere: not waited for (that could deadlock), tried at the next pass.
            assert admission_reason(run=waiting, cluster_free_gpus=FREE) == JOINED.format("nlp")
    finally:
        done.set()
        thread.join(30)
    assert not errors
    with transaction.atomic():
        assert admission_reason(run=waiting, cluster_free_gpus=FREE) == (
            "your team nlp holds 2 of its 2 GPUs and this run needs 1")  # carol's GPU counts now


def _launch_lock(user) -> bool:
    """A launch's lock of `user` (theirs and their quota'd teammates', in id order), held a moment."""
    with transaction.atomic():
        lock_owner(user=user)
    return True


def _waiting_for_a_lock() -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'")
        return cur.fetchone()[0] > 0


def test_a_member_joining_during_an_admission_never_deadlocks_with_their_own_launch(make_user, make_run):
    """dave's admission locked him (his team then: dave alone); carol (a lower id) joins, and her launch
    locks her, then waits for dave's lock (a teammate's now, in id order). dave's check must not then
    wait for carol's lock: PostgreSQL would fail one of them for a deadlock (her launch: an error)."""
    carol, dave = make_user("carol"), make_user("dave")
    for user in (carol, dave):
        GpuQuota.objects.create(user=user, max_gpus=4, gpu_hours_per_month=1000, max_concurrent_runs=5)
    cv = Group.objects.create(name="cv")
    cv.user_set.set([dave])
    TeamQuota.objects.create(team=cv, max_gpus=2, gpu_hours_per_month=1000)
    waiting = make_run(dave, "w", gpus=1)
    results, errors = [], []
    cv.user_set.add(carol)  # committed: staff add her while dave's admission is under way
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '10s'")
        owner_locks.lock_ids({dave.pk})  # his admission's lock, as read before carol joined
        thread = _thread(lambda: _launch_lock(carol), results, errors)
        for _ in range(200):
            if _waiting_for_a_lock() or errors:
                break
            thread.join(0.05)
        assert not errors and thread.is_alive()  # carol's launch holds her lock and waits for dave's
        assert admission_reason(run=waiting, cluster_free_gpus=FREE) == JOINED.format("cv")
    thread.join(30)
    assert not errors, errors  # no deadlock: her launch went on once dave's admission committed
    assert results == [True]


def test_a_queue_pass_admits_only_what_the_team_has_room_for(alice, bob, nlp, make_run, published, monkeypatch):
    monkeypatch.setattr(admission, "free_gpus", lambda needed: float(FREE))
    monkeypatch.setattr(admission, "cluster_total_gpus", lambda: float(FREE))
    _running(make_run(bob, "bobs-held"), 1)
    first = make_run(bob, "first", gpus=1)
    second = make_run(alice, "second", gpus=1)
    assert admission.queue_admit_all() == [first.pk]
    second.refresh_from_db()
    assert second.status == S.QUEUED
    assert second.queue_reason == "your team nlp holds 2 of its 2 GPUs and this run needs 1"
    assert [args for task, *args in published if task == "runs.submit_run"] == [[first.pk]]


@pytest.mark.parametrize("kind", ["run", "evaluation"])
def test_a_member_joining_during_a_queue_pass_never_deadlocks_with_their_own_launch(
        kind, make_user, make_run, make_model, make_dataset, published, monkeypatch, caplog):
    """The pass locked dave (his team then: dave alone); carol (a lower id) joins and her launch locks
    her, then waits for dave's. dave's admission in the pass (of his run, or of his evaluation) must not
    wait for carol's lock (out of the id order: a deadlock, PostgreSQL failing her launch): his job is
    left to the next pass."""
    monkeypatch.setattr(admission, "free_gpus", lambda needed: float(FREE))
    monkeypatch.setattr(admission, "cluster_total_gpus", lambda: float(FREE))
    carol, dave = make_user("carol"), make_user("dave")
    for user in (carol, dave):
        GpuQuota.objects.create(user=user, max_gpus=4, gpu_hours_per_month=1000, max_concurrent_runs=5)
    cv = Group.objects.create(name="cv")
    cv.user_set.set([dave])
    TeamQuota.objects.create(team=cv, max_gpus=2, gpu_hours_per_month=1000)
    if kind == "run":
        waiting = make_run(dave, "w", gpus=1)
    else:
        from rlstudio.evaluations.models import Evaluation

        waiting = Evaluation.objects.create(owner=dave, model=make_model(dave, "m"), include_base=True, k=1,
                                            dataset=make_dataset(dave, "d", status="ready"), max_prompts=1, gpus=1)
    results, errors, launch = [], [], []
    admit_locked = admission._admit_locked

    def carol_joins_and_launches(*args):
        joined = _thread(lambda: cv.user_set.add(carol), [], errors)  # staff, on their own connection
        joined.join(30)
        launch.append(_thread(lambda: _launch_lock(carol), results, errors))
        for _ in range(200):
            if _waiting_for_a_lock() or errors:
                break
            launch[0].join(0.05)
        assert not errors and launch[0].is_alive()  # her launch holds her lock and waits for dave's
        return admit_locked(*args)

    monkeypatch.setattr(admission, "_admit_locked", carol_joins_and_launches)
    assert admission.queue_admit_jobs() == []  # dave's job: not tried in this pass
    launch[0].join(30)
    assert not errors, errors  # no deadlock: her launch went on once the pass committed
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]  # nor the pass's admission
    assert results == [True]
    monkeypatch.setattr(admission, "_admit_locked", admit_locked)
    assert [(job.kind, job.id) for job in admission.queue_admit_jobs()] == [(kind, waiting.pk)]  # the next pass


@contextmanager
def _holding_his_own_lock(user):
    """While the block runs, another connection holds `user`'s own admission lock (theirs alone)."""
    hold, done, errors = threading.Event(), threading.Event(), []

    def holds():
        try:
            with transaction.atomic():
                owner_locks.lock_ids({user.pk})
                hold.set()
                done.wait(30)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            hold.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=holds)
    thread.start()
    try:
        assert hold.wait(30) and not errors
        yield
    finally:
        done.set()
        thread.join(30)
    assert not errors


def test_keeping_a_deleted_jobs_gpu_time_takes_its_owners_lock_only(alice, bob, nlp, make_run):
    """`_keep` (a run's deletion) locks the owner alone, not their quota'd teammates: a teammate's
    admission counts the owner's month under the owner's lock anyway, and a bulk delete that took the
    owners' and teammates' locks first would take a member who joined since out of the id order here."""
    from datetime import timedelta

    from rlstudio.quotas.services import gpu_time_keep

    now = timezone.now()
    run = make_run(alice, "done", gpus=1)
    Run.objects.filter(pk=run.pk).update(status=S.SUCCEEDED, started=now - timedelta(hours=1), finished=now)
    run.refresh_from_db()
    with _holding_his_own_lock(bob):
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '500ms'")
            assert len(gpu_time_keep(run, now=now)) == 1  # never waits for bob's lock
            with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
                lock_owner(user=alice)  # an admission of alice's does wait for her teammate's


def test_two_saves_of_a_new_teams_quota_at_once_leave_one_row_changed(staff):
    """Another save (a second staff member, a double submit) inserts the team's first quota row while
    this one's insert waits for it: this save then changes that row, audited, instead of failing."""
    from rlstudio.accounts.models import AuditEvent
    from rlstudio.quotas.services import team_quota_set

    cv = Group.objects.create(name="cv")
    hold, errors = threading.Event(), []

    def other_save_inserts_first():
        try:
            with transaction.atomic():
                TeamQuota.objects.create(team=cv, max_gpus=1, gpu_hours_per_month=5)
                hold.set()
                for _ in range(200):  # commit once the other insert waits for this one
                    if _waiting_for_a_lock():
                        break
                    threading.Event().wait(0.05)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            hold.set()
        finally:
            connections.close_all()

    thread = threading.Thread(target=other_save_inserts_first)
    thread.start()
    assert hold.wait(30) and not errors
    quota = team_quota_set(team=cv, by=staff, max_gpus=4, gpu_hours_per_month=10)
    thread.join(30)
    assert not errors
    assert list(TeamQuota.objects.filter(team=cv).values_list("pk", "max_gpus", "gpu_hours_per_month")) == [
        (quota.pk, 4, 10.0)]
    assert AuditEvent.objects.get(action="team_quota.change").data == {
        "team": "cv", "changed": {"max_gpus": [1, 4], "gpu_hours_per_month": [5.0, 10.0]}}


@pytest.mark.parametrize("request_kind", ["export", "playground"])
def test_an_export_or_playground_session_takes_the_users_lock_alone(alice, bob, nlp, run_with_ckpts, make_model,
                                                                    published, request_kind):
    """No team limit counts exports or playground sessions: asking for one takes alice's own lock
    (`lock_user`) and never waits for her teammate bob's, which an admission of hers does."""
    from rlstudio.exports.services import export_new
    from rlstudio.playground.services import session_new

    policy = make_model(alice, "lock-policy", tokenizer_ok=True)
    with _holding_his_own_lock(bob):
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '500ms'")
            if request_kind == "export":
                export, queued = export_new(user=alice, run=run_with_ckpts, data={"step": 1})
                assert queued and export.step == 1
            else:
                session = session_new(user=alice, data={"targets": [{"model": policy.pk}],
                                                         "messages": [{"role": "user", "content": "hi"}]})
                assert session.owner_id == alice.pk
            with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
                lock_owner(user=alice)  # while an admission of hers does wait for her teammate's
