"""The notification centre's websocket over the real Redis channel layer and the whole ASGI stack: a
user hears their own notifications, live, and never another user's; anonymous sockets are closed 4401."""
import asyncio

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from rlstudio.alerts.models import Notification
from rlstudio.alerts.services import rules_cache_clear
from rlstudio.alerts.services.notify import _after_commit
from rlstudio.config.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
ORIGIN = (b"origin", b"http://testserver")


def _cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _connect(cookie: bytes | None) -> WebsocketCommunicator:
    headers = [ORIGIN, (b"host", b"testserver")] + ([(b"cookie", cookie)] if cookie else [])
    comm = WebsocketCommunicator(application, "/ws/notifications/", headers=headers)
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


def test_each_user_hears_only_their_own_notifications(alice, bob, make_run):
    rules_cache_clear()
    run = make_run(alice)
    a_cookie, b_cookie = _cookie(alice), _cookie(bob)
    mine = Notification.objects.create(user=alice, run=run, kind="alert", event="kl_high", title="for alice")
    theirs = Notification.objects.create(user=bob, kind="lifecycle", event="failed", title="for bob")

    async def scenario():
        a, b = await _connect(a_cookie), await _connect(b_cookie)
        await asyncio.sleep(0.2)
        from asgiref.sync import sync_to_async

        push = sync_to_async(_after_commit)
        await push(mine.pk, push=True, deliver=False)
        got_a = await a.receive_json_from(timeout=5)
        await push(theirs.pk, push=True, deliver=False)
        got_b = await b.receive_json_from(timeout=5)
        a_quiet = await a.receive_nothing(timeout=0.5)
        anon = await _connect(None)
        anon_close = await anon.receive_output(timeout=5)
        for comm in (a, b):
            await comm.disconnect()
        return got_a, got_b, a_quiet, anon_close

    got_a, got_b, a_quiet, anon_close = asyncio.run(scenario())
    assert got_a["type"] == "notification" and got_a["notification"]["title"] == "for alice"
    assert got_a["notification"]["url"] == f"/runs/{run.pk}/"
    assert got_b["notification"]["title"] == "for bob"
    assert a_quiet  # bob's notification never reached alice's socket
    assert anon_close == {"type": "websocket.close", "code": 4401}
