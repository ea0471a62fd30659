"""Launching runs while the Celery broker (Redis) is down: the web answers, the run waits, the reconcile sends it.

A real Daphne serving the platform on the test database, with a real `redis-server` of this test's
own as its broker (the shared Redis at 6379 serves other suites and is never stopped). The Redis is
killed; launches through the API and through the run form answer normally (201 / a redirect to the
run) with the runs queued and "waiting to be submitted: the task queue is unreachable"; a later
launch of the same user waits behind the first without touching the broker. Redis comes back on the
same port, and one pass of the periodic reconcile (run as its own process on that broker, as the
Celery worker runs it every few seconds) admits the runs in order and publishes their submit tasks:
they are in the broker's queue. The submit itself (worker → Ray) after an outage is
tests/e2e/test_run_lifecycle.py::test_a_launch_during_a_broker_outage_runs_once_the_reconcile_admits_it.

Also: a send to a Redis that accepts connections and never answers gives up with an error (kombu's
defaults would wait forever; the settings bound it).

No Ray and no Celery worker here, so that no session reconcile (Celery beat) can admit the runs
behind the test's back: this module runs in the first band of tests (see tests/conftest.py).
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookies import SimpleCookie

import pytest

from tests.conftest import REPO, _service_env
from tests.e2e.fault_procs import DaphneServer, RedisServer

pytestmark = [pytest.mark.django_db(transaction=True)]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _http(method: str, url: str, *, body: bytes | None = None, headers: dict[str, str] | None = None,
          timeout: float = 60) -> tuple[int, dict[str, str], bytes, float]:
    """One request (redirects not followed): status, headers, body and the seconds it took."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    t0 = time.monotonic()
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read(), time.monotonic() - t0
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read(), time.monotonic() - t0


@pytest.fixture
def outage(test_database_url, tmp_path):
    """A private Redis and a Daphne whose broker (and channel layer) it is."""
    redis = RedisServer(folder=tmp_path / "redis")
    redis.start()
    queue = f"rlstudio-outage-{os.getpid()}"
    web = DaphneServer(folder=tmp_path / "web", env={
        "DATABASE_URL": test_database_url, "REDIS_URL": redis.url, "RLSTUDIO_CELERY_QUEUE": queue,
        "RLSTUDIO_CHANNELS_PREFIX": queue})
    web.start()
    try:
        yield {"redis": redis, "web": web, "queue": queue, "database_url": test_database_url}
    finally:
        web.stop()
        redis.kill()


@pytest.fixture
def people(transactional_db):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from rlstudio.accounts.services import api_token_create
    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota

    out = {}
    for name in ("alice", "bob"):
        user = get_user_model().objects.create_user(username=name, password="pw-for-tests-1")
        GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=10)
        dataset = Dataset.objects.create(owner=user, name=f"{name}-data", file_path=f"/tmp/{name}-data.jsonl",
                                         sha256="0" * 64, status="ready", format="jsonl")
        model = ModelAsset.objects.create(owner=user, name=f"{name}-model", path=f"/models/{name}",
                                          tokenizer_ok=True)
        browser = Client()
        browser.force_login(user)  # a real session row: Daphne reads it from the same database
        out[name] = {"user": user, "dataset": dataset, "model": model,
                     "token": api_token_create(user=user, name="outage").key,
                     "session": browser.cookies["sessionid"].value}
    return out


def _api_launch(base: str, who: dict, name: str) -> tuple[int, dict, float]:
    body = json.dumps({"name": name, "dataset": who["dataset"].pk, "model": who["model"].pk,
                       "preset": "cpu_smoke", "gpus": 0}).encode()
    status, _headers, raw, seconds = _http("POST", base + "/api/v1/runs/", body=body, headers={
        "Authorization": f"Token {who['token']}", "Content-Type": "application/json"})
    return status, json.loads(raw or b"{}"), seconds


def _form_launch(base: str, who: dict, name: str) -> tuple[int, str, float]:
    """GET the run form (session cookie), then POST it with its CSRF token, as a browser does."""
    cookie = f"sessionid={who['session']}"
    status, headers, page, _ = _http("GET", base + "/runs/new/", headers={"Cookie": cookie})
    assert status == 200, page[:500]
    jar = SimpleCookie(headers.get("Set-Cookie", ""))
    csrf_cookie = jar["csrftoken"].value
    csrf_input = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1).decode()
    form = urllib.parse.urlencode({
        "csrfmiddlewaretoken": csrf_input, "name": name, "dataset": who["dataset"].pk,
        "model": who["model"].pk, "preset": "cpu_smoke", "gpus": 0}).encode()
    status, headers, raw, seconds = _http("POST", base + "/runs/new/", body=form, headers={
        "Cookie": f"{cookie}; csrftoken={csrf_cookie}", "Content-Type": "application/x-www-form-urlencoded",
        "Referer": base + "/runs/new/"})
    assert status != 500, raw[-2000:]
    return status, headers.get("Location", ""), seconds


def _reconcile_pass(outage) -> dict:
    """One pass of the periodic reconcile in a process of its own on the private broker."""
    code = ("import json, django; django.setup(); from rlstudio.runs.reconcile import reconcile_all; "
            "print('RESULT ' + json.dumps(reconcile_all()))")
    env = _service_env(DATABASE_URL=outage["database_url"], REDIS_URL=outage["redis"].url,
                       RLSTUDIO_CELERY_QUEUE=outage["queue"])
    env.pop("RAY_ADDRESS", None)  # CPU-only runs: admission never asks Ray
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _queued_tasks(outage) -> list[tuple[str, list]]:
    """(task name, args) of each message waiting in the private broker's queue, oldest first."""
    import redis

    client = redis.Redis.from_url(outage["redis"].url)
    out = []
    for raw in reversed(client.lrange(outage["queue"], 0, -1)):  # kombu LPUSHes, workers BRPOP
        message = json.loads(raw)
        body = json.loads(base64.b64decode(message["body"]))
        out.append((message["headers"]["task"], body[0]))
    return out


def test_launches_while_the_broker_is_down_wait_and_the_reconcile_sends_them(outage, people):
    from rlstudio.accounts.models import AuditEvent
    from rlstudio.runs.models import Run, RunStatus as S
    from rlstudio.runs.services import SUBMIT_UNSENT_REASON

    base = outage["web"].base
    outage["redis"].kill()

    status, first, seconds_api = _api_launch(base, people["alice"], "during-outage")
    assert status == 201, first
    assert first["status"] == S.QUEUED and first["queue_reason"] == SUBMIT_UNSENT_REASON, first

    status, location, seconds_form = _form_launch(base, people["bob"], "form-during-outage")
    assert status == 302, status
    form_run = Run.objects.get(name="form-during-outage")
    assert location.endswith(f"/runs/{form_run.pk}/")
    assert form_run.status == S.QUEUED and form_run.queue_reason == SUBMIT_UNSENT_REASON

    # The same user's next launch waits too: while the broker is down each launch's pass admits only
    # the first job in line (its submission tries the broker again), and the ones after say why they wait.
    status, second, _ = _api_launch(base, people["alice"], "behind-it")
    assert status == 201 and second["status"] == S.QUEUED
    assert second["queue_reason"] == SUBMIT_UNSENT_REASON

    # The trail: admitted, then back to the queue because the submit task could not be published (once
    # per launch's pass: each tried the broker once, with the first job in line).
    trail = [e.data["to"] for e in AuditEvent.objects.filter(action="run.transition", object_id=str(first["id"]))
             .order_by("id")]
    assert trail == [S.SUBMITTING, S.QUEUED] * 3
    assert not AuditEvent.objects.filter(action="run.transition", object_id=str(second["id"])).exists()
    unsent = AuditEvent.objects.filter(action="run.submit_unsent", object_id=str(first["id"])).first()
    assert "connecting" in unsent.data["error"].lower() or "refused" in unsent.data["error"].lower()
    print(f"launch with the broker down: API {seconds_api:.2f}s, form {seconds_form:.2f}s")

    # The broker comes back; one reconcile pass admits the queue in order and publishes the submits.
    outage["redis"].start()
    result = _reconcile_pass(outage)
    assert result["admitted"] == [first["id"], form_run.pk, second["id"]], result
    for run in Run.objects.filter(pk__in=result["admitted"]):
        assert run.status == S.SUBMITTING and run.queue_reason == "", (run.pk, run.status, run.queue_reason)
    assert _queued_tasks(outage) == [("runs.submit_run", [pk]) for pk in result["admitted"]]


def test_publishing_to_a_broker_that_never_answers_gives_up_instead_of_hanging(tmp_path):
    """A Redis that accepts the TCP connection and never replies (a hung server, a half-open link):
    kombu's defaults wait forever there; the platform's settings make the send fail with an error."""
    import socket

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # the kernel completes the handshakes; nobody ever reads or answers
    code = ("import django; django.setup(); from rlstudio.runs.dispatch import send_now; "
            "print('RESULT', repr(send_now('submit_run', 1)))")
    env = _service_env(REDIS_URL=f"redis://127.0.0.1:{hung.getsockname()[1]}/0", RLSTUDIO_BROKER_TIMEOUT_S="2")
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120)
    finally:
        hung.close()
    assert done.returncode == 0, done.stderr[-3000:]
    result = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    assert "OperationalError" in result and "timeout" in result.lower(), result


def _multipart(fields: dict[str, str], file_field: str, filename: str, content: bytes) -> tuple[bytes, str]:
    boundary = "----rlstudio-outage-boundary"
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{filename}"\r\n'
                 f"Content-Type: application/octet-stream\r\n\r\n".encode() + content + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def test_an_upload_while_the_broker_is_down_answers_and_its_validation_is_sent_once_it_is_back(outage, people):
    """The upload is stored and answered (201, validating), not a 500 with a dataset nobody will ever
    validate; the periodic re-send (catalog.resend_validations) publishes its task once Redis is back."""
    from rlstudio.accounts.models import AuditEvent
    from rlstudio.catalog.models import Dataset

    outage["redis"].kill()
    rows = b"".join(json.dumps({"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"})
                    .encode() + b"\n" for i in range(5))
    body, ctype = _multipart({"name": "during-outage", "preset": "gsm8k"}, "file", "outage.jsonl", rows)
    status, _h, raw, seconds = _http("POST", outage["web"].base + "/api/v1/datasets/", body=body, headers={
        "Authorization": f"Token {people['alice']['token']}", "Content-Type": ctype})
    assert status == 201, raw[-2000:]
    got = json.loads(raw)
    assert got["status"] == "validating"
    assert AuditEvent.objects.filter(action="dataset.validate_unsent", object_id=str(got["id"])).exists()
    print(f"upload with the broker down answered in {seconds:.2f}s")

    outage["redis"].start()
    code = ("import json, django; django.setup(); from rlstudio.catalog.services.validation import dataset_resend_stuck; "
            "print('RESULT ' + json.dumps(dataset_resend_stuck(older_than_s=0)))")
    env = _service_env(DATABASE_URL=outage["database_url"], REDIS_URL=outage["redis"].url,
                       RLSTUDIO_CELERY_QUEUE=outage["queue"])
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    sent = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert sent == [got["id"]]
    assert ("catalog.validate_dataset", [got["id"]]) in _queued_tasks(outage)
    assert Dataset.objects.get(pk=got["id"]).status == "validating"
