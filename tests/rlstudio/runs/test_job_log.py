"""A run's job log (GET /api/v1/runs/{id}/job-log/): the tail reads only the end of a large driver
log and the download is cut after RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES, saying so (security review F4).

Ray's log API is played by a real HTTP server on the loopback that serves /api/v0/logs/file as Ray
does (`lines=N`: the last N lines, read from the end of the file; `lines=-1`: all of it) and counts
the bytes it sent; Ray's Jobs API (the driver's node) by a stand-in client."""
from __future__ import annotations

import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlstudio.runs import ray_jobs
from rlstudio.runs.models import Run

pytestmark = pytest.mark.django_db

LINES = 400_000  # ~ 23 MB of log
SUBMISSION = "rlstudio-run-big"


def _last_lines(path, n: int) -> bytes:
    """The last `n` lines of the file, reading blocks from its end (what Ray's agent does)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        end = pos = f.tell()
        data = b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(65536, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
        lines = data.splitlines(keepends=True)
        return b"".join(lines[-n:]) if end else b""


class _RayLogs:
    """The loopback server standing for Ray's log API, and what it was asked and sent."""

    def __init__(self, path, *, honour_lines: bool = True):
        self.path, self.honour_lines = path, honour_lines
        self.asked: list[dict] = []
        self.sent = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                url = urllib.parse.urlparse(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                outer.asked.append(q)
                if url.path != "/api/v0/logs/file" or q.get("submission_id") != SUBMISSION:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b"Could not find a log file. Please make sure the given option exists")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                lines = int(q.get("lines", -1))
                try:
                    if lines >= 0 and outer.honour_lines:
                        body = _last_lines(outer.path, lines)
                        self.wfile.write(body)
                        outer.sent += len(body)
                        return
                    with open(outer.path, "rb") as f:
                        while chunk := f.read(65536):
                            self.wfile.write(chunk)
                            outer.sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the platform stopped reading (the download's cap)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _Client:
    """Ray's JobSubmissionClient as far as the log needs it: the job's driver node."""

    def get_job_info(self, submission_id):
        if submission_id != SUBMISSION:
            raise RuntimeError(f"Job {submission_id} does not exist")
        return type("Info", (), {"driver_node_id": "node-1"})()

    def get_job_logs(self, submission_id):  # the old whole-log read: must not be used any more
        raise AssertionError("get_job_logs reads the whole log")


@pytest.fixture
def big_log(tmp_path):
    path = tmp_path / "job-driver.log"
    with open(path, "w") as f:
        for i in range(LINES):
            f.write(f"line {i:07d} " + "x" * 44 + "\n")
        f.write("the last line\n")
    return path


@pytest.fixture
def ray_logs(big_log, settings, monkeypatch):
    server = _RayLogs(big_log)
    settings.RAY_ADDRESS = server.url
    monkeypatch.setattr(ray_jobs, "client", lambda: _Client())
    yield server
    server.close()


@pytest.fixture
def submitted_run(make_run, alice):
    run = make_run(alice)
    Run.objects.filter(pk=run.pk).update(ray_submission_id=SUBMISSION)
    return Run.objects.get(pk=run.pk)


def test_the_tail_reads_only_the_end_of_a_large_log(api, ray_logs, big_log, submitted_run):
    t0 = time.monotonic()
    r = api.get(f"/api/v1/runs/{submitted_run.pk}/job-log/", {"tail": 3})
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["source"] == "ray"
    assert body["lines"] == [f"line {LINES - 2:07d} " + "x" * 44, f"line {LINES - 1:07d} " + "x" * 44,
                             "the last line"]
    assert time.monotonic() - t0 < 5
    assert ray_logs.asked[-1]["lines"] == "3" and ray_logs.asked[-1]["node_id"] == "node-1"
    assert ray_logs.sent < 1000 < big_log.stat().st_size // 1000  # 3 lines sent of 23 MB
    # 5,000 lines of 58 bytes are more than the tail's 256 KiB: the lines within it, whole ones only
    lines = api.get(f"/api/v1/runs/{submitted_run.pk}/job-log/", {"tail": 5000}).json()["lines"]
    assert lines[-1] == "the last line" and all(line.startswith("line ") for line in lines[:-1])
    assert ray_jobs.LOG_TAIL_MAX_BYTES - 60 < sum(len(line) + 1 for line in lines) <= ray_jobs.LOG_TAIL_MAX_BYTES


def test_a_server_sending_the_whole_log_still_costs_at_most_the_tail_bound(big_log, settings, monkeypatch):
    server = _RayLogs(big_log, honour_lines=False)
    try:
        settings.RAY_ADDRESS = server.url
        monkeypatch.setattr(ray_jobs, "client", lambda: _Client())
        text = ray_jobs.logs(SUBMISSION, lines=10, max_bytes=4096)
    finally:
        server.close()
    assert len(text.encode()) <= 4096 and text.endswith("the last line\n")
    assert text.startswith("line ")  # the partial first line is dropped


def test_the_download_is_cut_at_the_limit_and_says_so(api, ray_logs, big_log, submitted_run, settings):
    settings.RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES = 1 << 20
    r = api.get(f"/api/v1/runs/{submitted_run.pk}/job-log/", {"download": "1"})
    assert r.status_code == 200 and r.streaming
    assert r["Content-Disposition"] == f'attachment; filename="run-{submitted_run.pk}.log"'
    assert r["X-RLStudio-Log-Max-Bytes"] == str(1 << 20)
    body = b"".join(r.streaming_content)
    log, _, trailer = body.rpartition(b"\n[rlstudio: ")
    assert len(log) == 1 << 20 and log.startswith(b"line 0000000 ")
    assert trailer.startswith(b"log cut after 1048576 bytes (RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES)")
    assert ray_logs.asked[-1]["lines"] == "-1"


def test_a_download_under_the_limit_is_whole_and_not_marked(api, ray_logs, big_log, submitted_run, settings):
    settings.RLSTUDIO_JOB_LOG_DOWNLOAD_MAX_BYTES = 64 << 20
    r = api.get(f"/api/v1/runs/{submitted_run.pk}/job-log/", {"download": "1"})
    body = b"".join(r.streaming_content)
    assert body == big_log.read_bytes() and b"[rlstudio: " not in body


def test_no_job_and_no_ray_are_said(api, submitted_run, make_run, alice, settings, monkeypatch):
    fresh = make_run(alice, "fresh")
    r = api.get(f"/api/v1/runs/{fresh.pk}/job-log/", {"download": "1"})
    assert r.status_code == 200 and r.content == b"[the run has no Ray job yet]\n"
    assert api.get(f"/api/v1/runs/{fresh.pk}/job-log/").json()["source"] == "none"
    settings.RAY_ADDRESS = ""
    r = api.get(f"/api/v1/runs/{submitted_run.pk}/job-log/", {"download": "1"})
    assert r.status_code == 200 and b"RAY_ADDRESS is not set" in r.content
    assert api.get(f"/api/v1/runs/{submitted_run.pk}/job-log/").json()["source"] == "unavailable"


def test_a_job_ray_has_no_log_of_is_empty(api, ray_logs, submitted_run):
    Run.objects.filter(pk=submitted_run.pk).update(ray_submission_id="rlstudio-run-other")
    assert ray_jobs.logs("rlstudio-run-other") == ""
    chunks, cut = ray_jobs.log_chunks("rlstudio-run-other", max_bytes=10)
    assert list(chunks) == [] and cut() is False
    r = api.get(f"/api/v1/runs/{submitted_run.pk}/job-log/")
    assert r.json() == {"lines": [], "source": "ray", "message": ""}
