"""Deleting a finished run (DELETE /api/v1/runs/{id}/, the run page's Delete button).

Owner and staff delete; a reader gets the 403 of every owner-only action, anyone else a 404. Only a
finished run goes (409 naming the state otherwise, and for what still depends on it); its rows and
everything hanging off them go in one transaction, its own folder after the commit (no link followed),
another run's rows and folder stay, runs made from it survive with parent NULL, and it is audited.
"""
import asyncio
import os
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from rlstudio.accounts.models import AuditEvent
from rlstudio.alerts.models import AlertFiring, Notification
from rlstudio.evaluations.models import Evaluation, EvaluationStatus
from rlstudio.exports.models import Export, ExportStatus
from rlstudio.playground.models import PlaygroundSession
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import delete_refusal, run_delete, run_share
from rlstudio.runs.services.deletion import remove_run_folder
from rlstudio.telemetry.models import MetricRow, RunEvent, Sample
from tests.rlstudio.conftest import api_client
from tests.rlstudio.runs.conftest import finished

pytestmark = pytest.mark.django_db


def _page(user) -> Client:
    c = Client(enforce_csrf_checks=False)
    c.force_login(user)
    return c


def _fill(run, owner):
    """Rows of every kind that hang off `run`, and files in its folder."""
    now = timezone.now()
    MetricRow.objects.create(run=run, step=1, time=now, metrics={"critic/score/mean": 0.5})
    Sample.objects.create(run=run, seq=1, step=1, uid="u1", index=0, reward=1.0,
                          transcript={"messages": [{"role": "user", "content": "2+2?"}]})
    RunEvent.objects.create(run=run, seq=1, type="log", time=now, data={"message": "hi"})
    firing = AlertFiring.objects.create(run=run, kind="metric", message="fired")
    Notification.objects.create(user=owner, run=run, firing=firing, kind="alert", event="metric", title="t")
    Evaluation.objects.create(run=run, owner=owner, dataset=run.dataset, checkpoints=[2], k=1, max_prompts=3, sampling={},
                              status=EvaluationStatus.SUCCEEDED)
    Export.objects.create(run=run, owner=owner, step=2, status=ExportStatus.SUCCEEDED)
    PlaygroundSession.objects.create(owner=owner, status="succeeded", targets=[
        {"key": "a", "kind": "checkpoint", "model": None, "run": run.pk, "step": 2, "label": "x"}])


def _rows(run_id) -> dict:
    return {"metrics": MetricRow.objects.filter(run_id=run_id).count(),
            "samples": Sample.objects.filter(run_id=run_id).count(),
            "events": RunEvent.objects.filter(run_id=run_id).count(),
            "firings": AlertFiring.objects.filter(run_id=run_id).count(),
            "notifications": Notification.objects.filter(run_id=run_id).count(),
            "evaluations": Evaluation.objects.filter(run_id=run_id).count(),
            "exports": Export.objects.filter(run_id=run_id).count(),
            "sessions": PlaygroundSession.objects.filter(targets__contains=[{"run": run_id}]).count()}


@pytest.fixture
def two_runs(alice, make_run, runs_dir):
    """alice's two finished runs, each with rows of every kind and a folder with a checkpoint."""
    runs = []
    for name in ("gone", "kept"):
        run = finished(make_run(alice, name))
        _fill(run, alice)
        (runs_dir / str(run.pk) / "global_step_2" / "actor").mkdir(parents=True)
        (runs_dir / str(run.pk) / "global_step_2" / "actor" / "w.bin").write_bytes(b"w")
        runs.append(run)
    return runs


def test_the_owner_deletes_a_finished_run_its_rows_and_folder_and_nothing_of_another(
        alice, two_runs, runs_dir, django_capture_on_commit_callbacks):
    gone, kept = two_runs
    child = finished(Run.objects.create(owner=alice, name="child", dataset=gone.dataset, model=gone.model,
                                         parent=gone, parent_kind="resume",
                                         resume_from=str(runs_dir / str(gone.pk) / "global_step_2")))
    clone = Run.objects.create(owner=alice, name="clone", dataset=gone.dataset, model=gone.model, parent=gone,
                               parent_kind="clone", status=RunStatus.FAILED)
    assert _rows(gone.pk)["sessions"] == 1 and all(_rows(gone.pk).values())
    kept_before = _rows(kept.pk)
    with django_capture_on_commit_callbacks(execute=True):
        r = api_client(alice).delete(f"/api/v1/runs/{gone.pk}/")
    assert r.status_code == 204, r.content
    assert not Run.objects.filter(pk=gone.pk).exists()
    assert not any(_rows(gone.pk).values())
    assert not (runs_dir / str(gone.pk)).exists()
    assert _rows(kept.pk) == kept_before and all(kept_before.values())
    assert (runs_dir / str(kept.pk) / "global_step_2" / "actor" / "w.bin").exists()
    child.refresh_from_db()
    clone.refresh_from_db()
    assert child.parent_id is None and child.parent_kind == "resume" and child.resume_from
    assert clone.parent_id is None and clone.status == RunStatus.FAILED
    ev = AuditEvent.objects.get(action="run.delete", object_id=str(gone.pk))
    assert ev.actor == alice and ev.object_type == "runs.run"
    assert ev.data["name"] == "gone" and ev.data["owner"] == "alice" and ev.data["status"] == "succeeded"
    assert sorted(ev.data["children"]) == sorted([child.pk, clone.pk])
    assert api_client(alice).get(f"/api/v1/runs/{gone.pk}/").status_code == 404


def test_staff_delete_anyones_finished_run(alice, staff, two_runs, django_capture_on_commit_callbacks, runs_dir):
    gone = two_runs[0]
    with django_capture_on_commit_callbacks(execute=True):
        assert api_client(staff).delete(f"/api/v1/runs/{gone.pk}/").status_code == 204
    assert not Run.objects.filter(pk=gone.pk).exists() and not (runs_dir / str(gone.pk)).exists()
    assert AuditEvent.objects.get(action="run.delete", object_id=str(gone.pk)).actor == staff


def test_a_reader_gets_403_and_a_stranger_404_and_nothing_goes(alice, bob, make_user, two_runs, runs_dir):
    gone = two_runs[0]
    run_share(run=gone, by=alice, add=["bob"])
    r = api_client(bob).delete(f"/api/v1/runs/{gone.pk}/")
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "permission_denied" and "delete" in r.json()["error"]["message"]
    assert api_client(make_user("carol")).delete(f"/api/v1/runs/{gone.pk}/").status_code == 404
    assert Run.objects.filter(pk=gone.pk).exists() and all(_rows(gone.pk).values())
    assert (runs_dir / str(gone.pk)).is_dir()
    assert not AuditEvent.objects.filter(action="run.delete").exists()


@pytest.mark.parametrize("status", ["queued", "submitting", "running", "stopping"])
def test_an_active_run_is_a_409_naming_its_state(alice, make_run, status, runs_dir):
    run = make_run(alice)
    Run.objects.filter(pk=run.pk).update(status=status)
    r = api_client(alice).delete(f"/api/v1/runs/{run.pk}/")
    assert r.status_code == 409
    msg = r.json()["error"]["message"]
    assert f"the run is {status}" in msg and "first" in msg
    assert Run.objects.filter(pk=run.pk).exists()


def test_a_run_a_live_resumed_run_starts_from_is_refused_naming_it(alice, two_runs):
    gone = two_runs[0]
    child = Run.objects.create(owner=alice, name="the-child", dataset=gone.dataset, model=gone.model, parent=gone,
                               parent_kind="resume", status=RunStatus.QUEUED)
    r = api_client(alice).delete(f"/api/v1/runs/{gone.pk}/")
    assert r.status_code == 409 and "the-child" in r.json()["error"]["message"]
    assert f"#{child.pk}" in r.json()["error"]["message"]
    assert Run.objects.filter(pk=gone.pk).exists()


def test_live_jobs_on_the_run_and_an_exported_model_refuse(alice, make_run, make_model, runs_dir):
    run = finished(make_run(alice))
    assert delete_refusal(run) == ""
    ev = Evaluation.objects.create(run=run, owner=alice, dataset=run.dataset, checkpoints=[2], k=1, max_prompts=3, sampling={},
                                   status=EvaluationStatus.RUNNING)
    assert f"evaluation #{ev.pk}" in delete_refusal(run)
    ev.delete()
    export = Export.objects.create(run=run, owner=alice, step=2, status=ExportStatus.QUEUED)
    assert f"export #{export.pk}" in delete_refusal(run)
    export.delete()
    s = PlaygroundSession.objects.create(owner=alice, status="running",
                                         targets=[{"key": "a", "kind": "checkpoint", "run": run.pk, "step": 2}])
    assert f"playground session #{s.pk}" in delete_refusal(run)
    s.delete()
    make_model(alice, "exported", source_run=run)
    assert "exported" in delete_refusal(run)
    run.exported_models.all().delete()
    assert delete_refusal(run) == ""


def test_a_run_that_held_gpus_this_month_is_deleted(alice, make_run, runs_dir):
    """Its GPU-hours stay in the month's budget (tests/rlstudio/quotas/test_gpu_hours_kept.py)."""
    now = timezone.now()
    run = finished(make_run(alice), gpus=1, started=now - timedelta(minutes=1), finished=now)
    ev = Evaluation.objects.create(run=run, owner=alice, dataset=run.dataset, checkpoints=[2], k=1, max_prompts=3,
                                   sampling={}, gpus=1, status=EvaluationStatus.SUCCEEDED,
                                   started=now - timedelta(seconds=30), finished=now)
    assert delete_refusal(run) == ""
    assert api_client(alice).delete(f"/api/v1/runs/{run.pk}/").status_code == 204
    assert not Run.objects.filter(pk=run.pk).exists() and not Evaluation.objects.filter(pk=ev.pk).exists()


def test_a_link_in_the_run_folder_is_not_followed(alice, two_runs, runs_dir, tmp_path,
                                                  django_capture_on_commit_callbacks):
    gone = two_runs[0]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    os.symlink(outside / "precious.txt", runs_dir / str(gone.pk) / "link.txt")
    os.symlink(outside, runs_dir / str(gone.pk) / "linkdir")
    with django_capture_on_commit_callbacks(execute=True):
        assert api_client(alice).delete(f"/api/v1/runs/{gone.pk}/").status_code == 204
    assert not (runs_dir / str(gone.pk)).exists()
    assert (outside / "precious.txt").read_text() == "keep"


def test_a_run_folder_that_is_a_link_is_left_alone_and_reported(alice, make_run, runs_dir, tmp_path,
                                                                django_capture_on_commit_callbacks):
    run = finished(make_run(alice))
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "data").mkdir(parents=True)
    runs_dir.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, runs_dir / str(run.pk))
    with django_capture_on_commit_callbacks(execute=True):
        assert api_client(alice).delete(f"/api/v1/runs/{run.pk}/").status_code == 204
    assert (elsewhere / "data").is_dir()
    left = AuditEvent.objects.get(action="run.delete_folder_left")
    assert left.data["run"] == run.pk
    assert remove_run_folder(run.pk, tmp_path / "nothing-here" / str(run.pk), runs_dir) is True


def test_the_run_page_offers_delete_to_its_owner_only_and_the_post_deletes(
        alice, bob, two_runs, runs_dir, django_capture_on_commit_callbacks):
    gone = two_runs[0]
    run_share(run=gone, by=alice, add=["bob"])
    page = _page(alice).get(f"/runs/{gone.pk}/").content.decode()
    assert f"/runs/{gone.pk}/delete/" in page and "data-confirm=\"Delete run" in page
    assert f"/runs/{gone.pk}/delete/" not in _page(bob).get(f"/runs/{gone.pk}/").content.decode()
    assert _page(bob).post(f"/runs/{gone.pk}/delete/").status_code == 403
    assert _page(alice).get(f"/runs/{gone.pk}/delete/").status_code == 405
    with django_capture_on_commit_callbacks(execute=True):
        r = _page(alice).post(f"/runs/{gone.pk}/delete/", follow=True)
    assert r.redirect_chain[-1][0] == "/runs/"
    assert "was deleted" in r.content.decode()
    assert not Run.objects.filter(pk=gone.pk).exists() and not (runs_dir / str(gone.pk)).exists()


def test_the_page_hides_delete_on_a_live_run_and_a_refused_post_says_why(alice, make_run):
    run = make_run(alice)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    assert f"/runs/{run.pk}/delete/" not in _page(alice).get(f"/runs/{run.pk}/").content.decode()
    r = _page(alice).post(f"/runs/{run.pk}/delete/", follow=True)
    assert r.redirect_chain[-1][0] == f"/runs/{run.pk}/"
    assert "was not deleted" in r.content.decode() and "the run is running" in r.content.decode()
    assert Run.objects.filter(pk=run.pk).exists()


def test_deleting_a_run_closes_its_open_websockets_with_4403(alice, bob, make_run, settings, transactional_db):
    """Told by the access-changed message after the commit, not the periodic re-check (set far away):
    the owner's and a reader's sockets on the run close, as for a run that does not exist."""
    from asgiref.sync import sync_to_async

    from tests.rlstudio.telemetry.test_consumers import _connect, _session_cookie

    settings.RLSTUDIO_SOCKET_RECHECK_S = 600
    settings.RUNS_DIR = str(settings.BASE_DIR) + "/nonexistent-runs-dir-for-tests"
    run = finished(make_run(alice))
    run_share(run=run, by=alice, add=["bob"])
    cookies = [_session_cookie(alice), _session_cookie(bob)]

    async def scenario():
        socks = [await _connect(f"/ws/runs/{run.pk}/", cookie) for cookie in cookies]
        await sync_to_async(run_delete)(run=run, by=alice)
        return [await s.receive_output(timeout=5) for s in socks]

    closes = asyncio.run(scenario())
    assert closes == [{"type": "websocket.close", "code": 4403}] * 2
