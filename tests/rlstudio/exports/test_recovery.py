"""Exports left behind (exports.services.export_recover, Celery beat every 30 s): an export `running`
whose worker died (no session holds its work lock) is failed, saying so, its partial folder removed,
and can be asked for again; one whose worker is at work is left alone; a `queued` export whose task
was sent long ago and that no worker took is sent again. The task returns at once when another worker
holds the export; a delete checks the export's status under its row lock."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from rlstudio.exports.models import Export, ExportStatus
from rlstudio.exports.services import (WORK_LOCK_SPACE, ExportRefused, export_delete, export_execute,
                                       export_folder, export_recover)
from rlstudio.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def published(monkeypatch):
    sent = []
    from rlstudio.config import celery

    monkeypatch.setattr(celery, "publish", lambda name, *args: sent.append((name, *args)))
    return sent


@pytest.fixture
def run(alice, make_run, settings, tmp_path):
    settings.RUNS_DIR = str(tmp_path / "runs")
    run = make_run(alice, "alice-run")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2)
    run.refresh_from_db()
    for step in (1, 2):
        (tmp_path / "runs" / str(run.pk) / f"global_step_{step}" / "actor").mkdir(parents=True)
    return run


@pytest.fixture
def worker_holding(lock_elsewhere):
    """A worker at work on the export (another session holding its work lock)."""
    return lambda export_id: lock_elsewhere(WORK_LOCK_SPACE, export_id)


def test_a_running_export_whose_worker_died_is_failed_cleaned_and_can_be_asked_again(alice, run, published,
                                                                                      worker_holding):
    export = Export.objects.create(run=run, owner=alice, step=1, status=ExportStatus.RUNNING, started=timezone.now())
    partial = export_folder(run, 1)
    (partial / "huggingface").mkdir(parents=True)
    (partial / "huggingface" / "model.safetensors.part").write_bytes(b"half")
    with worker_holding(export.pk):  # its worker is at work: left alone
        assert export_recover() == {"failed": [], "resent": []}
    export.refresh_from_db()
    assert export.status == ExportStatus.RUNNING and partial.exists()
    assert export_recover()["failed"] == [export.pk]  # the worker's session ended: it died
    export.refresh_from_db()
    assert export.status == ExportStatus.FAILED and "worker stopped" in export.error and export.finished
    assert not partial.exists() and partial.parent.exists()
    client = APIClient()
    client.force_authenticate(alice)
    r = client.post(f"/api/v1/runs/{run.pk}/exports/", {"step": 1}, format="json")
    assert r.status_code == 202 and r.json()["id"] == export.pk and r.json()["status"] == "queued"
    assert published == [("exports.run_export", export.pk)]


def test_a_queued_export_whose_task_was_lost_is_sent_again_once_it_is_old(alice, run, published, settings,
                                                                         worker_holding):
    settings.RLSTUDIO_EXPORT_RESEND_S = 300
    now = timezone.now()
    old = Export.objects.create(run=run, owner=alice, step=1, sent=now - timedelta(seconds=301))
    recent = Export.objects.create(run=run, owner=alice, step=2, sent=now - timedelta(seconds=10))
    assert export_recover() == {"failed": [], "resent": [old.pk]}
    assert published == [("exports.run_export", old.pk)]
    old.refresh_from_db()
    assert old.sent > now  # the clock starts again: not sent on every pass
    assert export_recover()["resent"] == []
    Export.objects.filter(pk=recent.pk).update(sent=None, created=now - timedelta(seconds=400))  # queued before `sent`
    with worker_holding(recent.pk):
        assert export_recover()["resent"] == []  # a worker took it meanwhile
    assert export_recover()["resent"] == [recent.pk]


def test_the_task_returns_at_once_while_another_worker_holds_the_export(alice, run, worker_holding):
    export = Export.objects.create(run=run, owner=alice, step=1)
    with worker_holding(export.pk):
        assert export_execute(export_id=export.pk) == "already running"
    export.refresh_from_db()
    assert export.status == ExportStatus.QUEUED and export.started is None
    assert export_execute(export_id=export.pk) == "failed"  # the empty actor folder cannot be exported
    assert export_execute(export_id=10**9) == "gone"


def test_a_delete_checks_the_status_under_the_rows_lock(alice, run):
    export = Export.objects.create(run=run, owner=alice, step=1, status=ExportStatus.FAILED)
    Export.objects.filter(pk=export.pk).update(status=ExportStatus.QUEUED)  # asked again in another tab
    assert export.status == ExportStatus.FAILED  # what the view loaded
    with pytest.raises(ExportRefused, match="queued"):
        export_delete(user=alice, export=export)
    assert Export.objects.filter(pk=export.pk).exists()


def test_the_beat_runs_the_recovery_every_30_seconds():
    from rlstudio.config.celery import app
    from rlstudio.exports import tasks

    assert tasks.recover.name in app.tasks  # (reading the tasks finalizes the app, which sets its schedule)
    entry = app.conf.beat_schedule["exports-recover"]
    assert entry["task"] == "exports.recover" and entry["schedule"] == 30.0


def test_a_worker_whose_export_was_failed_meanwhile_ends_nothing(alice, run, published, monkeypatch):
    """A worker that lost its connection (and so its lock) while exporting finds, at its end, that the
    recovery failed its export and the user asked again: it neither registers nor ends the new run."""
    from rlstudio.config import celery
    from rlstudio.exports import services

    started = timezone.now() - timedelta(minutes=5)
    export = Export.objects.create(run=run, owner=alice, step=1, status=ExportStatus.RUNNING, started=started)
    Export.objects.filter(pk=export.pk).update(status=ExportStatus.QUEUED, started=None)  # failed, asked again
    assert not services._still_mine(export)
    assert not services._finish(export, status=ExportStatus.SUCCEEDED, mine=True)
    export.refresh_from_db()
    assert export.status == ExportStatus.QUEUED and export.finished is None
    # a send the broker refuses keeps `sent` as it was: the next pass tries again
    monkeypatch.setattr(celery, "publish", lambda name, *args: ConnectionError("broker down"))
    before = Export.objects.get(pk=export.pk).sent
    assert isinstance(services._send(export), ConnectionError) and Export.objects.get(pk=export.pk).sent == before
