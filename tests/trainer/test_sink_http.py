"""The trainer's `http` sink against a real HTTP server that goes down and comes back.

The server here is a small stdlib ingest endpoint (the trainer side never imports Django): it checks
the bearer token, gunzips, and records every event it receives, duplicates included, so the tests
can assert "every event arrived, none twice, in order".
"""
from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trainer.events.schema import TERMINAL_STATES
from trainer.sinks_http import SPOOL_FILE, HttpSink

REPO = Path(__file__).resolve().parents[2]
TOKEN = "rit_test-token"


class Platform:
    """An ingest endpoint on a fixed port that can be stopped and started again."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/api/v1/runs/1/events/"
        self.received: list[dict] = []
        self.posts = 0
        self.batches: list[list[int]] = []  # the seqs of each POST received, in order
        self.delay = 0.0  # seconds each POST takes before its reply (a slow platform)
        self.status = 200
        self.server: ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                ok = self.headers.get("Authorization") == f"Bearer {TOKEN}"
                status = platform.status if ok else 401
                if status == 200:
                    assert self.headers.get("Content-Encoding") == "gzip"
                    events = json.loads(gzip.decompress(body))["events"]
                    with platform.lock:
                        platform.received.extend(events)
                        platform.batches.append([e["seq"] for e in events])
                        platform.posts += 1
                    time.sleep(platform.delay)
                answer = json.dumps({"accepted": 0, "duplicates": 0, "refused": []}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def seqs(self) -> list[int]:
        with self.lock:
            return [e["seq"] for e in self.received]


@pytest.fixture
def platform():
    p = Platform()
    yield p
    p.stop()


def ev(seq: int) -> dict:
    return {"seq": seq, "type": "heartbeat", "time": 1.0e9 + seq, "data": {"step": seq}}


def test_batches_gzip_bearer_and_close_flushes(platform, tmp_path):
    platform.start()
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token=TOKEN, batch_size=50, linger=0.2)
    for i in range(1, 1001):
        sink.write(ev(i))
    sink.close()
    assert platform.seqs() == list(range(1, 1001))
    assert 20 <= platform.posts <= 40  # batched by count (50), not one POST per event
    assert not (tmp_path / SPOOL_FILE).exists()


def test_time_batching_sends_a_lone_event_within_the_linger(platform, tmp_path):
    platform.start()
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token=TOKEN, batch_size=500, linger=0.3)
    sink.write(ev(1))
    t0 = time.monotonic()
    while platform.seqs() != [1] and time.monotonic() - t0 < 5:
        time.sleep(0.02)
    assert platform.seqs() == [1] and time.monotonic() - t0 < 1.5
    sink.close()


def test_down_then_up_spools_and_replays_in_order_without_blocking(platform, tmp_path):
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token=TOKEN, batch_size=100, linger=0.05,
                    backoff_initial=0.05, backoff_max=0.3, close_timeout=20)
    t0 = time.perf_counter()
    for i in range(1, 5001):
        sink.write(ev(i))
    assert time.perf_counter() - t0 < 2.0  # writes never wait on the network
    deadline = time.monotonic() + 10
    while sink.failures < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sink.failures >= 3 and (tmp_path / SPOOL_FILE).exists()
    for i in range(5001, 5101):  # more events while it is down
        sink.write(ev(i))
    platform.start()
    sink.close()
    assert platform.seqs() == list(range(1, 5101))  # all, once each, in order
    assert not (tmp_path / SPOOL_FILE).exists()


def test_a_lone_event_leaves_at_once_when_nothing_is_in_flight(platform, tmp_path):
    platform.start()
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token=TOKEN, linger=0.0)
    for seq in (1, 2, 3):  # one at a time, each after the previous one's POST came back
        sink.write(ev(seq))
        t0 = time.monotonic()
        while len(platform.seqs()) < seq and time.monotonic() - t0 < 5:
            time.sleep(0.002)
        assert len(platform.seqs()) == seq and time.monotonic() - t0 < 0.5
    sink.close()
    assert platform.batches == [[1], [2], [3]]


def test_events_written_during_a_post_leave_as_one_batch_when_it_returns(platform, tmp_path):
    platform.start()
    platform.delay = 0.4
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token=TOKEN, batch_size=500, linger=0.0)
    sink.write(ev(1))
    t0 = time.monotonic()
    while platform.seqs() != [1] and time.monotonic() - t0 < 5:
        time.sleep(0.002)
    assert platform.seqs() == [1]  # received; its reply waits 0.4 s
    for seq in range(2, 102):
        sink.write(ev(seq))
    platform.delay = 0.0
    sink.close()
    assert platform.batches == [[1], list(range(2, 102))]


def test_batch_caps_hold_under_adaptive_sending(platform, tmp_path):
    platform.start()
    platform.delay = 0.2
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token=TOKEN, batch_size=30, linger=0.0)
    for seq in range(1, 201):
        sink.write(ev(seq))
    sink.close()
    assert platform.seqs() == list(range(1, 201))
    assert max(len(b) for b in platform.batches) <= 30


def test_refused_token_is_dropped_not_retried_forever(platform, tmp_path, capfd):
    platform.start()
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token="rit_wrong", linger=0.05, close_timeout=5)
    sink.write(ev(1))
    t0 = time.monotonic()
    sink.close()
    assert time.monotonic() - t0 < 3 and sink.dropped == 1 and platform.seqs() == []
    assert "HTTP 401" in capfd.readouterr().err


def test_spool_left_by_a_dead_process_is_sent_first(platform, tmp_path):
    (tmp_path / SPOOL_FILE).write_text("".join(json.dumps(ev(i)) + "\n" for i in (1, 2, 3)) + '{"seq": 4, "ty')
    platform.start()
    sink = HttpSink(out_dir=tmp_path, url=platform.url, token=TOKEN, linger=0.05)
    sink.write(ev(4))
    sink.close()
    assert platform.seqs() == [1, 2, 3, 4]  # the torn line of the dead writer is skipped


def test_missing_env_is_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("RLSTUDIO_INGEST_URL", raising=False)
    with pytest.raises(RuntimeError, match="RLSTUDIO_INGEST_URL"):
        HttpSink(out_dir=tmp_path)


def _finished_training(events_file: Path) -> bool:
    """Whether the trainer's own events.jsonl holds its terminal status (training done, the sink's
    close() still to come)."""
    if not events_file.exists():
        return False
    for line in events_file.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:  # a line being written
            continue
        if event.get("type") == "status" and event["data"].get("state") in TERMINAL_STATES:
            return True
    return False


@pytest.mark.timeout(240)
def test_cpu_smoke_with_platform_down_until_training_ends(platform, tmp_path, tiny_model_dir, demo_data_dir):
    """A real cpu_smoke run; the platform stops after the first events and stays down for the rest of
    the training (every later event goes through the spool, and close() meets the platform down), then
    returns. Earlier a fixed 30 s outage, longer than the run: the same scenario, without the idle wait."""
    platform.start()
    out = tmp_path / "run"
    env = dict(os.environ, RLSTUDIO_INGEST_URL=platform.url, RLSTUDIO_INGEST_TOKEN=TOKEN,
               RLSTUDIO_INGEST_CLOSE_TIMEOUT="90", PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "trainer", "run", "--recipe", "cpu_smoke",
           f"data.train_files={demo_data_dir / 'train.jsonl'}",
           f"actor_rollout_ref.model.path={tiny_model_dir}", f"trainer.default_local_dir={out}",
           "trainer.logger=[console,jsonl,http]"]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    while not platform.seqs() and proc.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    assert platform.seqs(), "no event reached the platform"
    platform.stop()
    down_at = time.monotonic()
    while not _finished_training(out / "events.jsonl") and proc.poll() is None \
            and time.monotonic() - down_at < 120:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended with the platform down: its close() did not wait"
    time.sleep(1.0)  # close() meets the platform down, at least one retry
    spooled = (out / SPOOL_FILE).exists()
    platform.start()
    output, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, output[-3000:]
    written = [json.loads(line)["seq"] for line in (out / "events.jsonl").read_text().splitlines()]
    assert spooled  # the run kept going while the platform was down
    assert platform.seqs() == written  # every event arrived, none twice, in order
    assert len(written) > 10 and not (out / SPOOL_FILE).exists()
