"""Hardening: the API survives a bounded schemathesis run, limits hold, CSRF guards every page POST.

Run: RLSTUDIO_TEST_DATABASE_NAME=test_deploy .venv/bin/python -m pytest tests/rlstudio/test_hardening.py -q
Isolation of pages / API / websocket lives in test_isolation.py and telemetry/test_consumers.py;
ingest and upload size limits over the API in telemetry/test_ingest.py and catalog/test_dataset_upload.py.
Here: what those leave open.
"""
import asyncio
import json
import re
from pathlib import Path

import pytest
from django.core.wsgi import get_wsgi_application
from django.test import Client

from rlstudio.accounts.services import api_token_create
from rlstudio.catalog.models import Dataset
from rlstudio.runs.models import Run, RunConfig

SCHEMA_URL = "/api/v1/schema/"
EXAMPLES_PER_OPERATION = 15


@pytest.fixture
def owned(alice, make_run):
    """alice owns a run, its dataset and model, and a saved config; she has an API token."""
    run = make_run(alice, "fuzz-run")
    config = RunConfig.objects.create(owner=alice, name="fuzz-config", config={"trainer": {"total_steps": 1}})
    return {"run": run, "config": config, "token": api_token_create(user=alice).key}


@pytest.mark.django_db
@pytest.mark.timeout(300)
def test_schemathesis_finds_no_server_error(owned):
    """Every operation of the published schema, 15 generated cases each, authenticated: no 5xx.

    Half of the cases have their path ids swapped for alice's own objects, so the handlers get past
    the 404 of the ownership rule and see generated bodies and query parameters.
    """
    import schemathesis

    # As Django's test Client does: a WSGI request must not close the test's (transactional) connection.
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        _fuzz(schemathesis, owned)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _fuzz(schemathesis, owned) -> None:
    from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

    schema = schemathesis.openapi.from_wsgi(SCHEMA_URL, get_wsgi_application())
    own_ids = [owned["run"].pk, owned["run"].dataset_id, owned["run"].model_id, owned["config"].pk]
    headers = {"Authorization": f"Token {owned['token']}"}
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @hsettings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, derandomize=True,
                   suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(), own=st.booleans(), pick=st.sampled_from(own_ids))
        def check(case, own, pick):
            if own and case.path_parameters:
                case.path_parameters = {k: pick for k in case.path_parameters}
            response = case.call(headers=headers)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} {case.path_parameters} "
                                f"query={case.query} body={case.body!r:.200} -> {response.status_code}")

        check()
    assert operations >= 25  # the schema really lists the API (docs/api.md), not an empty document
    assert not failures, "\n".join(failures[:20])


@pytest.mark.django_db
def test_upload_over_limit_413_through_the_browser_path(alice, settings, tmp_path):
    """The upload page's POST (session + CSRF, as the page's JS sends it) is refused 413 and keeps nothing."""
    settings.RLSTUDIO_MAX_UPLOAD_BYTES = 64
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    page = client.get("/datasets/upload/")
    assert page.status_code == 200
    token = client.cookies["csrftoken"].value
    body = b'{"question": "1+1?", "answer": "#### 2"}\n' * 10  # 420 bytes > 64
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("big.jsonl", body, content_type="application/jsonl")
    response = client.post("/api/v1/datasets/", {"name": "big", "file": upload, "preset": "gsm8k"},
                           HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 413, response.content
    assert response.json()["error"]["code"] == "too_large"
    assert not Dataset.objects.filter(owner=alice).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_websocket_message_over_limit_closes_too_big(asgi_server, alice, make_run):
    """A viewer's message over 64 KiB closes the socket with 4009; one just under it is answered.

    Through the real ASGI server with a real client. The consumer cannot close with 1009 under Daphne:
    autobahn refuses application close codes outside 1000 / 3000-4999 and the exception became a 1011
    (what this test used to see); so the consumer says "too big" as 4009. Over Daphne's own limit
    (1 MiB) autobahn drops the TCP connection (its servers fail by drop) before the consumer sees it.
    """
    import websockets

    from rlstudio.accounts.services import api_token_create
    from rlstudio.telemetry.consumers import CLOSE_TOO_BIG, MAX_CLIENT_MESSAGE_BYTES

    assert CLOSE_TOO_BIG == 4009
    run = make_run(alice)
    key = api_token_create(user=alice, name="ws").key
    url = asgi_server.replace("http://", "ws://") + f"/ws/runs/{run.pk}/?token={key}"
    kw = {"origin": asgi_server, "open_timeout": 10, "max_size": None}

    async def close_code_after(message) -> int | str | None:
        """The close code the server sent after `message`; "dropped" without a close frame, None if answered."""
        async with websockets.connect(url, **kw) as ws:
            await ws.send(message)
            try:
                await asyncio.wait_for(ws.recv(), 10)
                return None
            except websockets.ConnectionClosed as exc:
                return exc.rcvd.code if exc.rcvd else "dropped"

    async def scenario():
        async with websockets.connect(url, **kw) as ws:
            # Just under the limit: a valid-JSON message the consumer answers (not a resume request).
            pad = "x" * (MAX_CLIENT_MESSAGE_BYTES - 20)
            await ws.send('{"p": "%s"}' % pad)
            answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
        closed = await close_code_after("[" + "1," * MAX_CLIENT_MESSAGE_BYTES + "1]")
        closed_binary = await close_code_after(b"\0" * (MAX_CLIENT_MESSAGE_BYTES + 1))
        closed_huge = await close_code_after("x" * (1024 * 1024 + 1))
        return answer, closed, closed_binary, closed_huge

    answer, closed, closed_binary, closed_huge = asyncio.run(scenario())
    assert "error" in answer
    assert closed == CLOSE_TOO_BIG
    assert closed_binary == CLOSE_TOO_BIG
    assert closed_huge == "dropped"


def _csrf_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_page_posts_without_csrf_token_are_refused(alice, make_run):
    """stop / resume / clone / delete / new run / model register: 403 without the token, nothing changed."""
    run = make_run(alice, "csrf-run")
    dataset = run.dataset
    client = _csrf_client(alice)
    posts = [
        (f"/runs/{run.pk}/stop/", {"checkpoint": "1"}),
        (f"/runs/{run.pk}/resume/", {}),
        (f"/runs/{run.pk}/clone/", {}),
        (f"/datasets/{dataset.pk}/delete/", {}),
        (f"/datasets/{dataset.pk}/", {"action": "reward_check"}),
        ("/models/", {"name": "m", "path": "/tmp/nowhere"}),
        ("/runs/new/", {"name": "x"}),
        ("/api/v1/datasets/", {"name": "x"}),  # session-authenticated API POST: CSRF too
    ]
    for url, data in posts:
        response = client.post(url, data)
        assert response.status_code == 403, (url, response.status_code)
    run.refresh_from_db()
    assert run.status == "queued"
    assert Dataset.objects.filter(pk=dataset.pk).exists()
    assert Run.objects.filter(owner=alice).count() == 1


@pytest.mark.django_db
def test_page_post_with_csrf_token_gets_past_the_guard(alice, make_run):
    """The same client with the page's token is not refused by CSRF (so the 403s above are CSRF's)."""
    run = make_run(alice, "csrf-ok")
    client = _csrf_client(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert match, "the run page carries a CSRF token in its forms"
    response = client.post(f"/runs/{run.pk}/stop/", {"csrfmiddlewaretoken": match.group(1)})
    assert response.status_code != 403
    run.refresh_from_db()
    assert run.status != "queued" or response.status_code in (302, 400, 409)


def test_api_token_requests_need_no_csrf(db, alice):
    """A token-authenticated API POST is not subject to CSRF (no cookie, no ambient authority)."""
    token = api_token_create(user=alice).key
    client = Client(enforce_csrf_checks=True)
    response = client.post("/api/v1/configs/", {"name": "c", "config": {}},
                           content_type="application/json", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_every_page_carries_the_content_security_policy(alice):
    """Scripts: this site or the request's nonce (which the page's inline script carries); no eval."""
    client = Client()
    client.force_login(alice)
    for path in ("/runs/", "/accounts/login/", "/datasets/", "/no-such-page/"):
        response = client.get(path)
        policy = response["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy, path
        assert "'unsafe-eval'" not in policy
        script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src"))
        assert "'unsafe-inline'" not in script_src
    page = client.get("/runs/")
    nonce = re.search(r"'nonce-([^']+)'", page["Content-Security-Policy"]).group(1)
    assert f'<script nonce="{nonce}">' in page.content.decode()
    assert "onchange=" not in page.content.decode()  # inline handlers would be blocked


@pytest.mark.django_db
def test_404_and_500_are_our_pages_and_500_needs_no_database(alice, django_assert_num_queries):
    from django.test import RequestFactory
    from django.views.defaults import server_error

    client = Client()
    client.force_login(alice)
    missing = client.get("/runs/no/such/page/")
    assert missing.status_code == 404 and 'id="page-not-found"' in missing.content.decode()
    assert client.get("/api/v1/nothing/").json()["error"]["code"] == "not_found"  # the API stays JSON
    with django_assert_num_queries(0):
        broken = server_error(RequestFactory().get("/runs/"))
    assert broken.status_code == 500 and b'id="server-error"' in broken.content


def test_ray_head_dashboard_listens_on_loopback_only(ray_head):
    """The launcher's (and the tests') Ray head: its dashboard / Jobs API port is bound to 127.0.0.1,
    never to every interface (docs/deploy.md: an operator surface)."""
    import psutil

    from rlstudio.launcher import ray_head as rh

    port = int(ray_head.rsplit(":", 1)[1])
    listeners = [c.laddr for c in psutil.net_connections(kind="tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listeners and all(addr.ip == "127.0.0.1" for addr in listeners), listeners
    argv = rh.argv(ports=rh.RayPorts(*range(1, 10), workers=(10,)), temp_dir=Path("/tmp/x"), num_cpus=1,
                   object_store_bytes=1)
    assert "--dashboard-host=127.0.0.1" in argv and "--node-ip-address=127.0.0.1" in argv
    assert not any("0.0.0.0" in a for a in argv)
