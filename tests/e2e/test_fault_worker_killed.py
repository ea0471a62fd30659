"""Fault: the Celery worker is killed (SIGKILL) in the middle of submitting a run: one Ray job, not two.

A real Ray head (the session's), a real Redis broker of this test's own (a short visibility timeout
is set on it, and kombu restores unacked messages across every queue of a Redis database: on the
shared Redis that would hand other suites' running tasks out again), and two real workers in turn:

1. worker A (tests/e2e/slow_submit_worker.py) takes `runs.submit_run`; Ray accepts the job; A stalls
   inside run_submit's transaction, and is SIGKILLed there: the database rolls back (no submission
   id, no token), the broker never got an ack;
2. worker B starts; the late-acked task comes back after the visibility timeout; run_submit runs
   again, Ray refuses a second job with the run's derived submission id, and the run records the
   job that already runs, with the ingest token that job carries;
3. exactly one Ray job exists for the run, and the run ends succeeded through its own reports: the
   ones posted after the adoption (the ingest API accepts the job's token) and, for a job that
   reported before it (refused: its token's hash had been rolled back) or even finished, the ones
   run_submit stores from the job's events.jsonl when it adopts the job (a failure seen in CI: a quiet
   machine ran the 2-step job to its end within the redelivery's 10 s).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from celery import Celery

from tests.conftest import poll_until
from tests.e2e.fault_procs import CeleryWorker

pytestmark = [pytest.mark.django_db(transaction=True)]
REPO = Path(__file__).resolve().parents[2]
GSM8K = REPO / "tests" / "fixtures" / "gsm8k" / "train_64.jsonl"  # MIT; tests/fixtures/gsm8k/README.md
VISIBILITY_S = 4


@pytest.fixture
def broker(private_redis):
    return private_redis


@pytest.fixture
def world(transactional_db, ray_head, asgi_server, tmp_path):
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from rlstudio.catalog.models import Dataset, ModelAsset
    from rlstudio.quotas.models import GpuQuota
    from trainer.models.tiny import make_tiny_model

    rows = []
    with open(GSM8K, encoding="utf-8") as f:
        for i, line in zip(range(8), f):
            raw = json.loads(line)
            rows.append({"prompt": [{"role": "user", "content": raw["question"]}], "data_source": "openai/gsm8k",
                         "reward_model": {"ground_truth": raw["answer"].split("####")[-1].strip()},
                         "extra_info": {"index": i}})
    data = tmp_path / "gsm8k-8.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    model_dir = make_tiny_model(tmp_path / "tiny", preset="smoke", seed=0)
    user = get_user_model().objects.create_user(username="submitter", password="pw-for-tests-1")
    # Admission is this test's job (a session beat, if one runs, must not admit the run itself).
    GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=0)
    dataset = Dataset.objects.create(owner=user, name="gsm8k-8", file_path=str(data), sha256="0" * 64,
                                     status="ready", format="jsonl")
    model = ModelAsset.objects.create(owner=user, name="tiny", path=str(model_dir), tokenizer_ok=True)
    old = settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL
    settings.RAY_ADDRESS = settings.RAY_DASHBOARD_URL = ray_head
    try:
        yield {"user": user, "dataset": dataset, "model": model, "ray": ray_head, "public": asgi_server}
    finally:
        settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL = old


def _jobs_of(ray: str, run) -> list[str]:
    """Submission ids of every Ray job this run has (by the metadata run_submit sets)."""
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(ray).list_jobs()
    return [j.submission_id for j in jobs if (j.metadata or {}).get("rlstudio_run") == str(run.pk)
            and (j.submission_id or "").startswith(f"rlstudio-run-{run.pk}-")
            and j.submission_id.endswith(run.created.strftime("%Y%m%d%H%M%S%f"))]


def _wait(pred, *, timeout: float, what: str):
    return poll_until(pred, timeout=timeout, what=what, interval=0.5)


@pytest.mark.timeout(420)
def test_worker_killed_after_ray_accepted_the_job_gives_one_job_and_a_reporting_run(
        world, broker, test_database_url, tmp_path):
    from datetime import timedelta

    from django.utils import timezone
    from rest_framework.test import APIClient

    from rlstudio.runs.models import Run, RunStatus as S
    from rlstudio.runs.services import run_transition
    from rlstudio.telemetry.models import RunEvent

    api = APIClient()
    api.force_authenticate(world["user"])
    resp = api.post("/api/v1/runs/", {"name": "killed-submit", "dataset": world["dataset"].pk,
                                      "model": world["model"].pk, "preset": "cpu_smoke", "gpus": 0,
                                      "overrides": {"trainer.total_training_steps": 2}}, format="json")
    assert resp.status_code == 201, resp.content
    run = Run.objects.get(pk=resp.json()["id"])
    assert run.status == S.QUEUED  # held by the quota: nothing was enqueued on the session's broker
    run_transition(run=run, to=S.SUBMITTING)
    # A session's reconcile (if a beat runs) adopts a submitting run's Ray job once
    # RLSTUDIO_SUBMIT_TIMEOUT_S (120 s) have passed since submit_requested: a slow redelivery to B
    # would then find the job already recorded. Its clock starts a day ahead: only B records it.
    Run.objects.filter(pk=run.pk).update(submit_requested=timezone.now() + timedelta(days=1))

    queue = f"h4-fault-submit-{run.pk}-{int(time.time())}"
    marker = tmp_path / "submitted"
    env = {"DATABASE_URL": test_database_url, "REDIS_URL": broker.url, "RAY_ADDRESS": world["ray"],
           "RAY_DASHBOARD_URL": world["ray"], "RLSTUDIO_STATE_DIR": str(tmp_path / "state"),
           "RLSTUDIO_PUBLIC_URL": world["public"], "RLSTUDIO_CELERY_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S),
           "RLSTUDIO_TEST_SUBMIT_MARKER": str(marker)}
    a = CeleryWorker(folder=tmp_path / "workers", env=env, queue=queue, name="worker-a",
                     argv_prefix=[sys.executable, str(REPO / "tests" / "e2e" / "slow_submit_worker.py")])
    b = CeleryWorker(folder=tmp_path / "workers", env=env, queue=queue, name="worker-b")
    sender = Celery("fault-sender", broker=broker.url, set_as_current=False)
    try:
        a.start()
        sender.send_task("runs.submit_run", args=[run.pk], queue=queue)
        submission_id = _wait(lambda: marker.exists() and marker.read_text(), timeout=90,
                              what="worker A's submission to Ray")
        assert _jobs_of(world["ray"], run) == [submission_id]  # Ray has the job ...
        a.kill()
        run.refresh_from_db()
        assert run.status == S.SUBMITTING and not run.ray_submission_id  # ... the database does not

        b.start()
        run = _wait(lambda: Run.objects.filter(pk=run.pk, ray_submission_id__gt="").first(),
                    timeout=90, what="the redelivered submit on worker B")
        assert run.ray_submission_id == submission_id
        # B found A's job and made none: its task's result is logged once the task returns, after the
        # database already holds the submission id
        _wait(lambda: "already in Ray" in b.log.read_text(errors="replace"), timeout=30,
              what="worker B's log of the task's result")
        assert _jobs_of(world["ray"], run) == [submission_id]

        run = _wait(lambda: Run.objects.filter(pk=run.pk, status__in=[S.SUCCEEDED, S.FAILED, S.LOST]).first(),
                    timeout=240, what="the run's end")
        assert run.status == S.SUCCEEDED, run.error
        states = [e.data.get("state") for e in RunEvent.objects.filter(run=run, type="status").order_by("seq")]
        assert "running" in states and states[-1] == "succeeded", states  # reported with the job's token
        assert RunEvent.objects.filter(run=run, type="metrics").count() == 2
        assert _jobs_of(world["ray"], run) == [submission_id]
    finally:
        a.kill()
        b.stop()
        sender.close()
