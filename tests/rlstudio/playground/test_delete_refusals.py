"""The playground tells the catalog and the runs app when a model or a run is in use by a live
session (their `on_model_delete_refusal` / `on_run_delete_refusal` registries, from the playground's
AppConfig.ready), and deletes a deleted run's sessions with it (an `on_run_delete` hook): neither app
knows how sessions name their targets."""
import pytest
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.catalog.services import model_assets as catalog
from rlstudio.catalog.errors import CatalogInUse
from rlstudio.catalog.models import ModelAsset
from rlstudio.playground import selectors, services
from rlstudio.playground.models import PlaygroundSession
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import deletion

pytestmark = pytest.mark.django_db


def _api(user) -> APIClient:
    c = APIClient()
    c.force_authenticate(user)
    return c


def test_the_playground_registers_its_checks_and_hook():
    assert selectors.model_delete_refusal in catalog._MODEL_DELETE_REFUSALS
    assert selectors.run_delete_refusal in deletion._DELETE_REFUSALS
    assert services.run_sessions_delete in deletion._DELETE_HOOKS


@pytest.mark.parametrize("status, refused", [("queued", True), ("running", True), ("succeeded", False),
                                             ("stopped", False)])
def test_a_model_a_live_session_answers_from_is_a_409_naming_it(alice, make_model, status, refused):
    model = make_model(alice, "chatty")
    s = PlaygroundSession.objects.create(owner=alice, status=status,
                                         targets=[{"key": "a", "kind": "model", "model": model.pk}])
    r = _api(alice).delete(f"/api/v1/models/{model.pk}/")
    if refused:
        assert r.status_code == 409, r.content
        assert (f"model 'chatty' is answering in playground session #{s.pk} ({status}): stop it first"
                in r.content.decode())
        assert ModelAsset.objects.filter(pk=model.pk).exists()
    else:
        assert r.status_code == 204, r.content


def test_the_catalog_refuses_with_any_registered_check_and_deletes_nothing(alice, make_model, monkeypatch):
    model = make_model(alice, "kept")
    seen = []

    def check(m):
        seen.append(m.pk)
        return "is pinned by a test"

    monkeypatch.setattr(catalog, "_MODEL_DELETE_REFUSALS", [*catalog._MODEL_DELETE_REFUSALS, check])
    with pytest.raises(CatalogInUse, match="model 'kept' is pinned by a test"):
        catalog.model_delete(model=model, by=alice)
    assert seen == [model.pk] and ModelAsset.objects.filter(pk=model.pk).exists()


def test_a_run_refuses_by_a_registered_check_and_its_ended_sessions_go_with_it(alice, make_run, monkeypatch,
                                                                               settings, tmp_path):
    settings.RUNS_DIR = str(tmp_path / "runs")
    run = make_run(alice, "r")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED)
    run.refresh_from_db()
    other = make_run(alice, "other")
    mine = PlaygroundSession.objects.create(owner=alice, status="succeeded",
                                            targets=[{"key": "a", "kind": "checkpoint", "run": run.pk, "step": 2}])
    theirs = PlaygroundSession.objects.create(owner=alice, status="succeeded",
                                              targets=[{"key": "a", "kind": "checkpoint", "run": other.pk, "step": 2}])
    monkeypatch.setattr(deletion, "_DELETE_REFUSALS", [*deletion._DELETE_REFUSALS, lambda r: "a test holds it"])
    assert deletion.delete_refusal(run) == "a test holds it"
    monkeypatch.undo()
    deletion.run_delete(run=run, by=alice)
    assert not PlaygroundSession.objects.filter(pk=mine.pk).exists()
    assert PlaygroundSession.objects.filter(pk=theirs.pk).exists()
    event = AuditEvent.objects.get(action="playground.sessions_delete")
    assert event.data == {"run": run.pk, "sessions": [mine.pk]}


def test_a_session_whose_worker_died_blocks_no_delete_and_beat_fails_it(alice, bob, make_model, settings):
    """A running session past the time limit plus a minute (its worker died), or a queued one no worker
    took in QUEUE_MAX_S, blocks no delete, even another user's (its owner alone could expire it before);
    Celery beat's playground.expire_stale fails it, saying so."""
    from datetime import timedelta

    from django.utils import timezone

    from rlstudio.config.celery import app
    from rlstudio.playground.tasks import expire_stale

    settings.RLSTUDIO_PLAYGROUND_MAX_S = 600
    now = timezone.now()
    model = make_model(alice, "shared", visibility="everyone")
    target = [{"key": "a", "kind": "model", "model": model.pk}]
    dead = PlaygroundSession.objects.create(owner=bob, status="running", targets=target,
                                            started=now - timedelta(seconds=661))
    never = PlaygroundSession.objects.create(owner=bob, status="queued", targets=target)
    PlaygroundSession.objects.filter(pk=never.pk).update(created=now - timedelta(seconds=selectors.QUEUE_MAX_S + 1))
    alive = PlaygroundSession.objects.create(owner=bob, status="running", targets=target,
                                             started=now - timedelta(seconds=500))
    r = _api(alice).delete(f"/api/v1/models/{model.pk}/")
    assert r.status_code == 409 and f"session #{alive.pk} (running)" in r.content.decode()  # a live one still does
    assert expire_stale() == 2 and "playground.expire_stale" in app.tasks  # (finalizes the app: its schedule)
    assert app.conf.beat_schedule["playground-expire-stale"]["task"] == "playground.expire_stale"
    dead.refresh_from_db()
    never.refresh_from_db()
    assert (dead.status, dead.error) == ("failed", "the worker did not finish the session") and dead.finished
    assert (never.status, never.error) == ("failed", "no worker took the session in time")
    PlaygroundSession.objects.filter(pk=alive.pk).update(started=now - timedelta(seconds=700))
    assert _api(alice).delete(f"/api/v1/models/{model.pk}/").status_code == 204  # stale: blocks nothing before beat
