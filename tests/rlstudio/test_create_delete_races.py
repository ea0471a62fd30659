"""Creating something while a row it refers to is deleted (the outside tester's races: a run launched
while its dataset or model is deleted, an export, clone or evaluation while its run is): never a 500.

Each create locks the rows it references FOR KEY SHARE before its owner's lock (`rlstudio.rowlocks`),
and each delete locks its row FOR UPDATE before its checks, so either the create commits first and the
delete sees it (a 409, or the clone's parent set to NULL), or the row is gone first and the create is a
400 naming the field. The interleavings are made deterministic: "deleted meanwhile" deletes the row
after the create's checks read it; "the create holds the row" starts the deletion from another
connection at the create's owner lock (just after its row locks) and sees it wait.
"""
import threading
import time

import pytest
from django.db import IntegrityError, connection, connections

from rlstudio.catalog.errors import CatalogInUse
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.catalog.services.datasets import dataset_delete
from rlstudio.catalog.services.model_assets import model_delete
from rlstudio.evaluations.models import Evaluation
from rlstudio.evaluations.services import EvaluationInvalid, evaluation_new
from rlstudio.exports.models import Export
from rlstudio.exports.services import export_new
from rlstudio.playground.models import PlaygroundSession
from rlstudio.quotas.services import Quotas
from rlstudio.runs.errors import RunRefused
from rlstudio.runs.models import Run
from rlstudio.runs.services import run_clone, run_delete, run_new
from tests.rlstudio.conftest import api_client

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def data(alice, make_dataset):
    return make_dataset(alice, "race-data", status="ready")


@pytest.fixture
def policy(alice, make_model):
    return make_model(alice, "race-policy", tokenizer_ok=True)


@pytest.fixture
def cluster(monkeypatch):
    monkeypatch.setattr("rlstudio.runs.services.cluster._cluster_free_gpus", lambda *, needed: 0.0)


def _launch(owner, data, policy, name="race-run"):
    return run_new(owner=owner, name=name, dataset=data, model=policy, preset="cpu_smoke", gpus=0)


def _deleted_after(monkeypatch, target: str, row):
    """Wrap `target` (a function the create calls after reading its inputs) to delete `row` first."""
    module, name = target.rsplit(".", 1)
    import importlib

    original = getattr(importlib.import_module(module), name)

    def wrapped(*args, **kwargs):
        type(row).objects.filter(pk=row.pk).delete()
        return original(*args, **kwargs)

    monkeypatch.setattr(target, wrapped)


# ---- deleted meanwhile: a 400 naming the field, nothing created ------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("which", ["dataset", "model"])
def test_a_launch_whose_dataset_or_model_was_deleted_meanwhile_is_400_naming_it(
        alice, data, policy, cluster, published, monkeypatch, which):
    row = data if which == "dataset" else policy
    _deleted_after(monkeypatch, "rlstudio.runs.services.lineage._config_or_invalid", row)
    r = api_client(alice).post("/api/v1/runs/", {"name": "r", "dataset": data.pk, "model": policy.pk,
                                                 "preset": "cpu_smoke", "gpus": 0}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == which
    assert "was deleted" in r.json()["error"]["message"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_clone_of_a_run_deleted_meanwhile_is_400_naming_run(alice, data, policy, cluster, published,
                                                             monkeypatch):
    source = _launch(alice, data, policy)
    Run.objects.filter(pk=source.pk).update(status="stopped")
    _deleted_after(monkeypatch, "rlstudio.runs.services.lineage._config_or_invalid", source)
    r = api_client(alice).post(f"/api/v1/runs/{source.pk}/clone/", {}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == "run" and "was deleted" in r.json()["error"]["message"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_an_export_of_a_run_deleted_meanwhile_is_400_naming_run(alice, run_with_ckpts, published, monkeypatch):
    _deleted_after(monkeypatch, "rlstudio.exports.services.checkpoint_steps", run_with_ckpts)
    r = api_client(alice).post(f"/api/v1/runs/{run_with_ckpts.pk}/exports/", {"step": 1}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == "run" and "was deleted" in r.json()["error"]["message"]
    assert not Export.objects.exists() and published == []


@pytest.mark.django_db
@pytest.mark.parametrize("which", ["run", "dataset"])
def test_an_evaluation_whose_run_or_dataset_was_deleted_meanwhile_is_refused_naming_it(
        alice, run_with_ckpts, data, published, cluster, which):
    if which == "run":
        Run.objects.filter(pk=run_with_ckpts.pk).delete()
    else:
        Dataset.objects.filter(pk=data.pk).delete()
    with pytest.raises(EvaluationInvalid, match="was deleted") as err:
        evaluation_new(user=alice, run=run_with_ckpts, dataset=data, data={"checkpoints": [1], "k": 1})
    assert err.value.field == which
    assert not Evaluation.objects.exists()


@pytest.mark.django_db
def test_a_playground_session_on_a_run_deleted_meanwhile_is_400_naming_the_target(
        alice, run_with_ckpts, published, monkeypatch):
    _deleted_after(monkeypatch, "rlstudio.playground.services._lock_targets", run_with_ckpts)
    r = api_client(alice).post("/api/v1/playground/sessions/", {"targets": [{"run": run_with_ckpts.pk, "step": 1}],
                                                                "messages": HELLO}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["field"] == "targets[0].run"
    assert not PlaygroundSession.objects.exists()


@pytest.mark.django_db
def test_a_dataset_already_deleted_by_another_request_is_left_gone(alice, data):
    Dataset.objects.filter(pk=data.pk).delete()
    dataset_delete(dataset=data, by=alice)  # nothing to do, no 500


# ---- the create holds the row: the deletion waits, then sees what was created -----------------------

def _in_thread(fn):
    """Run `fn` in a thread on its own database connection; `out` gets its "result" or "error", and
    "pid", its connection's backend, set (with the `started` event) before `fn` runs."""
    out: dict = {"started": threading.Event()}

    def body():
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                out["pid"] = cursor.fetchone()[0]
            out["started"].set()
            out["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            out["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread, out


BLOCKED_WITHIN_S = 30


def _blocked_on_a_lock(thread: threading.Thread, out: dict) -> bool:
    """True once the thread's backend (`out["pid"]`) is seen waiting on a lock in pg_stat_activity;
    False when the thread ends first (it did not wait). Fails the test loudly when the thread has not
    started, or neither happens, within BLOCKED_WITHIN_S: never a vacuous answer."""
    if not out["started"].wait(BLOCKED_WITHIN_S):
        pytest.fail(f"the deleting thread did not start within {BLOCKED_WITHIN_S} s")
    deadline = time.monotonic() + BLOCKED_WITHIN_S
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [out["pid"]])
            row = cursor.fetchone()
        if row is not None and row[0] == "Lock":
            return True
        if not thread.is_alive():
            return False
        time.sleep(0.02)
    pytest.fail(f"the deleting thread neither blocked on a lock nor ended within {BLOCKED_WITHIN_S} s")


@pytest.fixture
def delete_at_owner_lock(monkeypatch):
    """`start(delete)`: at the create's owner lock (taken just after its row locks: `lock_owner`, or
    `lock_user` for an export or a playground session) run `delete` from another connection; returns
    {"waited": whether its backend was seen waiting on a lock (the rows the create holds) before it
    ended (`_blocked_on_a_lock`), "thread", "out"}."""
    state: dict = {}

    def start(delete):
        for name in ("lock_owner", "lock_user"):
            original = getattr(Quotas, name)

            def lock(self, *, user, original=original):
                if "thread" not in state:
                    state["thread"], state["out"] = _in_thread(delete)
                    state["waited"] = _blocked_on_a_lock(state["thread"], state["out"])
                original(self, user=user)

            monkeypatch.setattr(Quotas, name, lock)
        return state

    yield start
    if "thread" in state:
        state["thread"].join(30)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("which", ["dataset", "model"])
def test_a_launch_holds_its_dataset_and_model_against_a_deletion(alice, data, policy, cluster, published,
                                                                 delete_at_owner_lock, which):
    delete = (lambda: dataset_delete(dataset=data, by=alice)) if which == "dataset" else (
        lambda: model_delete(model=policy, by=alice))
    state = delete_at_owner_lock(delete)
    run = _launch(alice, data, policy)
    state["thread"].join(30)
    assert state["waited"]
    assert isinstance(state["out"].get("error"), CatalogInUse), state["out"]
    assert Run.objects.filter(pk=run.pk, dataset=data, model=policy).exists()
    assert Dataset.objects.filter(pk=data.pk).exists() and ModelAsset.objects.filter(pk=policy.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_clone_holds_its_source_run_and_the_deletion_then_unlinks_it(alice, data, policy, cluster, published,
                                                                      delete_at_owner_lock):
    source = _launch(alice, data, policy, "source")
    Run.objects.filter(pk=source.pk).update(status="stopped")
    source.refresh_from_db()
    state = delete_at_owner_lock(lambda: run_delete(run=source, by=alice))
    clone = run_clone(run=source, by=alice)
    state["thread"].join(30)
    assert state["waited"] and "error" not in state["out"], state["out"]
    assert not Run.objects.filter(pk=source.pk).exists()
    clone.refresh_from_db()
    assert clone.parent_id is None and clone.parent_kind == "clone"


@pytest.mark.django_db(transaction=True)
def test_an_export_holds_its_run_and_the_deletion_then_refuses(alice, run_with_ckpts, published,
                                                              delete_at_owner_lock):
    state = delete_at_owner_lock(lambda: run_delete(run=run_with_ckpts, by=alice))
    export, queued = export_new(user=alice, run=run_with_ckpts, data={"step": 1})
    state["thread"].join(30)
    assert queued and state["waited"]
    assert isinstance(state["out"].get("error"), RunRefused), state["out"]
    assert "export" in str(state["out"]["error"])
    assert Export.objects.filter(pk=export.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_holds_its_dataset_and_the_deletion_then_refuses(alice, run_with_ckpts, data, published,
                                                                      cluster, delete_at_owner_lock):
    state = delete_at_owner_lock(lambda: dataset_delete(dataset=data, by=alice))
    ev = evaluation_new(user=alice, run=run_with_ckpts, dataset=data, data={"checkpoints": [1], "k": 1})
    state["thread"].join(30)
    assert state["waited"]
    assert isinstance(state["out"].get("error"), CatalogInUse), state["out"]
    assert Evaluation.objects.filter(pk=ev.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_playground_session_holds_its_model_and_the_deletion_then_refuses(alice, policy, published,
                                                                           delete_at_owner_lock):
    from rlstudio.playground.services import session_new

    state = delete_at_owner_lock(lambda: model_delete(model=policy, by=alice))
    session = session_new(user=alice, data={"targets": [{"model": policy.pk}], "messages": HELLO})
    state["thread"].join(30)
    assert state["waited"]
    error = state["out"].get("error")
    assert isinstance(error, CatalogInUse) and f"playground session #{session.pk}" in str(error), state["out"]
    assert ModelAsset.objects.filter(pk=policy.pk).exists()


@pytest.mark.django_db
def test_a_model_is_deleted_once_its_playground_session_has_ended(alice, policy):
    session = PlaygroundSession.objects.create(owner=alice, targets=[{"key": "a", "kind": "model", "model": policy.pk,
                                                                      "run": None, "step": None, "label": "p"}],
                                               messages={}, settings={})
    with pytest.raises(CatalogInUse, match="stop it first"):
        model_delete(model=policy, by=alice)
    PlaygroundSession.objects.filter(pk=session.pk).update(status="stopped")
    model_delete(model=policy, by=alice)
    assert not ModelAsset.objects.filter(pk=policy.pk).exists()


def test_the_missing_row_is_named_even_when_present_ones_are_locked_first(db, alice, data, policy):
    from django.db import transaction

    from rlstudio.rowlocks import lock_for_use

    with transaction.atomic():
        assert lock_for_use([("dataset", Dataset, data.pk), ("model", ModelAsset, policy.pk),
                             ("val_dataset", Dataset, None)]) is None
        assert lock_for_use([("model", ModelAsset, policy.pk), ("dataset", Dataset, 10**9)]) == "dataset"


# ---- the safety net at the API edge ----------------------------------------------------------------

@pytest.mark.django_db
def test_an_integrity_error_reaching_the_api_edge_is_a_409_conflict():
    """A real foreign-key violation (a row referring to one deleted meanwhile) is a 409 conflict."""
    from django.db import connection, transaction

    from rlstudio.api.errors import api_exception_handler
    from rlstudio.quotas.models import GpuQuota

    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET CONSTRAINTS ALL IMMEDIATE")  # Django defers foreign keys to the commit
        GpuQuota.objects.create(user_id=2_000_000_000)
    response = api_exception_handler(caught.value, {})
    assert response is not None and response.status_code == 409
    assert response.data["error"]["code"] == "conflict"
    assert "at the same time" in response.data["error"]["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method, body", [("patch", {"add_users": ["bob"]}), ("put", {"users": ["bob"]})])
def test_a_sharing_change_racing_the_runs_deletion_is_a_404(alice, bob, data, policy, monkeypatch, method, body):
    """The run is deleted after the sharing view read it, before run_share locks it (the review's
    interleaving, made deterministic): the lock's DoesNotExist is a 404, not a 500."""
    from rlstudio.runs import api as runs_api

    run = Run.objects.create(owner=alice, name="going", dataset=data, model=policy, config={}, gpus=0)
    share = runs_api.run_share

    def deleted_meanwhile(**kwargs):
        Run.objects.filter(pk=kwargs["run"].pk).delete()
        return share(**kwargs)

    monkeypatch.setattr(runs_api, "run_share", deleted_meanwhile)
    resp = getattr(api_client(alice), method)(f"/api/v1/runs/{run.pk}/sharing/", body, format="json")
    assert resp.status_code == 404, resp.content
    assert resp.json()["error"]["code"] == "not_found"


@pytest.mark.django_db
def test_a_does_not_exist_at_the_api_edge_is_logged_with_where_it_came_from(caplog):
    """The 404 the edge makes of a DoesNotExist hides it from Django's 500 log, so the log line carries
    the traceback: a DoesNotExist that is a bug (not a deletion racing the request) says where it is."""
    from rlstudio.api.errors import api_exception_handler

    try:
        Run.objects.get(pk=-1)
    except Run.DoesNotExist as exc:
        caught = exc
    with caplog.at_level("WARNING", logger="rlstudio.api.errors"):
        response = api_exception_handler(caught, {})
    assert response is not None and response.status_code == 404
    [record] = [r for r in caplog.records if r.name == "rlstudio.api.errors"]
    assert record.exc_info and record.exc_info[1] is caught
