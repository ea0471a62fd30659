"""resume_after replay and bursts through the real ingest path, the real Redis layer and a real
ASGI server: exactly the missing events, in seq order, no gap, no duplicate."""
import asyncio
import json
import threading

import pytest
import websockets
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from rlstudio.accounts.services import api_token_create
from rlstudio.config.asgi import application
from rlstudio.runs.services import run_create
from rlstudio.telemetry.services import events_ingest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


@pytest.fixture
def run(alice, make_dataset, make_model):
    return run_create(owner=alice, name="replay", dataset=make_dataset(alice), model=make_model(alice),
                      config={}, gpus=0)[0]


def logs(first, last):
    return [{"seq": i, "type": "log", "time": T0 + i, "data": {"level": "info", "message": f"m{i}"}}
            for i in range(first, last + 1)]


def cookie(user) -> bytes:
    c = Client()
    c.force_login(user)
    return f"sessionid={c.cookies['sessionid'].value}".encode()


async def connect(path, user_cookie):
    comm = WebsocketCommunicator(application, path, headers=HEADERS + [(b"cookie", user_cookie)])
    ok, _ = await comm.connect(timeout=5)
    assert ok
    return comm


async def receive_seqs(comm, n, timeout=20):
    return [(await comm.receive_json_from(timeout=timeout))["seq"] for _ in range(n)]


def test_resume_after_sends_exactly_the_missing_events(alice, run):
    events_ingest(run=run, raw_events=logs(1, 100))
    c = cookie(alice)

    async def scenario():
        comm = await connect(f"/ws/runs/{run.pk}/?resume_after=40", c)
        replayed = await receive_seqs(comm, 60)
        await sync_to_async(events_ingest)(run=run, raw_events=logs(95, 110))  # 95..100 are duplicates
        live = await receive_seqs(comm, 10)
        nothing = await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()
        other = await connect(f"/ws/runs/{run.pk}/", c)
        await other.send_json_to({"resume_after": 105})
        by_message = await receive_seqs(other, 5)
        await other.send_json_to({"resume_after": "x"})
        err = await other.receive_json_from(timeout=5)
        await other.disconnect()
        return replayed, live, nothing, by_message, err

    replayed, live, nothing, by_message, err = asyncio.run(scenario())
    assert replayed == list(range(41, 101)) and live == list(range(101, 111)) and nothing
    assert by_message == list(range(106, 111)) and "resume_after" in err["error"]


def test_replay_while_ingesting_has_no_gap_and_no_duplicate(alice, run):
    events_ingest(run=run, raw_events=logs(1, 1500))
    c = cookie(alice)

    def writer():
        for start in range(1501, 3001, 100):
            events_ingest(run=run, raw_events=logs(start, start + 99))

    async def scenario():
        thread = threading.Thread(target=writer)
        thread.start()
        comm = await connect(f"/ws/runs/{run.pk}/?resume_after=0", c)
        seqs = await receive_seqs(comm, 3000)
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        extra = await comm.receive_nothing(timeout=0.5)
        await comm.disconnect()
        return seqs, extra

    seqs, extra = asyncio.run(scenario())
    assert seqs == list(range(1, 3001)) and extra


def test_burst_of_5000_reaches_a_connected_client_complete_and_in_order(alice, run):
    """Through the real ingest and the real channel layer (settings: Redis pub/sub): nothing dropped."""
    c = cookie(alice)

    async def scenario():
        comm = await connect(f"/ws/runs/{run.pk}/", c)
        await sync_to_async(events_ingest)(run=run, raw_events=logs(1, 5000))
        seqs = await receive_seqs(comm, 5000)
        await comm.disconnect()
        return seqs

    assert asyncio.run(scenario()) == list(range(1, 5001))


def test_real_websocket_through_the_asgi_server(asgi_server, alice, bob, run):
    key = api_token_create(user=alice, name="ws").key
    bob_key = api_token_create(user=bob, name="ws").key
    events_ingest(run=run, raw_events=logs(1, 20))
    ws_base = asgi_server.replace("http://", "ws://")

    async def scenario():
        async with websockets.connect(f"{ws_base}/ws/runs/{run.pk}/?token={bob_key}",
                                      origin=asgi_server) as ws:
            try:
                await asyncio.wait_for(ws.recv(), 5)
                refused = None
            except websockets.ConnectionClosed as exc:
                refused = exc.rcvd.code
        async with websockets.connect(f"{ws_base}/ws/runs/{run.pk}/?token={key}&resume_after=10",
                                      origin=asgi_server) as ws:
            got = [json.loads(await asyncio.wait_for(ws.recv(), 10))["seq"] for _ in range(10)]
            await sync_to_async(events_ingest)(run=run, raw_events=logs(21, 25))
            got += [json.loads(await asyncio.wait_for(ws.recv(), 10))["seq"] for _ in range(5)]
        return refused, got

    refused, got = asyncio.run(scenario())
    assert refused == 4403 and got == list(range(11, 26))


# ------------------------------------------------------------------------------ batched frames
async def batch_frames(ws, n_events, timeout=20):
    """Read `{"type": "batch"}` frames until n_events events came; (frames, their events' seqs)."""
    frames, seqs = [], []
    while len(seqs) < n_events:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        assert frame["type"] == "batch" and frame["events"], frame
        assert frame["seq"] == frame["events"][-1]["seq"]
        frames.append(frame)
        seqs += [ev["seq"] for ev in frame["events"]]
    return frames, seqs


def test_batch_mode_burst_of_5000_through_the_asgi_server(asgi_server, alice, run):
    """Opted-in batch frames carry a 5,000-event ingest complete, in order, in far fewer frames."""
    key = api_token_create(user=alice, name="ws").key
    ws_base = asgi_server.replace("http://", "ws://")

    async def scenario():
        async with websockets.connect(f"{ws_base}/ws/runs/{run.pk}/?token={key}&batch=1",
                                      origin=asgi_server, max_size=None) as ws:
            await sync_to_async(events_ingest)(run=run, raw_events=logs(1, 5000))
            frames, seqs = await batch_frames(ws, 5000)
            try:
                extra = await asyncio.wait_for(ws.recv(), 0.5)
            except asyncio.TimeoutError:
                extra = None
        return frames, seqs, extra

    frames, seqs, extra = asyncio.run(scenario())
    assert seqs == list(range(1, 5001)) and extra is None
    assert len(frames) == 50  # one frame per `run.events` group message of 100
    assert frames[0]["events"][0] == {"seq": 1, "type": "log", "time": T0 + 1,
                                      "data": {"level": "info", "message": "m1"}}


def test_batch_mode_resume_after_is_exact_through_the_asgi_server(asgi_server, alice, run):
    key = api_token_create(user=alice, name="ws").key
    events_ingest(run=run, raw_events=logs(1, 2500))
    ws_base = asgi_server.replace("http://", "ws://")

    async def scenario():
        url = f"{ws_base}/ws/runs/{run.pk}/?token={key}"
        async with websockets.connect(url + "&batch=1&resume_after=40", origin=asgi_server,
                                      max_size=None) as ws:
            replay_frames, replayed = await batch_frames(ws, 2460)
            await sync_to_async(events_ingest)(run=run, raw_events=logs(2495, 2510))  # 2495..2500 resent
            _, live = await batch_frames(ws, 10)
            try:
                extra = await asyncio.wait_for(ws.recv(), 0.5)
            except asyncio.TimeoutError:
                extra = None
        # The message form: opt in and resume in one message on a plain connection.
        async with websockets.connect(url, origin=asgi_server, max_size=None) as ws:
            await ws.send(json.dumps({"batch": "yes"}))
            bad = json.loads(await asyncio.wait_for(ws.recv(), 10))
            await ws.send(json.dumps({"resume_after": 2505, "batch": True}))
            _, by_message = await batch_frames(ws, 5)
        return [len(f["events"]) for f in replay_frames], replayed, live, extra, bad, by_message

    sizes, replayed, live, extra, bad, by_message = asyncio.run(scenario())
    assert replayed == list(range(41, 2501)) and sizes == [1000, 1000, 460]  # one frame per replay chunk
    assert live == list(range(2501, 2511)) and extra is None
    assert "batch" in bad["error"]
    assert by_message == list(range(2506, 2511))
