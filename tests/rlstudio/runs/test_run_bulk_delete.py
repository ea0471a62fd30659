"""Deleting many runs at once (POST /api/v1/runs/bulk-delete/, the runs list's Delete selected).

All or none: every id must be a finished run of the caller's (any run for staff) that nothing still
needs; otherwise nothing is deleted and every run in the way is named (400 when one is not the
caller's to delete: unknown, unseen, or read-only; 409 when one is live or still needed). Each run goes
through the single delete, so rows, folders, audit and the GPU-hours ledger behave the same.
"""
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.quotas.models import GpuHoursSpent
from rlstudio.quotas.selectors import month_gpu_hours
from rlstudio.runs.models import Run
from rlstudio.runs.services import run_share, runs_delete
from rlstudio.runs.services import deletion
from rlstudio.telemetry.models import MetricRow
from tests.rlstudio.conftest import api_client
from tests.rlstudio.runs.conftest import finished

pytestmark = pytest.mark.django_db
URL = "/api/v1/runs/bulk-delete/"


def _page(user, csrf=False) -> Client:
    c = Client(enforce_csrf_checks=csrf)
    c.force_login(user)
    return c


@pytest.fixture
def three(alice, make_run, runs_dir):
    """alice's three finished runs, each with a metric row and a folder holding a checkpoint file."""
    runs = []
    for name in ("a", "b", "c"):
        run = finished(make_run(alice, name))
        MetricRow.objects.create(run=run, step=1, time=timezone.now(), metrics={"critic/score/mean": 0.5})
        (runs_dir / str(run.pk) / "global_step_2").mkdir(parents=True)
        (runs_dir / str(run.pk) / "global_step_2" / "w.bin").write_bytes(b"w")
        runs.append(run)
    return runs


def _all_there(runs, runs_dir) -> bool:
    return all(Run.objects.filter(pk=r.pk).exists() and MetricRow.objects.filter(run_id=r.pk).exists()
               and (runs_dir / str(r.pk) / "global_step_2" / "w.bin").exists() for r in runs)


def _post(user, ids):
    return api_client(user).post(URL, {"ids": ids}, format="json")


# ------------------------------------------------------------------ the API
def test_the_owner_deletes_several_runs_with_their_rows_and_folders(
        alice, three, runs_dir, make_run, django_capture_on_commit_callbacks):
    a, b, c = three
    with django_capture_on_commit_callbacks(execute=True):
        r = _post(alice, [c.pk, a.pk])
    assert r.status_code == 200, r.content
    assert r.json() == {"deleted": [c.pk, a.pk]}
    for gone in (a, c):
        assert not Run.objects.filter(pk=gone.pk).exists() and not MetricRow.objects.filter(run_id=gone.pk).exists()
        assert not (runs_dir / str(gone.pk)).exists()
        assert AuditEvent.objects.get(action="run.delete", object_id=str(gone.pk)).actor == alice
    assert _all_there([b], runs_dir)


def test_staff_delete_anyones_runs(alice, bob, staff, make_run, runs_dir, django_capture_on_commit_callbacks):
    runs = [finished(make_run(alice, "x")), finished(make_run(bob, "y"))]
    with django_capture_on_commit_callbacks(execute=True):
        r = _post(staff, [run.pk for run in runs])
    assert r.status_code == 200 and r.json()["deleted"] == [run.pk for run in runs]
    assert not Run.objects.filter(pk__in=[run.pk for run in runs]).exists()


def test_another_users_run_reads_as_unknown_and_nothing_is_deleted(alice, bob, make_run, three, runs_dir):
    bobs = finished(make_run(bob, "bobs"))
    missing = max(Run.objects.values_list("pk", flat=True)) + 100
    r = _post(alice, [three[0].pk, bobs.pk, missing])
    assert r.status_code == 400, r.content
    body = r.json()
    assert body["error"]["code"] == "invalid" and body["error"]["field"] == "ids"
    assert "2 of the 3 runs cannot be deleted, so none was" in body["error"]["message"]
    assert body["refused"] == [
        {"id": bobs.pk, "code": "not_found", "message": f"no run with id {bobs.pk}"},
        {"id": missing, "code": "not_found", "message": f"no run with id {missing}"},
    ]
    assert "bobs" not in r.content.decode()  # nothing of bob's run leaks
    assert [e["field"] for e in body["errors"]] == ["ids", "ids"]
    assert body["errors"][0]["message"] == f"run {bobs.pk}: no run with id {bobs.pk}"
    assert _all_there(three, runs_dir) and Run.objects.filter(pk=bobs.pk).exists()
    assert not AuditEvent.objects.filter(action="run.delete").exists()


def test_a_run_shared_with_the_caller_is_refused_read_only(alice, bob, three, runs_dir, make_run):
    run_share(run=three[0], by=alice, add=["bob"])
    own = finished(make_run(bob, "bobs-own"))
    r = _post(bob, [own.pk, three[0].pk])
    assert r.status_code == 400
    (refused,) = r.json()["refused"]
    assert refused["id"] == three[0].pk and refused["code"] == "permission_denied"
    assert "read-only" in refused["message"] and "(alice)" in refused["message"]
    assert _all_there(three, runs_dir) and Run.objects.filter(pk=own.pk).exists()


@pytest.mark.parametrize("status", ["queued", "submitting", "running", "stopping"])
def test_a_live_run_is_a_409_naming_it_and_nothing_is_deleted(alice, three, runs_dir, make_run, status):
    live = make_run(alice, "live")
    Run.objects.filter(pk=live.pk).update(status=status)
    r = _post(alice, [three[0].pk, live.pk, three[1].pk])
    assert r.status_code == 409, r.content
    body = r.json()
    assert body["error"]["code"] == "conflict" and body["error"]["field"] == "ids"
    (refused,) = body["refused"]
    assert refused["id"] == live.pk and refused["code"] == "conflict"
    assert f"run “live”: the run is {status}" in refused["message"] and "first" in refused["message"]
    assert _all_there(three, runs_dir) and Run.objects.filter(pk=live.pk).exists()


def test_runs_still_needed_are_named_each_with_why(alice, three, runs_dir, make_model):
    a, b, c = three
    ev = Evaluation.objects.create(run=a, owner=alice, dataset=a.dataset, checkpoints=[2], k=1, max_prompts=3,
                                   sampling={}, status=EvaluationStatus.RUNNING)
    make_model(alice, "exported-from-b", source_run=b)
    r = _post(alice, [a.pk, b.pk, c.pk])
    assert r.status_code == 409
    refused = r.json()["refused"]
    assert [x["id"] for x in refused] == [a.pk, b.pk]
    assert f"evaluation #{ev.pk}" in refused[0]["message"] and "exported-from-b" in refused[1]["message"]
    assert _all_there(three, runs_dir)


def test_unknown_and_live_together_are_a_400_listing_both(alice, three, make_run, runs_dir):
    live = make_run(alice, "live")  # queued
    r = _post(alice, [live.pk, 10**9])
    assert r.status_code == 400
    assert [(x["id"], x["code"]) for x in r.json()["refused"]] == [(live.pk, "conflict"), (10**9, "not_found")]
    assert Run.objects.filter(pk=live.pk).exists()


@pytest.mark.parametrize("body, says", [
    ({}, "must be a list"),
    ({"ids": None}, "must be a list"),
    ({"ids": "1,2"}, "must be a list"),
    ({"ids": {"1": 1}}, "must be a list"),
    ({"ids": ["1"]}, "positive integers"),
    ({"ids": [1.5]}, "positive integers"),
    ({"ids": [True]}, "positive integers"),
    ({"ids": [0]}, "positive integers"),
    ({"ids": [-3]}, "positive integers"),
    ({"ids": [[1]]}, "positive integers"),
    ({"ids": []}, "at least one"),
    ({"ids": [1, 2, 1]}, "run id 1 is given twice"),
    ([1, 2], "must be a list"),
])
def test_bad_ids_are_a_400_on_ids(alice, three, runs_dir, body, says):
    r = api_client(alice).post(URL, body, format="json")
    assert r.status_code == 400, r.content
    err = r.json()["error"]
    assert err["field"] == "ids" and err["code"] == "invalid" and says in err["message"], err
    assert _all_there(three, runs_dir)


def test_more_than_the_limit_is_a_400_and_the_limit_is_a_setting(alice, three, runs_dir, settings):
    settings.RLSTUDIO_RUNS_BULK_DELETE_MAX = 2
    r = _post(alice, [run.pk for run in three])
    assert r.status_code == 400 and r.json()["error"]["field"] == "ids"
    assert r.json()["error"]["message"] == "at most 2 runs at once, got 3"
    assert _all_there(three, runs_dir)
    settings.RLSTUDIO_RUNS_BULK_DELETE_MAX = 100
    assert _post(alice, list(range(1, 102))).json()["error"]["message"] == "at most 100 runs at once, got 101"


def test_a_reader_only_and_anonymous_callers(three):
    assert APIClient().post(URL, {"ids": [three[0].pk]}, format="json").status_code in (401, 403)
    assert Run.objects.filter(pk=three[0].pk).exists()


def test_a_hook_that_fails_on_one_run_rolls_every_run_back(alice, three, runs_dir, monkeypatch,
                                                             django_capture_on_commit_callbacks):
    a, b, c = three

    def hook(run):
        if run.pk == c.pk:
            raise RuntimeError("ledger down")

    monkeypatch.setattr(deletion, "_DELETE_HOOKS", [*deletion._DELETE_HOOKS, hook])
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        runs_delete(run_ids=[a.pk, b.pk, c.pk], by=alice)
    assert _all_there(three, runs_dir)
    assert not AuditEvent.objects.filter(action="run.delete").exists()


def test_bulk_deleted_gpu_runs_keep_their_gpu_hours(alice, make_run, runs_dir, settings):
    settings.RAY_ADDRESS = None
    now = timezone.now()
    runs = [finished(make_run(alice, f"g{i}"), gpus=gpus, started=now - timedelta(seconds=secs), finished=now)
            for i, (gpus, secs) in enumerate([(8, 5.5), (1333, 9.7), (0, 30)])]
    before = month_gpu_hours(user=alice, now=now)
    assert before > 3.5
    r = _post(alice, [run.pk for run in runs])
    assert r.status_code == 200, r.content
    assert not Run.objects.filter(owner=alice).exists()
    assert month_gpu_hours(user=alice, now=now) == before
    kept = GpuHoursSpent.objects.filter(user=alice)
    assert sorted(row.gpu_microseconds for row in kept) == [8 * 5_500_000, 1333 * 9_700_000]  # a CPU run: none


# ------------------------------------------------------------------ the pages
def test_the_list_offers_delete_for_the_users_own_runs_only(alice, bob, three, make_run):
    run_share(run=three[0], by=alice, add=["bob"])
    page = _page(alice).get("/runs/").content.decode()
    assert 'id="delete-button"' in page and "/runs/delete/" in page
    assert page.count("data-can-delete") == 3
    bob_page = _page(bob).get("/runs/").content.decode()
    assert 'id="delete-button"' not in bob_page and "data-can-delete" not in bob_page
    own = finished(make_run(bob, "bobs-own"))
    bob_page = _page(bob).get("/runs/").content.decode()
    assert 'id="delete-button"' in bob_page and bob_page.count("data-can-delete") == 1
    assert f'value="{own.pk}" aria-label="pick bobs-own" data-can-delete' in bob_page


def test_the_confirm_page_then_the_post_deletes_and_says_so(alice, three, runs_dir,
                                                             django_capture_on_commit_callbacks):
    a, b, c = three
    page = _page(alice).get(f"/runs/delete/?ids={a.pk}&ids={c.pk}")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="bulk-delete-form"' in html and "csrfmiddlewaretoken" in html
    assert f'name="ids" value="{a.pk},{c.pk}"' in html and "Delete 2 runs" in html
    with django_capture_on_commit_callbacks(execute=True):
        r = _page(alice).post("/runs/delete/", {"ids": f"{a.pk},{c.pk}"}, follow=True)
    assert r.redirect_chain[-1][0] == "/runs/"
    assert f"2 runs deleted: “a” (#{a.pk}), “c” (#{c.pk})." in r.content.decode()
    assert not Run.objects.filter(pk__in=[a.pk, c.pk]).exists() and _all_there([b], runs_dir)
    assert not (runs_dir / str(a.pk)).exists()


def test_the_post_needs_the_csrf_token_and_a_get_deletes_nothing(alice, three, runs_dir):
    a = three[0]
    assert _page(alice, csrf=True).post("/runs/delete/", {"ids": str(a.pk)}).status_code == 403
    assert _page(alice).get(f"/runs/delete/?ids={a.pk}").status_code == 200
    assert _all_there(three, runs_dir)


def test_the_confirm_page_names_what_is_in_the_way_and_offers_the_rest(alice, bob, three, make_run, runs_dir):
    a, b, c = three
    live = make_run(alice, "live")
    bobs = finished(make_run(bob, "bobs"))
    html = _page(alice).get(f"/runs/delete/?ids={a.pk},{live.pk},{bobs.pk},{c.pk}").content.decode()
    assert 'id="bulk-delete-form"' not in html
    assert "the run is queued" in html and f"no run with id {bobs.pk}" in html and "bobs" not in html.replace(
        f"no run with id {bobs.pk}", "")
    assert "2 of these\n  4 runs cannot be deleted" in html
    assert f"/runs/delete/?ids={a.pk}%2C{c.pk}" in html
    # A POST of the same ids (a page left open) deletes nothing and goes back to the confirm page.
    r = _page(alice).post("/runs/delete/", {"ids": [a.pk, live.pk]}, follow=True)
    assert r.redirect_chain[-1][0] == f"/runs/delete/?ids={a.pk}%2C{live.pk}"
    assert "Nothing was deleted: 1 of the 2 runs cannot be deleted" in r.content.decode()
    assert _all_there(three, runs_dir) and Run.objects.filter(pk=live.pk).exists()


def test_bad_picks_on_the_pages(alice, three, runs_dir):
    r = _page(alice).get("/runs/delete/?ids=abc")
    assert r.status_code == 400 and "positive integers" in r.content.decode()
    assert _page(alice).get("/runs/delete/").status_code == 400
    r = _page(alice).post("/runs/delete/", {"ids": ["1", "1"]}, follow=True)
    assert r.redirect_chain[-1][0] == "/runs/" and "Nothing was deleted: run id 1 is given twice" in r.content.decode()
    assert _all_there(three, runs_dir)


def test_an_id_beyond_the_databases_integers_is_unknown_not_a_500(alice, three, runs_dir):
    r = _post(alice, [three[0].pk, 2**70])
    assert r.status_code == 400 and r.json()["refused"] == [
        {"id": 2**70, "code": "not_found", "message": f"no run with id {2**70}"}]
    assert _page(alice).get(f"/runs/delete/?ids={2**70}").status_code == 200
    assert _page(alice).get(f"/runs/delete/?ids={'9' * 5000}").status_code == 400  # no int() of 5000 digits
    assert _all_there(three, runs_dir)


@pytest.mark.parametrize("high_first", [True, False])
def test_a_bulk_delete_locks_every_owner_in_id_order_whatever_the_ids_order(
        alice, bob, staff, make_run, runs_dir, settings, monkeypatch, high_first):
    """Staff delete one run of each user, one of them with an evaluation by the other: every owner's
    admission lock is first taken in id order (as a single delete takes them), never in the ids' order,
    so a bulk delete cannot deadlock with a single delete of either run; the result is unchanged."""
    from rlstudio.quotas import services as quotas

    settings.RAY_ADDRESS = None
    now = timezone.now()
    low, high = sorted([alice, bob], key=lambda u: u.pk)
    run_low = finished(make_run(low, "low"), gpus=1, started=now - timedelta(seconds=5), finished=now)
    run_high = finished(make_run(high, "high"), gpus=1, started=now - timedelta(seconds=5), finished=now)
    Evaluation.objects.create(run=run_low, owner=high, dataset=run_low.dataset, checkpoints=[2], k=1,
                              max_prompts=3, sampling={}, status=EvaluationStatus.SUCCEEDED, gpus=1,
                              started=now - timedelta(seconds=3), finished=now)
    locked = []
    real = quotas.lock_owners

    def spy(*, user_ids):
        locked.extend(sorted(set(user_ids)))  # the order lock_owners takes them in
        real(user_ids=user_ids)

    monkeypatch.setattr(quotas, "lock_owners", spy)
    ids = [run_high.pk, run_low.pk] if high_first else [run_low.pk, run_high.pk]
    assert runs_delete(run_ids=ids, by=staff) == [(i, {run_low.pk: "low", run_high.pk: "high"}[i]) for i in ids]
    first_taken = list(dict.fromkeys(locked))
    assert first_taken == [low.pk, high.pk], locked
    assert not Run.objects.filter(pk__in=ids).exists()
    assert sorted(GpuHoursSpent.objects.values_list("user_id", flat=True)) == sorted([low.pk, high.pk, high.pk])
