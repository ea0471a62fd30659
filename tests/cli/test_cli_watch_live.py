"""`rlstudio runs watch` woken by the run's live stream: the client as its own process against the real
ASGI server (Daphne on the test database: pages, API and websockets; tests/conftest.py's `asgi_server`),
the trainer's reports made through the ingest's service (their broadcast goes through Redis to Daphne).

With `--interval 3600` a poll would look again only after an hour: a step printed and an exit within a
minute can only come from the stream waking the watch."""
import os
import subprocess
import sys
import threading
import time

import pytest

from rlstudio.accounts.services import api_token_create
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_create
from rlstudio.telemetry.services import events_ingest
from tests.cli.conftest import metric_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


class Lines:
    """A process's stream read line by line on a thread; `wait_for(text)` until a line holds it."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for raw in stream:
            with self._cond:
                self.lines.append(raw.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hit = next((ln for ln in self.lines if text in ln), None)
                if hit is not None:
                    return hit
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no line with {text!r} in {timeout:g} s: {self.lines}")
                self._cond.wait(left)


def test_watch_prints_a_step_and_ends_when_the_stream_says_so(asgi_server, alice, make_assets):
    dataset, model = make_assets(alice, "live")
    run = run_create(owner=alice, name="live", dataset=dataset, model=model, config={}, gpus=0)[0]
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, total_steps=2)
    key = api_token_create(user=alice, name="cli").key
    env = {**os.environ, "RLSTUDIO_URL": asgi_server, "RLSTUDIO_TOKEN": key}
    proc = subprocess.Popen([sys.executable, "-m", "rlstudio_cli", "runs", "watch", str(run.pk), "--interval", "3600",
                             "-m", "critic/score/mean"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        out, err = Lines(proc.stdout), Lines(proc.stderr)
        err.wait_for(f"run {run.pk} live: running")
        time.sleep(2.0)  # the stream opens right after the first look, and a second look follows it
        events_ingest(run=run, raw_events=metric_events([1]))
        assert out.wait_for("step 1/2") == "step 1/2  critic/score/mean=0.1"
        Run.objects.filter(pk=run.pk).update(status=RunStatus.SUCCEEDED, step=2)
        events_ingest(run=run, raw_events=metric_events([2], first_seq=2))
        assert proc.wait(timeout=60) == 0
        out.wait_for("step 2/2")
        err.wait_for(f"run {run.pk} live: succeeded")
        assert not [ln for ln in err.lines if ln.startswith("note: ")], err.lines  # the stream held
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_refused_stream_leaves_the_watch_polling(asgi_server, alice, bob, make_assets):
    """bob's token reads nothing of alice's run: the API's 404 ends the watch (exit 2) before any stream
    is tried. The stream itself refuses a token it does not know (4401), and the watch says it polls."""
    from rlstudio_cli import live

    dataset, model = make_assets(alice, "private")
    run = run_create(owner=alice, name="private", dataset=dataset, model=model, config={}, gpus=0)[0]
    bob_key = api_token_create(user=bob, name="cli").key
    watch = subprocess.run([sys.executable, "-m", "rlstudio_cli", "--url", asgi_server, "--token", bob_key,
                            "runs", "watch", str(run.pk)], capture_output=True, text=True, timeout=60)
    assert watch.returncode == 2 and "Not found" in watch.stderr, watch.stderr
    stream = live.RunStream(asgi_server, "rls_not-a-token", run.pk)
    try:
        with pytest.raises(live.StreamClosed, match=r"closed by the server \(4401: the token was refused\)"):
            stream.wait(30)
    finally:
        stream.close()


@pytest.fixture
def tls_server(test_database_url, tmp_path):
    """Daphne serving the platform over TLS (a self-signed certificate for 127.0.0.1, which the client
    trusts through SSL_CERT_FILE as a real deployment's CA would be): {"base", "cert"}."""
    import ssl
    import urllib.request

    from tests.conftest import VENV_BIN, _service_env, free_port, stop_process_group, wait_until

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    port = free_port()
    log = tmp_path / "daphne-tls.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(VENV_BIN / "daphne"), "-e", f"ssl:{port}:interface=127.0.0.1:privateKey={key}:"
                                 f"certKey={cert}", "rlstudio.config.asgi:application"],
                                stdout=out, stderr=subprocess.STDOUT, env=_service_env(DATABASE_URL=test_database_url),
                                start_new_session=True)
    base = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(cert))

    def ready():
        with urllib.request.urlopen(base + "/healthz", timeout=2, context=context) as r:
            return r.status in (200, 503)

    try:
        wait_until(ready, timeout=60, what="Daphne over TLS", proc=proc, log=log)
        yield {"base": base, "cert": cert}
    finally:
        stop_process_group(proc, grace=10)


def test_the_stream_over_tls(tls_server, alice, make_assets, monkeypatch):
    """https:// platforms (every real deployment): the stream's TLS handshake checks the certificate
    against the trusted CAs, and a report wakes a wait on the encrypted socket; an untrusted
    certificate is refused (the watch would poll)."""
    from rlstudio_cli import live

    dataset, model = make_assets(alice, "tls")
    run = run_create(owner=alice, name="tls", dataset=dataset, model=model, config={}, gpus=0)[0]
    key = api_token_create(user=alice, name="cli").key
    with pytest.raises(live.StreamClosed, match="cannot connect .*CERTIFICATE_VERIFY_FAILED"):
        live.RunStream(tls_server["base"], key, run.pk)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_server["cert"]))
    stream = live.RunStream(tls_server["base"], key, run.pk)
    try:
        assert stream.wait(0.5) is False  # nothing reported yet
        events_ingest(run=run, raw_events=metric_events([1]))
        assert stream.wait(60) is True
    finally:
        stream.close()
