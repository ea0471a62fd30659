"""The ingest URL under ASGI: its database work runs on the server's thread pool with a kept
connection (RLSTUDIO_DB_CONN_MAX_AGE), and the exactly-once storage holds there as on the sync path."""
import asyncio
import gc
import json
import threading

import pytest
from django.conf import settings
from django.db.backends.signals import connection_created
from django.test import AsyncClient
from django.urls import resolve

from rlstudio.runs.services import run_create
from rlstudio.telemetry.api import RunEventsIngestView
from rlstudio.telemetry.models import MetricRow, RunEvent

# transaction=True: the pool thread has its own connection and must see the run committed.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _metrics(first: int, last: int) -> list[dict]:
    return [{"seq": s, "type": "metrics", "time": T0 + s, "data": {"step": s, "metrics": {"actor/kl": s / 10}}}
            for s in range(first, last + 1)]


def test_ingest_route_is_async_and_documented_as_the_api_view():
    match = resolve("/api/v1/runs/1/events/")
    assert asyncio.iscoroutinefunction(match.func)
    assert match.func.cls is RunEventsIngestView and match.func.csrf_exempt is True


def test_asgi_posts_reuse_one_connection_and_store_once(alice, make_dataset, make_model):
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] > 0  # the default (60 s) is what is tested
    run, token = run_create(owner=alice, name="asgi-ingest", dataset=make_dataset(alice),
                            model=make_model(alice), config={}, gpus=0)
    created: list[tuple[str, int]] = []

    def on_created(sender, connection, **kwargs):
        created.append((connection.alias, threading.get_ident()))

    async def scenario():
        client = AsyncClient()
        replies = []
        for batch in (_metrics(1, 50), _metrics(51, 100), _metrics(1, 100)):  # the third is a resend
            response = await client.post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": batch}),
                                         content_type="application/json", headers={"Authorization": f"Bearer {token}"})
            replies.append((response.status_code, json.loads(response.content)))
        return replies

    connection_created.connect(on_created)
    try:
        replies = asyncio.run(scenario())
    finally:
        connection_created.disconnect(on_created)
        # The pool threads ended with asyncio.run; their connection goes when its objects are
        # collected (a reference cycle), which must happen before the test database is dropped.
        gc.collect()
    assert [status for status, _ in replies] == [200, 200, 200]
    assert [(body["accepted"], body["duplicates"]) for _, body in replies] == [(50, 0), (50, 0), (0, 100)]
    assert RunEvent.objects.filter(run=run).count() == 100 and MetricRow.objects.filter(run=run).count() == 100
    # Three POSTs, one new connection per pool thread: each kept its own (with CONN_MAX_AGE = 0 a thread
    # opens one per POST). Usually one thread serves all three; on a loaded machine the loop may hand a
    # POST to a second one before the first has marked itself idle (ThreadPoolExecutor's idle semaphore).
    threads = [thread for _alias, thread in created]
    assert {alias for alias, _thread in created} == {"default"}
    assert len(threads) == len(set(threads)) and len(threads) < 3, created
