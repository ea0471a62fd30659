"""Fault: the web server is killed (SIGKILL) mid-run and started again on its port: no event is lost.

A run reports through the trainer's real HTTP sink (`trainer.sinks_http.HttpSink`, what a job's
`trainer.logger=[...,http]` uses) to the real ingest API of a Daphne of this test's own (the session's
server serves every other test and must not die). While the events flow, Daphne's process group is
SIGKILLed; the sink fails, spools to disk and keeps retrying; Daphne comes back on the same port and
the sink drains its spool. Afterwards the database holds every seq 1..N exactly once.
(tests/trainer/test_sink_http.py covers the sink against a stub server that stops for 30 s.)
"""
from __future__ import annotations

import threading
import time

import pytest

from tests.e2e.fault_procs import DaphneServer
from trainer.sinks_http import SPOOL_FILE, HttpSink

pytestmark = [pytest.mark.django_db(transaction=True)]
N_EVENTS = 1500
T0 = 1_764_440_000.0


def _event(seq: int) -> dict:
    """A run's stream: a heartbeat, a metrics row and a log line, in turn (one step per 3 seqs)."""
    step = seq // 3 + 1
    kind = seq % 3
    if kind == 0:
        return {"seq": seq, "type": "heartbeat", "time": T0 + seq, "data": {"step": step}}
    if kind == 1:
        return {"seq": seq, "type": "metrics", "time": T0 + seq,
                "data": {"step": step, "metrics": {"critic/score/mean": (seq % 10) / 10}}}
    return {"seq": seq, "type": "log", "time": T0 + seq, "data": {"level": "info", "message": f"event {seq}"}}


@pytest.fixture
def daphne(test_database_url, tmp_path):
    server = DaphneServer(folder=tmp_path / "daphne", env={"DATABASE_URL": test_database_url})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def run_and_token(transactional_db):
    from django.contrib.auth import get_user_model

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from rlstudio.runs.services import run_create

    user = get_user_model().objects.create_user(username="reporter", password="pw-for-tests-1")
    # Never admitted (a session's beat may be running): only the ingest API writes to this run.
    GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=user, name="d", file_path="/tmp/d.jsonl", sha256="0" * 64)
    model = ModelAsset.objects.create(owner=user, name="m", path="/tmp/m")
    return run_create(owner=user, name="web-restart", dataset=dataset, model=model, config={}, gpus=0)


def _stored(run_id: int) -> list[int]:
    from rlstudio.telemetry.models import RunEvent

    return list(RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True))


@pytest.mark.timeout(300)
def test_daphne_killed_and_restarted_mid_run_loses_no_event(daphne, run_and_token, tmp_path):
    run, token = run_and_token
    sink = HttpSink(out_dir=tmp_path / "run", url=f"{daphne.base}/api/v1/runs/{run.pk}/events/", token=token,
                    batch_size=50, linger=0.05, timeout=5, backoff_initial=0.1, backoff_max=0.5,
                    close_timeout=120)
    written = threading.Event()

    def report():  # the trainer: a steady stream, never waiting on the network
        for seq in range(1, N_EVENTS + 1):
            sink.write(_event(seq))
            time.sleep(0.004)
        written.set()

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    deadline = time.monotonic() + 60
    while len(_stored(run.pk)) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    stored_before = len(_stored(run.pk))
    assert stored_before >= 200, f"the platform stored only {stored_before} events before the kill"

    daphne.kill()  # SIGKILL: a request in flight may be committed with its reply lost
    killed_at = time.monotonic()
    while (sink.failures < 2 or not (tmp_path / "run" / SPOOL_FILE).exists()) and time.monotonic() - killed_at < 30:
        time.sleep(0.05)
    assert sink.failures >= 2, "the sink never noticed the platform was gone"
    assert (tmp_path / "run" / SPOOL_FILE).exists(), "nothing was spooled while the platform was down"
    time.sleep(2)  # the run keeps going with its platform down
    daphne.start()  # same port

    assert written.wait(60), "the reporter did not finish"
    sink.close()
    seqs = _stored(run.pk)
    assert seqs == list(range(1, N_EVENTS + 1)), (
        f"{len(seqs)} stored; missing {sorted(set(range(1, N_EVENTS + 1)) - set(seqs))[:20]}")
    assert sink.dropped == 0 and not (tmp_path / "run" / SPOOL_FILE).exists()  # all sent, none refused
    from rlstudio.telemetry.models import MetricRow

    assert MetricRow.objects.filter(run_id=run.pk).count() == len({s // 3 + 1 for s in seqs if s % 3 == 1})
