"""RunConsumer over the real Redis channel layer, through the whole ASGI websocket stack."""
import asyncio
import json

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from rlstudio.accounts.services import api_token_create
from rlstudio.config.asgi import application
from rlstudio.telemetry.broadcast import run_event_message, run_group

# transaction=True: the consumer reads the database from other threads; a hang must fail, not block.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
ORIGIN = (b"origin", b"http://testserver")


def _session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _connect(path: str, cookie: bytes | None = None, extra: list | None = None) -> WebsocketCommunicator:
    headers = [ORIGIN, (b"host", b"testserver"), *(extra or [])]
    if cookie:
        headers.append((b"cookie", cookie))
    comm = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


def test_owner_receives_group_messages(alice, make_run):
    run = make_run(alice)
    cookie = _session_cookie(alice)

    async def scenario():
        comm = await _connect(f"/ws/runs/{run.pk}/", cookie)
        layer = get_channel_layer()
        events = [{"seq": i, "type": "metrics", "data": {"step": i, "critic/score/mean": i / 10}} for i in range(1, 4)]
        for event in events:
            await layer.group_send(run_group(run.pk), run_event_message(event))
        received = [await comm.receive_json_from(timeout=5) for _ in events]
        await comm.disconnect()
        return events, received

    events, received = asyncio.run(scenario())
    assert received == events


def test_other_user_closed_4403_staff_accepted(alice, bob, staff, make_run):
    run = make_run(alice)
    bob_cookie, staff_cookie = _session_cookie(bob), _session_cookie(staff)

    async def scenario():
        comm = await _connect(f"/ws/runs/{run.pk}/", bob_cookie)
        bob_close = await comm.receive_output(timeout=5)
        missing = await _connect("/ws/runs/987654/", staff_cookie)
        missing_close = await missing.receive_output(timeout=5)
        staff_comm = await _connect(f"/ws/runs/{run.pk}/", staff_cookie)
        await get_channel_layer().group_send(
            run_group(run.pk), run_event_message({"seq": 7, "type": "status", "data": {"status": "running"}})
        )
        staff_msg = await staff_comm.receive_json_from(timeout=5)
        await staff_comm.disconnect()
        return bob_close, missing_close, staff_msg

    bob_close, missing_close, staff_msg = asyncio.run(scenario())
    assert bob_close == {"type": "websocket.close", "code": 4403}
    assert missing_close == {"type": "websocket.close", "code": 4403}
    assert staff_msg["seq"] == 7


def test_anonymous_closed_4401_and_api_token_in_query(alice, make_run):
    run = make_run(alice)
    key = api_token_create(user=alice, name="ws").key

    async def scenario():
        anon = await _connect(f"/ws/runs/{run.pk}/")
        anon_close = await anon.receive_output(timeout=5)
        bad = await _connect(f"/ws/runs/{run.pk}/?token=rls_not-a-key")
        bad_close = await bad.receive_output(timeout=5)
        good = await _connect(f"/ws/runs/{run.pk}/?token={key}")
        await get_channel_layer().group_send(
            run_group(run.pk), run_event_message({"seq": 1, "type": "log", "data": {"line": "hi"}})
        )
        msg = await good.receive_json_from(timeout=5)
        await good.disconnect()
        return anon_close, bad_close, msg

    anon_close, bad_close, msg = asyncio.run(scenario())
    assert anon_close["code"] == 4401 and bad_close["code"] == 4401
    assert msg == {"seq": 1, "type": "log", "data": {"line": "hi"}}


def test_api_token_in_the_handshakes_authorization_header(alice, bob, make_run):
    """A script's token in `Authorization: Token <key>` (the REST API's header; the rlstudio client's
    way, so no key is in a URL) signs the socket in, and wins over a ?token= beside it; a bad one, or
    another scheme, leaves it anonymous (4401)."""
    run = make_run(alice)
    key = api_token_create(user=alice, name="ws").key
    bob_key = api_token_create(user=bob, name="ws").key

    def auth(value: str) -> list:
        return [(b"authorization", value.encode())]

    async def closed(path, extra):
        comm = await _connect(path, extra=extra)
        return (await comm.receive_output(timeout=5))["code"]

    async def scenario():
        codes = [await closed(f"/ws/runs/{run.pk}/", auth("Token rls_not-a-key")),
                 await closed(f"/ws/runs/{run.pk}/", auth(f"Bearer {key}")),
                 await closed(f"/ws/runs/{run.pk}/?token={key}", auth(f"Token {bob_key}"))]
        good = await _connect(f"/ws/runs/{run.pk}/", extra=auth(f"Token {key}"))
        await get_channel_layer().group_send(
            run_group(run.pk), run_event_message({"seq": 1, "type": "log", "data": {"line": "hi"}}))
        msg = await good.receive_json_from(timeout=5)
        await good.disconnect()
        return codes, msg

    codes, msg = asyncio.run(scenario())
    assert codes == [4401, 4401, 4403]  # bob's header wins over alice's ?token=: not his run
    assert msg == {"seq": 1, "type": "log", "data": {"line": "hi"}}


def test_two_authorization_headers_sign_nobody_in(alice, make_run):
    """Two `Authorization` headers are ambiguous: the REST API refuses them (Django joins them into one
    malformed value, 401), and so does the socket (4401), whichever holds a good key."""
    run = make_run(alice)
    key = api_token_create(user=alice, name="ws").key

    async def scenario():
        codes = []
        for headers in ([(b"authorization", f"Token {key}".encode()), (b"authorization", b"Token rls_other")],
                        [(b"authorization", b"Basic eDp5"), (b"authorization", f"Token {key}".encode())]):
            comm = await _connect(f"/ws/runs/{run.pk}/", extra=headers)
            codes.append((await comm.receive_output(timeout=5))["code"])
        return codes

    assert asyncio.run(scenario()) == [4401, 4401]


def test_foreign_origin_refused(asgi_server, alice, make_run):
    """Through the real ASGI server: a handshake from another site's page is refused (HTTP 403).

    (Driven with a real client rather than WebsocketCommunicator: a refused in-process handshake
    left asyncio.run's shutdown waiting on a worker thread now and then under load.)
    """
    import websockets
    from websockets.exceptions import InvalidStatus

    from rlstudio.accounts.services import api_token_create

    run = make_run(alice)
    key = api_token_create(user=alice, name="ws").key
    url = asgi_server.replace("http://", "ws://") + f"/ws/runs/{run.pk}/?token={key}"

    async def attempt(origin: str):
        try:
            async with websockets.connect(url, origin=origin, open_timeout=10):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(attempt("http://evil.example")) == 403
    assert asyncio.run(attempt(asgi_server)) == 101  # the same token from our own origin (host and port)


def test_burst_of_1000_arrives_whole(alice, make_run):
    """A burst through the real layer arrives whole (docs/design.md §5: the core layer's default capacity of
    100 lost 27%; the pub/sub layer in use has no capacity, a busy consumer's messages queue)."""
    run = make_run(alice)
    cookie = _session_cookie(alice)

    async def scenario():
        comm = await _connect(f"/ws/runs/{run.pk}/", cookie)
        layer = get_channel_layer()
        for i in range(1000):
            await layer.group_send(run_group(run.pk), run_event_message({"seq": i, "type": "log", "data": {}}))
        seqs = [(await comm.receive_json_from(timeout=10))["seq"] for _ in range(1000)]
        await comm.disconnect()
        return seqs

    assert asyncio.run(scenario()) == list(range(1000))


def test_socket_closed_4503_when_the_layer_is_lost(alice, make_run, private_redis, settings):
    """The pub/sub layer loses messages while Redis is down and tells no consumer: the layer watch
    notices and the socket closes with 4503, so the browser reconnects with resume_after."""
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [{"address": private_redis.url}], "prefix": "lost-test"}}}
    run = make_run(alice)
    cookie = _session_cookie(alice)

    async def scenario():
        comm = await _connect(f"/ws/runs/{run.pk}/", cookie)
        await asyncio.get_running_loop().run_in_executor(None, private_redis.kill)
        closed = await comm.receive_output(timeout=15)
        await comm.disconnect()
        return closed

    assert asyncio.run(scenario()) == {"type": "websocket.close", "code": 4503}


def _api_put_sharing(user, run_id: int, body: dict) -> int:
    """PUT /api/v1/runs/<id>/sharing/ as `user` (sync: called through sync_to_async); the status code."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client.put(f"/api/v1/runs/{run_id}/sharing/", body, format="json").status_code


def test_unsharing_closes_the_removed_readers_socket_4403(alice, bob, staff, make_run):
    """Bob watches a run shared with him; Alice removes him: his socket is closed with 4403 and gets no
    further event, while Alice's and staff's sockets stay open and keep receiving."""
    from asgiref.sync import sync_to_async

    from rlstudio.runs.services import run_share

    run = make_run(alice)
    run_share(run=run, by=alice, users=["bob"])
    cookies = {u.username: _session_cookie(u) for u in (alice, bob, staff)}

    async def scenario():
        socks = {name: await _connect(f"/ws/runs/{run.pk}/", cookie) for name, cookie in cookies.items()}
        layer, group = get_channel_layer(), run_group(run.pk)
        await layer.group_send(group, run_event_message({"seq": 1, "type": "log", "data": {"line": "before"}}))
        before = {name: (await s.receive_json_from(timeout=5))["seq"] for name, s in socks.items()}
        status = await sync_to_async(_api_put_sharing)(alice, run.pk, {"users": []})
        bob_close = await socks["bob"].receive_output(timeout=5)
        await layer.group_send(group, run_event_message({"seq": 2, "type": "log", "data": {"line": "after"}}))
        after = {name: (await socks[name].receive_json_from(timeout=5))["seq"] for name in ("alice", "root")}
        bob_quiet = await socks["bob"].receive_nothing(timeout=0.5)
        for name in ("alice", "root"):
            await socks[name].disconnect()
        return before, status, bob_close, after, bob_quiet

    before, status, bob_close, after, bob_quiet = asyncio.run(scenario())
    assert before == {"alice": 1, "bob": 1, "root": 1}
    assert status == 200
    assert bob_close == {"type": "websocket.close", "code": 4403}
    assert after == {"alice": 2, "root": 2} and bob_quiet


def test_making_a_run_private_closes_the_everyone_readers_only(alice, bob, make_user, make_run):
    """Visibility everyone -> private: Carol (who read it as everyone) is closed with 4403; Bob, to whom
    it is still shared by name, stays and keeps receiving."""
    from asgiref.sync import sync_to_async

    from rlstudio.runs.services import run_share

    carol = make_user("carol")
    run = make_run(alice)
    run_share(run=run, by=alice, visibility="everyone", users=["bob"])
    bob_cookie, carol_cookie = _session_cookie(bob), _session_cookie(carol)

    async def scenario():
        bob_ws = await _connect(f"/ws/runs/{run.pk}/", bob_cookie)
        carol_ws = await _connect(f"/ws/runs/{run.pk}/", carol_cookie)
        await sync_to_async(run_share)(run=run, by=alice, visibility="everyone")  # unchanged: nothing sent
        await sync_to_async(run_share)(run=run, by=alice, visibility="private")
        carol_close = await carol_ws.receive_output(timeout=5)
        await get_channel_layer().group_send(
            run_group(run.pk), run_event_message({"seq": 5, "type": "log", "data": {"line": "x"}}))
        bob_msg = await bob_ws.receive_json_from(timeout=5)
        carol_quiet = await carol_ws.receive_nothing(timeout=0.5)
        await bob_ws.disconnect()
        return carol_close, bob_msg, carol_quiet

    carol_close, bob_msg, carol_quiet = asyncio.run(scenario())
    assert carol_close == {"type": "websocket.close", "code": 4403}
    assert bob_msg["seq"] == 5 and carol_quiet


def test_deactivating_a_reader_closes_their_run_sockets_4403(alice, bob, make_run):
    """Saving Bob's record tells his run sockets to check again (accounts.sockets): a save that leaves
    him able to read (a new first name, a login's last_login) keeps the socket open; deactivating him
    (as the admin does, user.save()) closes it with 4403, while Alice's stays open."""
    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import update_last_login

    from rlstudio.runs.services import run_share

    run = make_run(alice)
    run_share(run=run, by=alice, users=["bob"])
    bob_cookie, alice_cookie = _session_cookie(bob), _session_cookie(alice)

    def save_bob(**fields):
        for name, value in fields.items():
            setattr(bob, name, value)
        bob.save()

    async def scenario():
        ws = await _connect(f"/ws/runs/{run.pk}/", bob_cookie)
        alice_ws = await _connect(f"/ws/runs/{run.pk}/", alice_cookie)
        await sync_to_async(save_bob)(first_name="Bob")
        await sync_to_async(update_last_login)(None, bob)
        still_open = await ws.receive_nothing(timeout=0.5)
        await sync_to_async(save_bob)(is_active=False)
        closed = await ws.receive_output(timeout=5)
        await get_channel_layer().group_send(
            run_group(run.pk), run_event_message({"seq": 3, "type": "log", "data": {"line": "x"}}))
        alice_msg = await alice_ws.receive_json_from(timeout=5)
        await alice_ws.disconnect()
        return still_open, closed, alice_msg

    still_open, closed, alice_msg = asyncio.run(scenario())
    assert still_open and closed == {"type": "websocket.close", "code": 4403}
    assert alice_msg["seq"] == 3


def _rechecks() -> int:
    """Re-check tasks (accounts.sockets.RecheckedSocket) still alive in this event loop."""
    return sum(t.get_coro().__qualname__ == "_recheck_every" for t in asyncio.all_tasks())


def test_a_bulk_deactivation_closes_a_readers_run_socket_at_the_next_recheck(alice, bob, make_run, settings,
                                                                           monkeypatch):
    """`User.objects.filter(...).update(is_active=False)` sends no signal, so no `user.changed`: Bob's
    run socket is closed with 4403 by its own re-check (every RLSTUDIO_SOCKET_RECHECK_S, here 0.5 s)
    and gets nothing more, while Alice's sockets are checked again several times, stay open and keep
    receiving. No re-check task outlives its socket: closed by the check, disconnected, or the
    consumer cancelled without a disconnect (as the server does after its close timeout)."""
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    from rlstudio.runs.services import run_share
    from rlstudio.telemetry import consumers

    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.5
    checked, real = [], consumers._may_still_watch

    async def counting(user, run_id):
        checked.append(user.username)
        return await real(user, run_id)

    monkeypatch.setattr(consumers, "_may_still_watch", counting)
    run = make_run(alice)
    run_share(run=run, by=alice, users=["bob"])
    bob_cookie, alice_cookie = _session_cookie(bob), _session_cookie(alice)

    def deactivate_bob():
        return get_user_model().objects.filter(pk=bob.pk).update(is_active=False)

    async def scenario():
        path = f"/ws/runs/{run.pk}/"
        bob_ws, alice_ws, spare = [await _connect(path, c) for c in (bob_cookie, alice_cookie, alice_cookie)]
        running = _rechecks()
        updated = await sync_to_async(deactivate_bob)()
        closed = await bob_ws.receive_output(timeout=3)
        after_close = _rechecks()
        await get_channel_layer().group_send(
            run_group(run.pk), run_event_message({"seq": 4, "type": "log", "data": {"line": "x"}}))
        alice_msg = await alice_ws.receive_json_from(timeout=5)
        bob_quiet = await bob_ws.receive_nothing(timeout=0.5)
        alice_open = await alice_ws.receive_nothing(timeout=1.6)  # three more re-checks at least
        spare.future.cancel()
        await alice_ws.disconnect()
        await asyncio.sleep(0.1)
        return running, updated, closed, after_close, alice_msg, bob_quiet, alice_open, _rechecks()

    running, updated, closed, after_close, alice_msg, bob_quiet, alice_open, left = asyncio.run(scenario())
    assert running == 3 and updated == 1
    assert closed == {"type": "websocket.close", "code": 4403}
    assert after_close == 2  # Bob's re-check ended with his socket
    assert alice_msg["seq"] == 4 and bob_quiet and alice_open
    assert checked.count("alice") >= 6  # her two sockets, checked again and again, stayed open
    assert left == 0


def test_sharing_removed_without_the_service_closes_the_readers_sockets_at_the_next_recheck(
        alice, bob, make_user, make_run, settings):
    """A sharing change that does not go through `run_share` sends no `run.access_changed`: the run
    made private by a queryset update closes Carol's socket (she read it as everyone) at its next
    re-check, Bob's (shared by name) stays; then his sharing row deleted by a queryset closes his.
    Alice's stays open throughout and keeps receiving."""
    from asgiref.sync import sync_to_async

    from rlstudio.runs.models import Run
    from rlstudio.runs.services import run_share

    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.5
    carol = make_user("carol")
    run = make_run(alice)
    run_share(run=run, by=alice, visibility="everyone", users=["bob"])
    cookies = {u.username: _session_cookie(u) for u in (alice, bob, carol)}

    def make_private():
        return Run.objects.filter(pk=run.pk).update(visibility="private")

    def unshare_bob():
        return Run.shared_with.through.objects.filter(run_id=run.pk, user_id=bob.pk).delete()[0]

    async def scenario():
        socks = {name: await _connect(f"/ws/runs/{run.pk}/", cookie) for name, cookie in cookies.items()}
        changed = [await sync_to_async(make_private)()]
        carol_close = await socks["carol"].receive_output(timeout=3)
        bob_open = await socks["bob"].receive_nothing(timeout=1.2)
        changed.append(await sync_to_async(unshare_bob)())
        bob_close = await socks["bob"].receive_output(timeout=3)
        await get_channel_layer().group_send(
            run_group(run.pk), run_event_message({"seq": 7, "type": "log", "data": {"line": "x"}}))
        alice_msg = await socks["alice"].receive_json_from(timeout=5)
        await socks["alice"].disconnect()
        return changed, carol_close, bob_open, bob_close, alice_msg

    changed, carol_close, bob_open, bob_close, alice_msg = asyncio.run(scenario())
    assert changed == [1, 1]
    assert carol_close == {"type": "websocket.close", "code": 4403}
    assert bob_open and bob_close == {"type": "websocket.close", "code": 4403}
    assert alice_msg["seq"] == 7


FOLDER = "/srv/rlstudio/runs/42"
FAILURE = ('Traceback (most recent call last):\n  File "/opt/rlstudio/trainer/run.py", line 151, in run\n'
           f"FileNotFoundError: {FOLDER}/train.parquet\n")


def _path_events(first: int) -> list[dict]:
    """A checkpoint, a log line and a failed status, each naming the run's folder; seqs from `first`."""
    return [
        {"seq": first, "type": "checkpoint", "time": 1.0, "data": {"step": 2, "path": f"{FOLDER}/global_step_2"}},
        {"seq": first + 1, "type": "log", "time": 2.0,
         "data": {"level": "info", "message": f"resumed from {FOLDER}/global_step_2"}},
        {"seq": first + 2, "type": "status", "time": 3.0,
         "data": {"state": "failed", "message": FAILURE, "step": 2, "total_steps": 4}},
    ]


def _datas(frames: list[dict]) -> list[dict]:
    """The events' `data` of frames received, batch frames unpacked."""
    events = [e for f in frames for e in (f["events"] if f.get("type") == "batch" else [f])]
    return [e["data"] for e in events]


def test_a_readers_socket_gets_the_runs_events_without_server_paths(alice, bob, staff, make_run):
    """One group message reaches every socket of a run: each socket redacts for its own user when
    sending. The owner and staff get each checkpoint's path and the messages as the trainer sent them;
    a reader (here with and without batching, replayed and live, one event or a pre-encoded chunk) gets
    the path blank and the messages without server paths, the other events as they are."""
    from rlstudio.runs.failure import PATH_MARK
    from rlstudio.runs.services import run_share
    from rlstudio.telemetry.broadcast import run_events_message
    from rlstudio.telemetry.services import events_ingest

    run = make_run(alice)
    run_share(run=run, by=alice, users=["bob"])
    events_ingest(run=run, raw_events=_path_events(1))  # stored: the replay's source
    metrics = {"seq": 7, "type": "metrics", "time": 4.0, "data": {"step": 3, "metrics": {"critic/score/mean": 0.5}}}
    live = _path_events(4) + [metrics]
    single = {"seq": 8, "type": "checkpoint", "time": 5.0, "data": {"step": 4, "path": f"{FOLDER}/global_step_4"}}
    whole = [e["data"] for e in _path_events(1) + live + [single]]
    redacted = [{"step": 2, "path": ""}, {"level": "info", "message": f"resumed from {PATH_MARK}"},
                {"state": "failed", "message": f"FileNotFoundError: {PATH_MARK}", "step": 2, "total_steps": 4}]
    seen_by_reader = redacted * 2 + [metrics["data"], {"step": 4, "path": ""}]
    cookies = {"alice": _session_cookie(alice), "staff": _session_cookie(staff), "bob": _session_cookie(bob)}

    async def scenario():
        socks = {
            "alice": await _connect(f"/ws/runs/{run.pk}/?resume_after=0&batch=1", cookies["alice"]),
            "staff": await _connect(f"/ws/runs/{run.pk}/?resume_after=0", cookies["staff"]),
            "bob": await _connect(f"/ws/runs/{run.pk}/?resume_after=0", cookies["bob"]),
            "bob batch": await _connect(f"/ws/runs/{run.pk}/?resume_after=0&batch=1", cookies["bob"]),
        }
        layer = get_channel_layer()
        await layer.group_send(run_group(run.pk), run_events_message(live))
        await layer.group_send(run_group(run.pk), run_event_message(single))
        frames = {"alice": 3, "staff": 8, "bob": 8, "bob batch": 3}  # batch: replay, chunk, single
        got = {name: [await socks[name].receive_json_from(timeout=5) for _ in range(n)]
               for name, n in frames.items()}
        for sock in socks.values():
            assert await sock.receive_nothing(timeout=0.2)
            await sock.disconnect()
        return got

    got = asyncio.run(scenario())
    assert _datas(got["alice"]) == _datas(got["staff"]) == whole
    assert _datas(got["bob"]) == _datas(got["bob batch"]) == seen_by_reader
    assert [f["seq"] for f in got["bob"]] == list(range(1, 9))
    assert all(FOLDER not in json.dumps(f) for name in ("bob", "bob batch") for f in got[name])


def test_staff_taken_away_makes_a_shared_staff_socket_a_readers(alice, make_user, make_run):
    """Whether a socket's user manages the run is read again with their access: a staff member the run
    is shared with keeps the socket when staff is taken away, and gets the reader's events from then."""
    from asgiref.sync import sync_to_async

    from rlstudio.runs.services import run_share

    dana = make_user("dana", staff=True)
    run = make_run(alice)
    run_share(run=run, by=alice, users=["dana"])
    cookie = _session_cookie(dana)

    def demote():
        dana.is_staff = False
        dana.save()  # sends user.changed: the socket checks its user again

    async def scenario():
        sock = await _connect(f"/ws/runs/{run.pk}/", cookie)
        layer = get_channel_layer()
        await layer.group_send(run_group(run.pk), run_event_message(_path_events(1)[0]))
        before = await sock.receive_json_from(timeout=5)
        await sync_to_async(demote)()
        await asyncio.sleep(0.5)
        await layer.group_send(run_group(run.pk), run_event_message(_path_events(2)[0]))
        after = await sock.receive_json_from(timeout=5)
        await sock.disconnect()
        return before, after

    before, after = asyncio.run(scenario())
    assert before["data"]["path"] == f"{FOLDER}/global_step_2" and after["data"]["path"] == ""
