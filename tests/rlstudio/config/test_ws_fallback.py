"""An unknown WebSocket path is refused at the handshake (HTTP 403), not answered with a 500."""
import asyncio

import pytest
from channels.testing import WebsocketCommunicator

from rlstudio.accounts.services import api_token_create
from rlstudio.config.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]
HEADERS = [(b"origin", b"http://testserver"), (b"host", b"testserver")]


async def _handshake(path: str):
    comm = WebsocketCommunicator(application, path, headers=HEADERS)
    try:
        return await comm.connect(timeout=5)
    finally:
        await comm.disconnect()


@pytest.mark.parametrize("path", ["/ws/nope/", "/ws/runs/abc/", "/ws/runs/1/extra/", "/nothing", "/"])
def test_unknown_path_refused_before_accept(path):
    """Closed before accept (the server's 403), unauthenticated; the old router raised ValueError."""
    connected, _code = asyncio.run(_handshake(path))
    assert connected is False


def test_unknown_path_refused_with_a_token_too(alice):
    key = api_token_create(user=alice, name="ws").key
    connected, _code = asyncio.run(_handshake(f"/ws/nope/?token={key}"))
    assert connected is False


def test_known_path_still_routed(alice, make_run):
    """The fallback goes last: a real socket's path still reaches its consumer (accepted, then 4401)."""
    run = make_run(alice)

    async def scenario():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/", headers=HEADERS)
        connected, _ = await comm.connect(timeout=5)
        closed = await comm.receive_output(timeout=5) if connected else None
        await comm.disconnect()
        return connected, closed

    connected, closed = asyncio.run(scenario())
    assert connected is True
    assert closed == {"type": "websocket.close", "code": 4401}


def test_the_real_server_answers_403_and_logs_no_traceback(asgi_server, _asgi_started):
    """Through Daphne: the refused handshake is an HTTP 403 (it was a 500), and the log has no
    "No route found" traceback."""
    import websockets
    from websockets.exceptions import InvalidStatus

    url = asgi_server.replace("http://", "ws://")

    async def attempt(path: str):
        try:
            async with websockets.connect(url + path, origin=asgi_server, open_timeout=10):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    assert [asyncio.run(attempt(p)) for p in ("/ws/nope/", "/ws/runs/abc/")] == [403, 403]
    log = _asgi_started["log"].read_text(errors="replace")
    assert "No route found" not in log  # (the server is the session's: other tests' lines may be there)
