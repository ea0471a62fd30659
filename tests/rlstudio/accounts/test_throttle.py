"""Failed logins and failed API tokens are throttled per account and per address (django-axes).

Real request sequences: Django's test client (the sync middleware path) and a real Daphne (the
async path the platform serves with). AXES_FAILURE_LIMIT is 5, the cool-off 15 minutes.
"""
from datetime import timedelta

import pytest
import requests
from axes.models import AccessAttempt
from django.test import Client
from django.utils import timezone

from rlstudio.accounts.services import api_token_create

from ..conftest import PASSWORD

LOCKOUT = "Too many failed logins for this account or from this address; try again in 15 minutes."


def login(client: Client, username: str, password: str, path: str = "/accounts/login/"):
    return client.post(path, {"username": username, "password": password})


@pytest.mark.django_db
def test_login_locked_after_five_failures_even_with_the_right_password(alice, settings):
    assert settings.AXES_FAILURE_LIMIT == 5
    client = Client(REMOTE_ADDR="10.0.0.1")
    for _ in range(4):
        bad = login(client, "alice", "wrong")
        assert bad.status_code == 200 and "did not match" in bad.content.decode()
    fifth = login(client, "alice", "wrong")
    assert fifth.status_code == 429 and LOCKOUT in fifth.content.decode()

    right = login(client, "alice", PASSWORD)
    assert right.status_code == 429 and LOCKOUT in right.content.decode()
    assert client.get("/runs/").status_code == 302  # not logged in

    # Per account: alice from another address is locked too.
    assert login(Client(REMOTE_ADDR="10.0.0.2"), "alice", PASSWORD).status_code == 429
    # ... and the admin's login page answers the same.
    assert login(Client(REMOTE_ADDR="10.0.0.3"), "alice", PASSWORD, "/admin/login/").status_code == 429

    # Once the cool-off has passed since the last failure, the right password works again.
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    assert login(client, "alice", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_an_address_is_locked_for_every_account(alice, bob):
    client = Client(REMOTE_ADDR="10.0.0.9")
    for name in ("carol", "dave", "erin", "frank", "gina"):  # five accounts, one failure each
        login(client, name, "guess")
    refused = login(client, "bob", PASSWORD)
    assert refused.status_code == 429 and LOCKOUT in refused.content.decode()
    # bob himself is fine from his own address.
    assert login(Client(REMOTE_ADDR="10.0.0.10"), "bob", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_failed_api_tokens_lock_the_address_with_429(alice):
    key = api_token_create(user=alice).key
    client = Client(REMOTE_ADDR="10.0.1.1")
    for i in range(4):
        bad = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token rls_guess{i}")
        assert bad.status_code == 401
    fifth = client.get("/api/v1/runs/", HTTP_AUTHORIZATION="Token rls_guess4")
    assert fifth.status_code == 429 and fifth.json()["error"]["code"] == "throttled"
    locked = client.get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}")  # the right key
    assert locked.status_code == 429
    error = locked.json()["error"]
    assert error["code"] == "throttled"
    assert "Too many failed API tokens for this account or from this address; try again in 15 minutes" \
        in error["message"]
    assert int(locked["Retry-After"]) == 15 * 60
    # Another address with the right key is served.
    assert Client(REMOTE_ADDR="10.0.1.2").get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200


@pytest.mark.django_db
def test_failed_api_tokens_lock_the_token_prefix_from_any_address(alice):
    """Five wrong keys that start like alice's (its public prefix, spread over five addresses) lock
    that prefix: alice's own key is refused until the cool-off, from anywhere."""
    key = api_token_create(user=alice).key
    answers = []
    for i in range(5):
        wrong = key[:12] + "x" * (len(key) - 12 - 1) + str(i)
        answer = Client(REMOTE_ADDR=f"10.0.2.{i}").get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {wrong}")
        answers.append(answer.status_code)
    assert answers == [401, 401, 401, 401, 429]
    assert Client(REMOTE_ADDR="10.0.2.99").get("/api/v1/runs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 429


@pytest.mark.django_db
def test_logins_without_a_request_are_not_throttled(alice):
    """The test client's login() and management commands call authenticate() without a request."""
    assert Client().login(username="alice", password=PASSWORD)


@pytest.mark.django_db(transaction=True)
def test_login_lockout_through_the_real_server(asgi_server, alice):
    """Daphne runs Django's async middleware path (axes calls the lockout callable differently)."""
    web = requests.Session()
    web.get(asgi_server + "/accounts/login/", timeout=10)

    def attempt(password: str):
        return web.post(asgi_server + "/accounts/login/", timeout=10, allow_redirects=False,
                        data={"username": "alice", "password": password,
                              "csrfmiddlewaretoken": web.cookies["csrftoken"]})

    answers = [attempt("wrong").status_code for _ in range(5)]
    assert answers == [200, 200, 200, 200, 429]
    right = attempt(PASSWORD)
    assert right.status_code == 429 and LOCKOUT in right.text
    assert 'id="lockout-message"' in right.text and "sessionid" not in web.cookies


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_failed_websocket_tokens_are_throttled_like_the_api(alice, make_run):
    """`?token=` on a websocket handshake counts failures and honours lockouts as the API's header
    does: five wrong keys from one address lock it, and then even alice's right key from there is
    closed 4401 (not signed in), while from another address it is accepted."""
    import asyncio

    from channels.testing import WebsocketCommunicator

    from rlstudio.config.asgi import application

    run = make_run(alice)
    key = api_token_create(user=alice).key

    async def close_code(token: str, address: str):
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/?token={token}",
                                     headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")])
        comm.scope["client"] = [address, 50000]
        connected, _ = await comm.connect(timeout=5)
        assert connected
        if await comm.receive_nothing(timeout=1):  # still open: accepted
            await comm.disconnect()
            return "open"
        out = await comm.receive_output(timeout=2)
        return out.get("code") if out.get("type") == "websocket.close" else out

    async def scenario():
        guesses = [await close_code(f"rls_guess{i}", "10.0.4.1") for i in range(5)]
        return guesses, await close_code(key, "10.0.4.1"), await close_code(key, "10.0.4.2")

    guesses, locked, elsewhere = asyncio.run(scenario())
    assert guesses == [4401] * 5
    assert AccessAttempt.objects.filter(ip_address="10.0.4.1").exists()
    assert locked == 4401
    assert elsewhere == "open"


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
def test_a_key_holding_a_nul_is_counted_not_a_crash(alice, make_run):
    """A failed key is recorded by its first 12 characters; PostgreSQL refuses a NUL in them, so a key
    holding one (`?token=%00` on a websocket, a header) is counted with U+FFFD in its place."""
    import asyncio

    from channels.testing import WebsocketCommunicator

    from rlstudio.config.asgi import application

    run = make_run(alice)
    bad = Client(REMOTE_ADDR="10.0.5.1").get("/api/v1/runs/", HTTP_AUTHORIZATION="Token rls_\x00guess")
    assert bad.status_code == 401

    async def close_code():
        comm = WebsocketCommunicator(application, f"/ws/runs/{run.pk}/?token=rls_%00guess",
                                     headers=[(b"origin", b"http://testserver"), (b"host", b"testserver")])
        comm.scope["client"] = ["10.0.5.2", 50000]
        connected, _ = await comm.connect(timeout=5)
        assert connected
        return (await comm.receive_output(timeout=5)).get("code")

    assert asyncio.run(close_code()) == 4401
    assert AccessAttempt.objects.filter(ip_address__in=["10.0.5.1", "10.0.5.2"]).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_a_username_longer_than_axes_column_is_a_failed_login_not_a_500(alice, path):
    """axes records the username typed in a 255-character column (PostgreSQL refused a longer one: a
    500 before login); it is counted cut to 255 characters, and locks like any other."""
    client = Client(REMOTE_ADDR="10.0.6.1")
    answers = [login(client, "a" * 100_000, "x", path).status_code for _ in range(5)]
    assert answers == [200, 200, 200, 200, 429]
    assert AccessAttempt.objects.get(ip_address="10.0.6.1").username == "a" * 255
