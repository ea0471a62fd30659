"""A playground session end to end over the real Redis channel layer and the whole ASGI stack: the
task's runner answers from a catalog model and from a run's checkpoint side by side, the text arrives
over the websocket and is what the session stores; another user's socket is refused (4403), an
anonymous one 4401; leaving the page (the socket closes) stops the generation; the time limit too."""
import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from rest_framework.test import APIClient

from rlstudio.config.asgi import application
from rlstudio.playground.models import PlaygroundSession
from rlstudio.playground.runner import session_execute as _session_execute
from rlstudio.runs.models import Run, RunStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]
ORIGIN = (b"origin", b"http://testserver")
URL = "/api/v1/playground/sessions/"


def session_execute(*, session_id: int) -> str:
    """The task's body, closing the database connection of the thread it ran on (as Celery does)."""
    from django.db import connection

    try:
        return _session_execute(session_id=session_id)
    finally:
        connection.close()


def _cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _connect(path: str, cookie: bytes | None) -> WebsocketCommunicator:
    headers = [ORIGIN, (b"host", b"testserver")] + ([(b"cookie", cookie)] if cookie else [])
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


@pytest.fixture
def published(monkeypatch):
    sent = []
    from rlstudio.config import celery

    monkeypatch.setattr(celery, "publish", lambda name, *args: sent.append(args[0]))
    return sent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model", preset="smoke", seed=0)


@pytest.fixture
def targets(alice, make_model, make_run, tiny, settings, tmp_path):
    """A catalog model (the tiny model) and a run of it with a committed checkpoint at step 1."""
    import torch

    from trainer.checkpoint import save_checkpoint
    from trainer.evaluate import load_policy

    settings.RUNS_DIR = str(tmp_path / "runs")
    model = make_model(alice, "tiny-model")
    type(model).objects.filter(pk=model.pk).update(path=str(tiny))
    run = make_run(alice, "tiny-run")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=1, config={
        "actor_rollout_ref": {"model": {"path": str(tiny)}}})
    torch.manual_seed(0)
    state = {k: v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v
             for k, v in load_policy(str(tiny), None).state_dict().items()}  # the "trained" weights
    save_checkpoint(tmp_path / "runs" / str(run.pk), 1, actor_state={"model": state}, loader_state={},
                    trainer_state={}, config={})
    return model, run


def _create(user, body) -> dict:
    c = APIClient()
    c.force_authenticate(user)
    r = c.post(URL, body, format="json")
    assert r.status_code == 202, r.content
    return r.json()


async def _until_end(comm, *, timeout=120.0) -> list[dict]:
    events, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = await comm.receive_json_from(timeout=timeout)
        assert frame["type"] == "events"
        events += frame["events"]
        if events[-1]["type"] == "end":
            return events
    raise AssertionError("no end event")


def test_a_model_and_a_checkpoint_answer_side_by_side_over_the_websocket(alice, bob, targets, published):
    model, run = targets
    hello = [{"role": "user", "content": "What is 2 + 3?"}]
    s = _create(alice, {"targets": [{"model": model.pk}, {"run": run.pk, "step": 1}], "messages": hello,
                        "settings": {"temperature": 0.0, "max_new_tokens": 24}})
    assert published == [s["id"]]
    a_cookie, b_cookie = _cookie(alice), _cookie(bob)

    async def scenario():
        comm = await _connect(s["ws_url"], a_cookie)
        other = await _connect(s["ws_url"], b_cookie)
        other_close = await other.receive_output(timeout=5)
        anon = await _connect(s["ws_url"], None)
        anon_close = await anon.receive_output(timeout=5)
        run_task = asyncio.ensure_future(sync_to_async(session_execute, thread_sensitive=False)(session_id=s["id"]))
        events = await _until_end(comm)
        status = await run_task
        late = await _connect(s["ws_url"], a_cookie)  # a socket that comes later gets the whole log
        replay = await late.receive_json_from(timeout=5)
        await comm.disconnect()
        await late.disconnect()
        return events, status, other_close, anon_close, replay

    events, status, other_close, anon_close, replay = asyncio.run(scenario())
    assert other_close == {"type": "websocket.close", "code": 4403}
    assert anon_close == {"type": "websocket.close", "code": 4401}
    assert status == "succeeded"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert replay["events"] == events
    session = PlaygroundSession.objects.get(pk=s["id"])
    assert session.status == "succeeded" and session.stop_reason == ""
    streamed = {"a": "", "b": ""}
    for e in events:
        if e["type"] == "delta":
            streamed[e["target"]] += e["text"]
    for key in ("a", "b"):
        result = session.results[key]
        assert result["type"] == "done" and 0 < result["tokens"] <= 24
        final = [t["content"] for t in result["turns"] if t["role"] == "assistant"][-1]
        assert streamed[key].strip() == final
    # the checkpoint is not the base model: its weights were changed, so is its greedy answer
    assert streamed["a"] != streamed["b"] and streamed["a"].strip()
    assert events[-1] == {"type": "end", "status": "succeeded", "reason": "", "error": "", "seq": len(events)}


def test_leaving_the_page_stops_the_generation(alice, targets, published, monkeypatch):
    import trainer.playground

    model, _run = targets
    run_chat = trainer.playground.run_chat

    def paced(targets, messages, chat, *, emit, should_stop):  # 20 ms a token: the page leaves long before
        def slow_emit(event):  # the answer could end, however loaded the machine is
            time.sleep(0.02)
            emit(event)
        return run_chat(targets, messages, chat, emit=slow_emit, should_stop=should_stop)

    monkeypatch.setattr(trainer.playground, "run_chat", paced)
    s = _create(alice, {"targets": [{"model": model.pk}], "messages": [{"role": "user", "content": "Tell a story"}],
                        "settings": {"temperature": 1.0, "seed": 7, "max_new_tokens": 512}})
    cookie = _cookie(alice)

    async def scenario():
        comm = await _connect(s["ws_url"], cookie)
        run_task = asyncio.ensure_future(sync_to_async(session_execute, thread_sensitive=False)(session_id=s["id"]))
        first = await comm.receive_json_from(timeout=60)
        await comm.disconnect()  # the page is left
        return first, await asyncio.wait_for(run_task, timeout=120)

    first, status = asyncio.run(scenario())
    assert first["events"][0]["type"] == "delta"
    session = PlaygroundSession.objects.get(pk=s["id"])
    assert status == "stopped" and session.status == "stopped" and session.stop_reason == "page left"
    assert session.results["a"]["type"] == "stopped"
    assert 0 < session.results["a"]["tokens"] < 512  # cut short (how fast: bench/playground.py)


def test_the_time_limit_stops_a_session(alice, targets, published, settings):
    model, _run = targets
    settings.RLSTUDIO_PLAYGROUND_MAX_S = 0
    s = _create(alice, {"targets": [{"model": model.pk}], "messages": [{"role": "user", "content": "hi"}],
                        "settings": {"max_new_tokens": 512, "seed": 7, "temperature": 1.0}})
    assert session_execute(session_id=s["id"]) == "stopped"
    session = PlaygroundSession.objects.get(pk=s["id"])
    assert session.stop_reason == "time limit" and session.results["a"]["type"] == "stopped"


def test_deactivating_the_user_closes_their_playground_socket_4403(alice, staff):
    """Saving Alice's record tells her playground socket to check her again (accounts.sockets): a
    harmless save (a new first name, a login's last_login) keeps it open and streaming; deactivating
    her (user.save(), as the admin does) closes it with 4403 and forwards nothing more, while staff's
    socket on the same session stays open; staff who lose staff are closed too."""
    from channels.layers import get_channel_layer
    from django.contrib.auth.models import update_last_login

    from rlstudio.playground import streams

    session = PlaygroundSession.objects.create(owner=alice, targets=[{"model": 1}])
    path = f"/ws/playground/{session.pk}/"
    alice_cookie, staff_cookie = _cookie(alice), _cookie(staff)

    def save(user, **fields):
        for name, value in fields.items():
            setattr(user, name, value)
        user.save()

    def event(seq: int) -> dict:
        return {"type": "playground.events", "events": [{"seq": seq, "type": "delta", "target": "a", "text": "x"}]}

    async def scenario():
        mine, theirs = await _connect(path, alice_cookie), await _connect(path, staff_cookie)
        layer = get_channel_layer()
        await sync_to_async(save)(alice, first_name="Alice")
        await sync_to_async(update_last_login)(None, alice)
        await layer.group_send(streams.group(session.pk), event(1))
        live = await mine.receive_json_from(timeout=5)
        await theirs.receive_json_from(timeout=5)
        await sync_to_async(save)(alice, is_active=False)
        closed = await mine.receive_output(timeout=5)
        await layer.group_send(streams.group(session.pk), event(2))
        staff_live = await theirs.receive_json_from(timeout=5)
        mine_quiet = await mine.receive_nothing(timeout=0.5)
        await sync_to_async(save)(staff, is_staff=False)
        staff_closed = await theirs.receive_output(timeout=5)
        return live, closed, staff_live, mine_quiet, staff_closed

    live, closed, staff_live, mine_quiet, staff_closed = asyncio.run(scenario())
    assert live["events"][0]["seq"] == 1  # still open after the harmless saves
    assert closed == {"type": "websocket.close", "code": 4403}
    assert staff_live["events"][0]["seq"] == 2 and mine_quiet
    assert staff_closed == {"type": "websocket.close", "code": 4403}


def test_access_lost_without_a_message_closes_a_playground_socket_at_the_next_recheck(alice, bob, staff, make_run,
                                                                                     settings):
    """Bob's session answers from a checkpoint of Alice's run, shared with him. His sharing row deleted
    by a queryset (no `run_share`, no message) closes his socket with 4403 at its next re-check (every
    RLSTUDIO_SOCKET_RECHECK_S, here 0.5 s), and a new socket of his on that session is refused; staff's
    socket on his session and Alice's on her own stay open across several re-checks. Then a bulk
    `update(is_active=False)` of Alice (no signal) closes hers the same way."""
    from channels.layers import get_channel_layer
    from django.contrib.auth import get_user_model

    from rlstudio.playground import streams
    from rlstudio.runs.services import run_share

    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.5
    run = make_run(alice, "shared-run")
    run_share(run=run, by=alice, users=["bob"])
    checkpoint = [{"key": "a", "kind": "checkpoint", "model": None, "run": run.pk, "step": 1, "label": "x"}]
    bobs = PlaygroundSession.objects.create(owner=bob, targets=checkpoint)
    alices = PlaygroundSession.objects.create(owner=alice, targets=checkpoint)
    cookies = {u.username: _cookie(u) for u in (alice, bob, staff)}

    def unshare_bob():
        return Run.shared_with.through.objects.filter(run_id=run.pk, user_id=bob.pk).delete()[0]

    def deactivate_alice():
        return get_user_model().objects.filter(pk=alice.pk).update(is_active=False)

    def event(seq: int) -> dict:
        return {"type": "playground.events", "events": [{"seq": seq, "type": "delta", "target": "a", "text": "x"}]}

    async def scenario():
        bob_ws = await _connect(f"/ws/playground/{bobs.pk}/", cookies["bob"])
        staff_ws = await _connect(f"/ws/playground/{bobs.pk}/", cookies["root"])
        alice_ws = await _connect(f"/ws/playground/{alices.pk}/", cookies["alice"])
        removed = await sync_to_async(unshare_bob)()
        bob_close = await bob_ws.receive_output(timeout=3)
        again = await _connect(f"/ws/playground/{bobs.pk}/", cookies["bob"])
        again_close = await again.receive_output(timeout=5)
        still = [await ws.receive_nothing(timeout=1.2) for ws in (staff_ws, alice_ws)]
        layer = get_channel_layer()
        await layer.group_send(streams.group(bobs.pk), event(1))
        staff_live = await staff_ws.receive_json_from(timeout=5)
        bob_quiet = await bob_ws.receive_nothing(timeout=0.3)
        updated = await sync_to_async(deactivate_alice)()
        alice_close = await alice_ws.receive_output(timeout=3)
        await staff_ws.disconnect()
        return removed, bob_close, again_close, still, staff_live, bob_quiet, updated, alice_close

    removed, bob_close, again_close, still, staff_live, bob_quiet, updated, alice_close = asyncio.run(scenario())
    assert removed == 1 and updated == 1
    assert bob_close == again_close == {"type": "websocket.close", "code": 4403}
    assert still == [True, True] and staff_live["events"][0]["seq"] == 1 and bob_quiet
    assert alice_close == {"type": "websocket.close", "code": 4403}


def test_a_model_no_longer_shared_closes_the_playground_socket_of_its_session(alice, bob, make_model, settings):
    """Bob's session answers from Alice's model, shared with everyone. Once it is private again (staff
    unshare it; here a queryset, no message) Bob's socket closes with 4403 at its next re-check and a
    new one is refused, as for a run no longer shared; Alice's own session on it stays open."""
    from rlstudio.catalog.models import ModelAsset

    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.5
    model = make_model(alice, "shared-model", visibility="everyone")
    target = [{"key": "a", "kind": "model", "model": model.pk, "run": None, "step": None, "label": "x"}]
    bobs = PlaygroundSession.objects.create(owner=bob, targets=target)
    alices = PlaygroundSession.objects.create(owner=alice, targets=target)
    cookies = {u.username: _cookie(u) for u in (alice, bob)}

    def unshare():
        return ModelAsset.objects.filter(pk=model.pk).update(visibility="private")

    async def scenario():
        bob_ws = await _connect(f"/ws/playground/{bobs.pk}/", cookies["bob"])
        alice_ws = await _connect(f"/ws/playground/{alices.pk}/", cookies["alice"])
        opened = await bob_ws.receive_nothing(timeout=0.3)
        await sync_to_async(unshare)()
        bob_close = await bob_ws.receive_output(timeout=3)
        again = await _connect(f"/ws/playground/{bobs.pk}/", cookies["bob"])
        again_close = await again.receive_output(timeout=5)
        alice_open = await alice_ws.receive_nothing(timeout=1.2)
        await alice_ws.disconnect()
        return opened, bob_close, again_close, alice_open

    opened, bob_close, again_close, alice_open = asyncio.run(scenario())
    assert opened and alice_open
    assert bob_close == again_close == {"type": "websocket.close", "code": 4403}
