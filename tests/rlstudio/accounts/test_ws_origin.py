"""The WebSocket Origin check compares the scheme's host AND port with the Host the client used."""
import asyncio

import pytest

from rlstudio.accounts.ws_auth import origin_allowed

HOSTS = ["localhost", "127.0.0.1", ".example.com"]


@pytest.mark.parametrize(("origin", "host", "ok"), [
    ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
    ("http://127.0.0.1:8001", "127.0.0.1:8000", False),  # same host, another port
    ("http://127.0.0.1", "127.0.0.1:8000", False),  # port 80 is another port
    ("http://localhost:8000", "127.0.0.1:8000", False),  # another host name
    ("https://app.example.com", "app.example.com", True),  # default ports on both sides
    ("https://app.example.com:443", "app.example.com", True),
    ("https://app.example.com:8443", "app.example.com", False),
    ("http://evil.test:8000", "evil.test:8000", False),  # same origin, but not an allowed host
    (None, "127.0.0.1:8000", False),
    ("null", "127.0.0.1:8000", False),
    ("http://127.0.0.1:99999", "127.0.0.1:8000", False),  # no such port: unparseable
])
def test_origin_allowed(origin, host, ok):
    assert origin_allowed(origin=origin, host=host, allowed_hosts=HOSTS, trusted_origins=[]) is ok


def test_trusted_origin_is_exact():
    trusted = ["https://studio.example.com:8443"]
    assert origin_allowed(origin="https://studio.example.com:8443", host="internal:8000",
                          allowed_hosts=HOSTS, trusted_origins=trusted)
    assert not origin_allowed(origin="https://studio.example.com:9443", host="internal:8000",
                              allowed_hosts=HOSTS, trusted_origins=trusted)


@pytest.mark.django_db(transaction=True)
def test_same_host_other_port_refused_by_the_real_server(asgi_server, alice, make_run):
    """A page served on the same host from another port (another program) cannot open the socket;
    the platform's own origin, with its port, can."""
    import websockets
    from websockets.exceptions import InvalidStatus

    from rlstudio.accounts.services import api_token_create

    run = make_run(alice)
    key = api_token_create(user=alice, name="ws").key
    url = asgi_server.replace("http://", "ws://") + f"/ws/runs/{run.pk}/?token={key}"
    port = int(asgi_server.rsplit(":", 1)[1])

    async def attempt(origin: str):
        try:
            async with websockets.connect(url, origin=origin, open_timeout=10):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(attempt(f"http://127.0.0.1:{port + 1}")) == 403
    assert asyncio.run(attempt("http://127.0.0.1")) == 403
    assert asyncio.run(attempt(asgi_server)) == 101
