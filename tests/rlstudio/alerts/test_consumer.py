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


def test_deactivating_a_user_closes_their_notification_socket_4403(alice, bob):
    """Saving Alice's record tells her notification socket to check her again (accounts.sockets): a
    harmless save (a new first name, a login's last_login) keeps it open and hearing; deactivating her
    (user.save(), as the admin does) closes it with 4403 and sends nothing more; Bob's stays open."""
    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import update_last_login

    rules_cache_clear()
    a_cookie, b_cookie = _cookie(alice), _cookie(bob)
    first = Notification.objects.create(user=alice, kind="lifecycle", event="failed", title="first")
    after = Notification.objects.create(user=alice, kind="lifecycle", event="failed", title="after")
    for_bob = Notification.objects.create(user=bob, kind="lifecycle", event="failed", title="for bob")

    def save(user, **fields):
        for name, value in fields.items():
            setattr(user, name, value)
        user.save()

    async def scenario():
        a, b = await _connect(a_cookie), await _connect(b_cookie)
        await asyncio.sleep(0.2)
        push = sync_to_async(_after_commit)
        await sync_to_async(save)(alice, first_name="Alice")
        await sync_to_async(update_last_login)(None, alice)
        await push(first.pk, push=True, deliver=False)
        live = await a.receive_json_from(timeout=5)
        await sync_to_async(save)(alice, is_active=False)
        closed = await a.receive_output(timeout=5)
        await push(after.pk, push=True, deliver=False)
        a_quiet = await a.receive_nothing(timeout=0.5)
        await push(for_bob.pk, push=True, deliver=False)
        got_b = await b.receive_json_from(timeout=5)
        await b.disconnect()
        return live, closed, a_quiet, got_b

    live, closed, a_quiet, got_b = asyncio.run(scenario())
    assert live["notification"]["title"] == "first"  # still open after the harmless saves
    assert closed == {"type": "websocket.close", "code": 4403}
    assert a_quiet and got_b["notification"]["title"] == "for bob"


def test_a_bulk_deactivation_closes_a_notification_socket_at_the_next_recheck(alice, bob, settings):
    """`User.objects.filter(...).update(is_active=False)` sends no signal: Alice's notification socket
    is closed with 4403 by its own re-check (every RLSTUDIO_SOCKET_RECHECK_S, here 0.5 s) and hears
    nothing more; Bob's stays open across several re-checks and keeps hearing."""
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    rules_cache_clear()
    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.5
    a_cookie, b_cookie = _cookie(alice), _cookie(bob)
    after = Notification.objects.create(user=alice, kind="lifecycle", event="failed", title="after")
    for_bob = Notification.objects.create(user=bob, kind="lifecycle", event="failed", title="for bob")

    def deactivate_alice():
        return get_user_model().objects.filter(pk=alice.pk).update(is_active=False)

    async def scenario():
        a, b = await _connect(a_cookie), await _connect(b_cookie)
        push = sync_to_async(_after_commit)
        updated = await sync_to_async(deactivate_alice)()
        closed = await a.receive_output(timeout=3)
        await push(after.pk, push=True, deliver=False)
        a_quiet = await a.receive_nothing(timeout=0.5)
        b_open = await b.receive_nothing(timeout=1.2)
        await push(for_bob.pk, push=True, deliver=False)
        got_b = await b.receive_json_from(timeout=5)
        await b.disconnect()
        return updated, closed, a_quiet, b_open, got_b

    updated, closed, a_quiet, b_open, got_b = asyncio.run(scenario())
    assert updated == 1 and closed == {"type": "websocket.close", "code": 4403}
    assert a_quiet and b_open and got_b["notification"]["title"] == "for bob"


def test_the_message_and_the_periodic_recheck_go_through_the_same_recheck(alice, bob, settings, monkeypatch):
    """Alice deactivated by user.save() (a `user.changed` message; her socket's own re-check is an hour
    away) and Bob by a bulk update (no message; his socket re-checks every 0.3 s): each socket is
    closed by `RecheckedSocket.recheck`, Alice's from the message handler and Bob's from the periodic
    task, and each leaves both its groups (its notification group and its sockets group) and is
    closed with 4403."""
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model

    from rlstudio.accounts.sockets import RecheckedSocket, sockets_group
    from rlstudio.alerts import consumers
    from rlstudio.alerts.services.notify import user_group

    rules_cache_clear()
    a_cookie, b_cookie = _cookie(alice), _cookie(bob)
    rechecks, left = [], []
    real_recheck, real_leave = RecheckedSocket.recheck, consumers.leave_groups

    async def recheck(self):
        periodic = asyncio.current_task() is self._recheck
        still_open = await real_recheck(self)
        if not still_open:
            rechecks.append((self.scope["user"].username, "periodic" if periodic else "message"))
        return still_open

    async def leave(layer, channel_name, groups, *, what):
        left.append(sorted(g for g in groups if g))
        await real_leave(layer, channel_name, groups, what=what)

    monkeypatch.setattr(RecheckedSocket, "recheck", recheck)
    monkeypatch.setattr(consumers, "leave_groups", leave)

    def deactivate_alice():
        alice.is_active = False
        alice.save()

    def deactivate_bob():
        return get_user_model().objects.filter(pk=bob.pk).update(is_active=False)

    async def scenario():
        settings.RLSTUDIO_SOCKET_RECHECK_S = 3600
        a = await _connect(a_cookie)
        settings.RLSTUDIO_SOCKET_RECHECK_S = 0.3
        b = await _connect(b_cookie)
        await sync_to_async(deactivate_alice)()
        a_closed = await a.receive_output(timeout=5)
        await sync_to_async(deactivate_bob)()
        b_closed = await b.receive_output(timeout=5)
        return a_closed, b_closed

    a_closed, b_closed = asyncio.run(scenario())
    assert a_closed == b_closed == {"type": "websocket.close", "code": 4403}
    assert rechecks == [("alice", "message"), ("bob", "periodic")]
    assert left == [sorted([user_group(alice.pk), sockets_group(alice.pk)]),
                    sorted([user_group(bob.pk), sockets_group(bob.pk)])]
