"""An open websocket is closed (4403) once what signed it in no longer does: the browser session it came
with, when the user's password is changed elsewhere (Django signs every other session out) or that session
is signed out; the API token of a `?token=` socket, when the token is revoked. A password change leaves a
token socket open, as it leaves tokens working. Shown on the notifications socket (every consumer's
re-check is accounts.sockets.RecheckedSocket.recheck)."""
import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from rlstudio.accounts.services import api_token_create, api_token_revoke
from rlstudio.config.asgi import application
from tests.rlstudio.conftest import PASSWORD

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
NEW = "a-longer-Passphrase-77"


def _signed_in(user) -> Client:
    client = Client()
    assert client.login(username=user.get_username(), password=PASSWORD)
    return client


async def _connect(path: str, cookie: bytes | None = None) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(application, path, headers=HEADERS + ([(b"cookie", cookie)] if cookie else []))
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


def test_a_password_change_elsewhere_closes_the_other_sessions_sockets_not_a_tokens(alice, settings):
    settings.RLSTUDIO_SOCKET_RECHECK_S = 3600  # only the user.changed message of the password's save
    stolen, owner = _signed_in(alice), _signed_in(alice)
    cookie = f"sessionid={stolen.cookies['sessionid'].value}".encode()
    key = api_token_create(user=alice, name="ci").key

    def change_password():
        return owner.post("/accounts/profile/password/",
                          {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW}).status_code

    async def scenario():
        by_session = await _connect("/ws/notifications/", cookie)
        by_token = await _connect(f"/ws/notifications/?token={key}")
        quiet_before = await by_session.receive_nothing(timeout=0.3)
        status = await sync_to_async(change_password)()
        closed = await by_session.receive_output(timeout=5)
        token_open = await by_token.receive_nothing(timeout=1)
        await by_token.disconnect()
        return quiet_before, status, closed, token_open

    quiet_before, status, closed, token_open = asyncio.run(scenario())
    assert quiet_before and status == 302
    assert closed == {"type": "websocket.close", "code": 4403}  # it streamed on before
    assert token_open
    assert stolen.get("/accounts/profile/").status_code == 302  # as the pages: that session is out


def test_a_sign_out_or_a_revoked_token_closes_its_socket_at_the_next_recheck(alice, settings):
    settings.RLSTUDIO_SOCKET_RECHECK_S = 0.5
    session = _signed_in(alice)
    cookie = f"sessionid={session.cookies['sessionid'].value}".encode()
    token = api_token_create(user=alice, name="ci")
    kept = _signed_in(alice)
    kept_cookie = f"sessionid={kept.cookies['sessionid'].value}".encode()

    async def scenario():
        by_session = await _connect("/ws/notifications/", cookie)
        by_token = await _connect(f"/ws/notifications/?token={token.key}")
        other = await _connect("/ws/notifications/", kept_cookie)
        await sync_to_async(session.post)("/accounts/logout/")
        await sync_to_async(api_token_revoke)(token=token.token, by=alice)
        closed = [await comm.receive_output(timeout=5) for comm in (by_session, by_token)]
        other_open = await other.receive_nothing(timeout=1.2)  # two re-checks: still signed in
        await other.disconnect()
        return closed, other_open

    closed, other_open = asyncio.run(scenario())
    assert closed == [{"type": "websocket.close", "code": 4403}] * 2
    assert other_open
