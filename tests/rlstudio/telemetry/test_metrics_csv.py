"""GET /api/v1/runs/{id}/metrics.csv: a row a step with every metric name as a column, who may download
it, formula-looking cells defused, and the file streamed in chunks under ASGI too."""
import csv
import io
import warnings

import pytest
from django.test import Client

from rlstudio.runs.services import run_share
from rlstudio.telemetry import downloads

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def _table(resp) -> list[list[str]]:
    return list(csv.reader(io.StringIO(b"".join(resp.streaming_content).decode())))


def test_a_row_a_step_and_a_column_a_metric(alice, run_with_metrics):
    run = run_with_metrics(alice, [
        (1, {"critic/score/mean": 0.25, "actor/pg_loss": -0.5}),
        (0, {"critic/score/mean": 0.0}),
        (2, {"actor/entropy": 1.5, "actor/pg_loss": 0.125}),
    ])
    resp = _client(alice).get(f"/api/v1/runs/{run.pk}/metrics.csv")
    assert resp.status_code == 200 and resp["Content-Type"].startswith("text/csv")
    # Named after the id only: the run's own name (user text, here formula-looking) is not in the header.
    assert resp["Content-Disposition"] == f'attachment; filename="run-{run.pk}-metrics.csv"'
    rows = _table(resp)
    assert rows[0] == ["step", "time", "actor/entropy", "actor/pg_loss", "critic/score/mean"]
    assert [r[0] for r in rows[1:]] == ["0", "1", "2"]
    assert rows[1][2:] == ["", "", "0.0"]
    assert rows[2][2:] == ["", "-0.5", "0.25"]  # a negative number stays a number
    assert rows[3][2:] == ["1.5", "0.125", ""]
    assert rows[1][1].startswith("2025-11-") and rows[1][1].endswith("+00:00")


def test_chunks_cover_every_step_once(alice, run_with_metrics, monkeypatch):
    monkeypatch.setattr(downloads, "CHUNK_ROWS", 3)
    steps = [0, 1, 2, 3, 7, 8, 9, 40]
    run = run_with_metrics(alice, [(s, {"x": s / 4}) for s in steps])
    resp = _client(alice).get(f"/api/v1/runs/{run.pk}/metrics.csv")
    pieces = list(resp.streaming_content)
    assert len(pieces) == 1 + 3  # the header, then 3 + 3 + 2 rows
    rows = list(csv.reader(io.StringIO(b"".join(pieces).decode())))
    assert [int(r[0]) for r in rows[1:]] == steps and [float(r[2]) for r in rows[1:]] == [s / 4 for s in steps]


def test_no_metrics_gives_the_header_alone(alice, run_with_metrics):
    run = run_with_metrics(alice, [])
    assert _table(_client(alice).get(f"/api/v1/runs/{run.pk}/metrics.csv")) == [["step", "time"]]


def test_only_who_may_read_the_run(alice, bob, make_user, run_with_metrics):
    run = run_with_metrics(alice, [(0, {"x": 1.0})])
    url = f"/api/v1/runs/{run.pk}/metrics.csv"
    assert _client(bob).get(url).status_code == 404
    assert Client().get(url).status_code in (401, 403)
    run_share(run=run, by=alice, add=["bob"])
    assert _client(bob).get(url).status_code == 200
    staff = make_user("root", staff=True)
    assert _client(staff).get(url).status_code == 200
    assert _client(alice).get("/api/v1/runs/99999999/metrics.csv").status_code == 404


@pytest.mark.parametrize("value,written", [
    ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"), ("+1", "'+1"), ("-cmd", "'-cmd"), ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "'\tx"), ("plain/name", "plain/name"), (-0.5, -0.5), (3, 3), (True, 1), (None, ""),
    (float("nan"), "nan"), (float("inf"), "inf"),
])
def test_cells(value, written):
    assert downloads.safe_cell(value) == written


def test_streams_through_the_asgi_handler(alice, run_with_metrics, monkeypatch):
    """Under ASGI the view hands Django an async iterator (a sync one would be read whole first)."""
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient

    monkeypatch.setattr(downloads, "CHUNK_ROWS", 2)
    run = run_with_metrics(alice, [(s, {"x": float(s)}) for s in range(5)])

    async def download():
        client = AsyncClient()
        await client.aforce_login(alice)
        resp = await client.get(f"/api/v1/runs/{run.pk}/metrics.csv")
        return resp, [piece async for piece in resp.streaming_content]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resp, pieces = async_to_sync(download)()
    assert resp.status_code == 200 and resp.is_async and len(pieces) == 1 + 3
    rows = list(csv.reader(io.StringIO(b"".join(pieces).decode())))
    assert [r[2] for r in rows[1:]] == ["0.0", "1.0", "2.0", "3.0", "4.0"]


def test_the_run_page_links_the_file(alice, run_with_metrics):
    run = run_with_metrics(alice, [(0, {"x": 1.0})])
    page = _client(alice).get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/api/v1/runs/{run.pk}/metrics.csv" download>Download CSV</a>' in page


def test_the_trainer_messages_as_text(alice, bob, make_dataset, make_model, monkeypatch):
    """GET messages.txt: every log event in seq order, a line each, streamed a chunk at a time; a reader
    of a shared run gets them without server paths, as on the page; anyone else a 404."""
    import json

    from django.test import TestCase

    from rlstudio.runs.failure import PATH_MARK
    from rlstudio.runs.services import run_create

    monkeypatch.setattr(downloads, "MESSAGE_CHUNK", 2)  # three chunks for five events
    run, token = run_create(owner=alice, name="talks", dataset=make_dataset(alice), model=make_model(alice),
                            config={}, gpus=0)
    messages = ["starting", "step 1 done", "saved /srv/rlstudio/runs/7/global_step_1", "<b>x</b>", "bye"]
    events = [{"seq": 10 - i, "type": "log", "time": T0 + 10 - i, "data": {"level": "warning" if i == 1 else "info",
                                                                        "message": m}}
              for i, m in enumerate(reversed(messages))]
    events.append({"seq": 20, "type": "metrics", "time": T0 + 20, "data": {"step": 1, "metrics": {"x": 1.0}}})
    with TestCase.captureOnCommitCallbacks(execute=True):
        Client().post(f"/api/v1/runs/{run.pk}/events/", json.dumps({"events": events}),
                      content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    resp = _client(alice).get(f"/api/v1/runs/{run.pk}/messages.txt")
    assert resp.status_code == 200 and resp["Content-Type"] == "text/plain; charset=utf-8"
    assert resp["Content-Disposition"] == f'attachment; filename="run-{run.pk}-messages.txt"'
    lines = b"".join(resp.streaming_content).decode().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "[info] starting", "[info] step 1 done", "[info] saved /srv/rlstudio/runs/7/global_step_1",
        "[warning] <b>x</b>", "[info] bye"]
    assert lines[0].split(" ", 1)[0] == "2025-11-29T18:13:26+00:00"  # the event's time, ISO 8601 in UTC
    assert _client(bob).get(f"/api/v1/runs/{run.pk}/messages.txt").status_code == 404
    run_share(run=run, by=alice, add=["bob"])
    shared = b"".join(_client(bob).get(f"/api/v1/runs/{run.pk}/messages.txt").streaming_content).decode()
    assert "/srv/rlstudio" not in shared and f"saved {PATH_MARK}" in shared
