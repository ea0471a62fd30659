"""The request gate inside a real Daphne: bodies refused between their headers and their first byte.

Run: RLSTUDIO_TEST_DATABASE_NAME=test_hard .venv/bin/python -m pytest tests/rlstudio/config/test_request_gate.py -q
Each case talks HTTP/1.1 over a raw socket, so that "the body was never sent" is literally true: the
client sends the headers only and reads the answer. The server is a Daphne of this module's own
with a short body clock (RLSTUDIO_BODY_TIMEOUT_S=1, RLSTUDIO_BODY_MIN_RATE=1000).
"""
from __future__ import annotations

import json
import socket
import time

import pytest
import requests

from rlstudio.accounts.services import api_token_create
from rlstudio.catalog.models import Dataset
from tests.e2e.fault_procs import DaphneServer

TWO_GB = 2 * 1024**3
GSM8K_ROWS = b'{"question": "What is 1+1?", "answer": "It is 2.\\n#### 2"}\n' * 3


@pytest.fixture(scope="module")
def gated(test_database_url, tmp_path_factory):
    """A Daphne serving the platform on the test database, with a 1 s + 1 ms/byte body clock."""
    server = DaphneServer(folder=tmp_path_factory.mktemp("gate-daphne"),
                          env={"DATABASE_URL": test_database_url, "RLSTUDIO_BODY_TIMEOUT_S": "1",
                               "RLSTUDIO_BODY_MIN_RATE": "1000"})
    server.start()
    yield server
    server.stop()


def exchange(server: DaphneServer, head: bytes, body: bytes = b"", *, timeout: float = 15.0):
    """Send `head` (and `body`, in the same write) and read the answer until the server closes or
    `timeout`; (status, headers, body bytes, seconds until the status line came)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(head + body)
        data = b""
        answered = None
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
            if answered is None and b"\r\n" in data:
                answered = time.monotonic() - t0
            if b"\r\n\r\n" in data:
                head_part, _, rest = data.partition(b"\r\n\r\n")
                length = [int(line.split(b":")[1]) for line in head_part.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if length and len(rest) >= length[0]:
                    break
    head_part, _, rest = data.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines and lines[0].startswith("HTTP/") else 0
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, rest, answered


def upload_head(length: int | None, *, token: str | None = None, extra: str = "") -> bytes:
    lines = ["POST /api/v1/datasets/ HTTP/1.1", "Host: 127.0.0.1",
             "Content-Type: multipart/form-data; boundary=XyZ"]
    lines.append(f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked")
    if token:
        lines.append(f"Authorization: Token {token}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def multipart(name: str, content: bytes) -> bytes:
    return (b"--XyZ\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\n" + name.encode() +
            b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"preset\"\r\n\r\ngsm8k"
            b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d.jsonl\"\r\n"
            b"Content-Type: application/jsonl\r\n\r\n" + content + b"\r\n--XyZ--\r\n")


@pytest.mark.django_db(transaction=True)
def test_unauthenticated_2gb_upload_refused_from_its_headers(gated):
    """2 GB declared, no credentials, not one byte of body sent: answered at once, nothing read."""
    status, headers, body, answered = exchange(gated, upload_head(TWO_GB))
    assert status == 413, body
    assert answered < 5
    error = json.loads(body)["error"]
    assert error["code"] == "too_large" and "RLSTUDIO_MAX_UPLOAD_BYTES" in error["message"]
    assert headers["connection"] == "close"


@pytest.mark.django_db(transaction=True)
def test_unauthenticated_upload_under_the_limit_gets_401_before_its_body(gated, alice):
    status, headers, body, answered = exchange(gated, upload_head(100 * 1024**2))
    assert status == 401 and headers["www-authenticate"] == "Token", body
    assert json.loads(body)["error"]["code"] == "not_authenticated"
    assert answered < 5
    # A made-up token and a made-up session are no better.
    assert exchange(gated, upload_head(1000, token="rls_not-a-real-key"))[0] == 401
    assert exchange(gated, upload_head(1000, extra="Cookie: sessionid=abc123"))[0] == 401


@pytest.mark.django_db(transaction=True)
def test_authenticated_upload_over_the_limit_413_and_chunked_411(gated, alice):
    key = api_token_create(user=alice).key
    assert exchange(gated, upload_head(TWO_GB, token=key))[0] == 413
    status, _, body, _ = exchange(gated, upload_head(None, token=key))
    assert status == 411 and json.loads(body)["error"]["code"] == "length_required"


@pytest.mark.django_db(transaction=True)
def test_valid_upload_passes_the_gate_with_token_and_session(gated, alice):
    """The held request resumes: its body (sent in the same write as the headers, so already
    buffered while the credentials were checked) reaches the view whole."""
    key = api_token_create(user=alice).key
    content = multipart("gated-token", GSM8K_ROWS)
    status, _, body, _ = exchange(gated, upload_head(len(content), token=key), content)
    assert status == 201, body
    assert Dataset.objects.filter(owner=alice, name="gated-token").exists()

    # The browser's way: a session cookie and the CSRF token, through requests.
    web = requests.Session()
    page = web.get(gated.base + "/accounts/login/", timeout=10)
    assert page.status_code == 200
    login = web.post(gated.base + "/accounts/login/", timeout=10,
                     data={"username": "alice", "password": "pw-for-tests-1",
                           "csrfmiddlewaretoken": web.cookies["csrftoken"]},
                     headers={"Referer": gated.base + "/accounts/login/"})
    assert login.status_code == 200 and "sessionid" in web.cookies, login.text[:300]
    answer = web.post(gated.base + "/api/v1/datasets/", timeout=20,
                      files={"file": ("d.jsonl", GSM8K_ROWS * 2, "application/jsonl")},
                      data={"name": "gated-session", "preset": "gsm8k"},
                      headers={"X-CSRFToken": web.cookies["csrftoken"], "Referer": gated.base + "/"})
    assert answer.status_code == 201, answer.text[:300]


@pytest.mark.django_db(transaction=True)
def test_slow_body_times_out_with_408(gated, alice):
    """10 bytes of a declared 10,000, then nothing: 408 after about 1 s (+ 10 bytes / 1000 B/s)."""
    key = api_token_create(user=alice).key
    status, _, body, answered = exchange(gated, upload_head(10_000, token=key), b"--XyZ\r\nabc")
    assert status == 408, body
    assert json.loads(body)["error"]["code"] == "body_timeout"
    assert 0.9 < answered < 6
    # Any other request's body is on the same clock.
    head = (b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 500\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n\r\n")
    assert exchange(gated, head, b"username=a")[0] == 408


@pytest.mark.django_db(transaction=True)
def test_any_request_body_over_the_request_limit_is_refused(gated):
    head = (b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000000\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n\r\n")
    status, _, body, _ = exchange(gated, head)
    assert status == 413 and "RLSTUDIO_MAX_REQUEST_BYTES" in json.loads(body)["error"]["message"]
    # A small ordinary POST still reaches Django (here: CSRF's 403, not the gate).
    small = (b"POST /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n"
             b"Content-Type: application/x-www-form-urlencoded\r\nConnection: close\r\n\r\n")
    assert exchange(gated, small, b"username=a")[0] == 403


# --- the same rules as ASGI middleware (for servers that stream a body to the application) --------

def run_gate(scope_headers, messages, *, method="POST", path="/api/v1/datasets/", delay=0.0):
    """Drive RequestGateMiddleware in-process: `messages` are what the client's body delivers (each
    after `delay` seconds). Returns (what was sent back, how many receive() calls the app made, what
    the app received)."""
    import asyncio

    from rlstudio.config.request_gate import RequestGateMiddleware

    sent, got, pulls = [], [], []
    queue = list(messages)

    async def receive():
        pulls.append(1)
        if delay:
            await asyncio.sleep(delay)
        return queue.pop(0) if queue else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async def app(scope, recv, snd):
        while True:
            message = await recv()
            got.append(message)
            if message["type"] == "http.disconnect" or not message.get("more_body"):
                break
        if got[-1]["type"] == "http.request":
            await snd({"type": "http.response.start", "status": 200, "headers": []})
            await snd({"type": "http.response.body", "body": b"ok"})

    scope = {"type": "http", "method": method, "path": path, "headers": scope_headers,
             "client": ("10.9.9.9", 1234)}
    asyncio.run(RequestGateMiddleware(app)(scope, receive, send))
    return sent, len(pulls), got


def test_asgi_gate_refuses_2gb_and_unauthenticated_uploads_without_receiving(settings, db):
    sent, pulls, got = run_gate([(b"content-length", str(TWO_GB).encode())], [])
    assert sent[0]["status"] == 413 and pulls == 0 and got == []
    sent, pulls, got = run_gate([(b"content-length", b"1000")], [])
    assert sent[0]["status"] == 401 and (b"www-authenticate", b"Token") in sent[0]["headers"]
    assert pulls == 0 and got == []
    sent, pulls, _ = run_gate([(b"transfer-encoding", b"chunked")], [])
    assert sent[0]["status"] == 411 and pulls == 0


def test_asgi_gate_times_out_a_slow_body_and_passes_a_normal_one(settings):
    settings.RLSTUDIO_BODY_TIMEOUT_S = 0.2
    headers = [(b"content-length", b"10")]
    slow = [{"type": "http.request", "body": b"a", "more_body": True}]
    sent, _, got = run_gate(headers, slow, path="/accounts/login/", delay=0.5)
    assert sent[0]["status"] == 408 and got[-1] == {"type": "http.disconnect"}
    body = [{"type": "http.request", "body": b"0123456789", "more_body": False}]
    sent, _, got = run_gate(headers, body, path="/accounts/login/")
    assert sent[0]["status"] == 200 and got == body
    # A chunked body that grows past the request limit is cut off there.
    settings.RLSTUDIO_MAX_REQUEST_BYTES = 8
    sent, _, got = run_gate([(b"transfer-encoding", b"chunked")], body, path="/accounts/login/")
    assert sent[0]["status"] == 413 and got[-1] == {"type": "http.disconnect"}


@pytest.mark.django_db(transaction=True)
def test_the_gate_answers_a_peer_on_a_unix_socket(test_database_url, tmp_path):
    """Regression: a peer on a unix socket has no host address, and the gate's refusal (its log line
    names the client) raised there instead of answering. A Daphne on a unix socket (as behind a
    local reverse proxy) now refuses a 2 GB upload and an unauthenticated one like a TCP peer's."""
    from tests.conftest import REPO, VENV_BIN, _service_env, stop_process_group, wait_until
    from tests.e2e.fault_procs import _spawn

    sock_path = tmp_path / "d.sock"
    log = tmp_path / "daphne.log"
    proc = _spawn([str(VENV_BIN / "daphne"), "-u", str(sock_path), "rlstudio.config.asgi:application"], log=log,
                  env=_service_env(DATABASE_URL=test_database_url), cwd=REPO)

    def send(head: bytes) -> bytes:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(15)
            sock.connect(str(sock_path))
            sock.sendall(head)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data

    try:
        wait_until(lambda: sock_path.exists() and send(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"),
                   timeout=60, what="Daphne on a unix socket", proc=proc, log=log)
        assert send(upload_head(TWO_GB)).startswith(b"HTTP/1.1 413"), log.read_text()[-2000:]
        assert send(upload_head(1000)).startswith(b"HTTP/1.1 401"), log.read_text()[-2000:]
        assert "Traceback" not in log.read_text()
    finally:
        stop_process_group(proc, grace=10)
