"""`manage.py rlstudio_stop_runs` (the launcher's first step on Ctrl-C) against the session's real
PostgreSQL, Redis, Ray head, Celery worker and beat: a tiny CPU run in training is stopped with a
checkpoint and ends stopped; a queued run stays queued; with no active run it returns at once.
"""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from rlstudio.accounts.models import AuditEvent
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_stop

S = RunStatus
GSM8K = Path(__file__).resolve().parents[1] / "fixtures" / "gsm8k" / "train_64.jsonl"
pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """The tiny smoke model and 16 GSM8K rows in the trainer's row shape, where the worker and Ray see them."""
    from trainer.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("shutdown-assets")
    rows = []
    with open(GSM8K, encoding="utf-8") as f:
        for i, line in zip(range(16), f):
            raw = json.loads(line)
            rows.append({"prompt": [{"role": "user", "content": raw["question"]}], "data_source": "openai/gsm8k",
                         "reward_model": {"ground_truth": raw["answer"].split("####")[-1].strip()},
                         "extra_info": {"index": i}})
    data = root / "gsm8k-train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return {"model": str(make_tiny_model(root / "tiny", preset="smoke", seed=0)), "data": str(data)}


@pytest.fixture
def services(celery_worker, celery_beat, ray_head):
    from django.conf import settings

    old = settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL
    settings.RAY_ADDRESS = settings.RAY_DASHBOARD_URL = ray_head  # the command follows the jobs on Ray
    try:
        yield
    finally:
        settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL = old


def _user(name: str, assets: dict, *, max_runs: int):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username=name, password="pw-for-tests-1")
    dataset = Dataset.objects.create(owner=user, name="gsm8k-16", file_path=assets["data"], sha256="0" * 64,
                                     status="ready", format="jsonl")
    model = ModelAsset.objects.create(owner=user, name="tiny-smoke", path=assets["model"], tokenizer_ok=True)
    GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=0, max_concurrent_runs=max_runs)
    api = APIClient()
    api.force_authenticate(user)
    return user, dataset, model, api


def _launch(api, dataset, model, name: str, steps: int) -> int:
    body = {"name": name, "dataset": dataset.pk, "model": model.pk, "preset": "cpu_smoke", "gpus": 0,
            "overrides": {"trainer.total_training_steps": steps, "trainer.save_freq": -1}}
    resp = api.post("/api/v1/runs/", body, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()["id"]


def _wait(run_id: int, pred, *, timeout: float, what: str) -> Run:
    deadline = time.monotonic() + timeout
    while True:
        run = Run.objects.get(pk=run_id)
        if pred(run):
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id}: {what} not reached in {timeout:.0f} s; it is {run.status} "
                                 f"at step {run.step}, error {run.error[-1500:]!r}")
        time.sleep(0.3)


def test_no_active_run_returns_at_once(services):
    out = io.StringIO()
    t0 = time.monotonic()
    call_command("rlstudio_stop_runs", "--wait", "60", stdout=out)
    assert out.getvalue().strip() == "no active runs"
    assert time.monotonic() - t0 < 5


def test_a_training_run_is_stopped_with_a_checkpoint_and_a_queued_one_stays_queued(services, assets):
    user, dataset, model, api = _user("trainer-user", assets, max_runs=5)
    waiting_user, w_dataset, w_model, w_api = _user("queued-user", assets, max_runs=0)
    queued = _launch(w_api, w_dataset, w_model, "waits", 2)
    assert Run.objects.get(pk=queued).status == S.QUEUED
    training = _launch(api, dataset, model, "long", 200)
    _wait(training, lambda r: r.status == S.RUNNING and r.step >= 1, timeout=150, what="running at step 1")

    out = io.StringIO()
    t0 = time.monotonic()
    call_command("rlstudio_stop_runs", "--wait", "120", stdout=out)
    took = time.monotonic() - t0
    print(f"stop for shutdown: {took:.1f} s\n{out.getvalue()}")

    run = Run.objects.get(pk=training)
    assert run.status == S.STOPPED, out.getvalue()
    assert 1 <= run.step < 200
    assert run.checkpoint_path.endswith(f"global_step_{run.step}") and Path(run.checkpoint_path).is_dir()
    lines = out.getvalue().splitlines()
    assert lines[0] == "stopping 1 active run(s) with a checkpoint; waiting up to 120 s"
    assert f"run #{training} “long”: stopped at step {run.step} of 200 with a checkpoint ({run.checkpoint_path})" in lines
    # Stopped as the Stop button with a checkpoint does it, by the platform (no user), saying why.
    stop = AuditEvent.objects.get(action="run.stop", object_id=str(training))
    assert stop.data == {"checkpoint": True, "force": False, "reason": "stopped: the platform was shut down"}
    assert stop.actor_id is None
    why = AuditEvent.objects.get(action="run.shutdown_stop", object_id=str(training))
    assert why.data["reason"] == "stopped: the platform was shut down"
    # The queued run was not touched: it starts at the next start.
    assert Run.objects.get(pk=queued).status == S.QUEUED
    assert not AuditEvent.objects.filter(action__in=("run.stop", "run.shutdown_stop"), object_id=str(queued)).exists()
    run_stop(run=Run.objects.get(pk=queued), by=waiting_user)


def test_a_run_still_stopping_after_the_wait_is_reported(services, assets):
    """A wait too short for the trainer's step and checkpoint: the line says the run is still stopping."""
    user, dataset, model, api = _user("slow-user", assets, max_runs=5)
    training = _launch(api, dataset, model, "slow", 200)
    _wait(training, lambda r: r.status == S.RUNNING and r.step >= 1, timeout=150, what="running at step 1")
    out = io.StringIO()
    call_command("rlstudio_stop_runs", "--wait", "0.01", stdout=out)
    assert f"run #{training} “slow”: still stopping after the 0 s wait" in out.getvalue(), out.getvalue()
    run = _wait(training, lambda r: r.is_terminal, timeout=120, what="stopped")
    assert run.status == S.STOPPED and run.checkpoint_path


def test_zero_stops_nothing(services):
    out = io.StringIO()
    call_command("rlstudio_stop_runs", "--wait", "0", stdout=out)
    assert "runs are left as they are" in out.getvalue()
