"""Watchdogs end to end: real cpu_smoke runs through the API, Celery, Ray, the trainer's ingest and the
reconcile (Celery beat), with alert rules on them.

- A rule that must fire (groups with no learning signal: the tiny random model scores 0 on GSM8K, so
  every group is flat) with a webhook and auto-pause: the Celery worker POSTs the firing to a test HTTP
  server on loopback with a valid HMAC-SHA256 signature, the run is stopped with a checkpoint, and its
  resume continues at the next step.
- Rules that must not fire stay quiet over a healthy run (their metrics are evaluated: the run's
  rolling state holds them), and the owner is told the run finished.
- A run reaching its GPU-hour budget is stopped with a checkpoint by the reconcile's watch. The test Ray
  head has no GPUs, so the run is launched on the CPU and its `gpus` (what the quota and budgets count)
  set to 1 once it runs.
"""
from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from rlstudio.alerts.models import AlertFiring, Notification, RunAlertState, WebhookDelivery, WebhookEndpoint
from rlstudio.alerts.services.delivery import verify
from rlstudio.catalog.models import Dataset, ModelAsset
from rlstudio.quotas.models import GpuQuota
from rlstudio.runs.models import Run, RunStatus
from tests.e2e.test_run_lifecycle import _gsm8k_rows

S = RunStatus
SECRET_ENV = "RLSTUDIO_WEBHOOK_SECRET_E2E"
SECRET = "e2e-webhook-secret-1"
# Set while the module is collected, before the session's Celery worker (which delivers) is started.
os.environ.setdefault(SECRET_ENV, SECRET)
pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    from trainer.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("alert-assets")
    model_dir = make_tiny_model(root / "tiny", preset="smoke", seed=0)
    data = root / "gsm8k-train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _gsm8k_rows(16)), encoding="utf-8")
    return {"model": str(model_dir), "data": str(data)}


@pytest.fixture(scope="module")
def services(celery_worker, celery_beat, ray_head):
    from django.conf import settings

    old = settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL
    settings.RAY_ADDRESS = settings.RAY_DASHBOARD_URL = ray_head
    try:
        yield {"worker": celery_worker}
    finally:
        settings.RAY_ADDRESS, settings.RAY_DASHBOARD_URL = old


class Receiver(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body,
                                "at": time.time()})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    Receiver.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/slack-style-hook", Receiver
    server.shutdown()


@pytest.fixture
def world(services, assets, transactional_db):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="watched", password="pw-for-tests-1")
    dataset = Dataset.objects.create(owner=user, name="gsm8k-16", file_path=assets["data"], sha256="0" * 64,
                                     status="ready", format="jsonl")
    model = ModelAsset.objects.create(owner=user, name="tiny-smoke", path=assets["model"], tokenizer_ok=True)
    GpuQuota.objects.create(user=user, max_gpus=0, gpu_hours_per_month=1000, max_concurrent_runs=50)
    api = APIClient()
    api.force_authenticate(user)
    return {"user": user, "dataset": dataset, "model": model, "api": api}


def _launch(world, name: str, **overrides) -> dict:
    body = {"name": name, "dataset": world["dataset"].pk, "model": world["model"].pk, "preset": "cpu_smoke",
            "gpus": 0, "overrides": {"trainer.total_training_steps": 2, **overrides}}
    resp = world["api"].post("/api/v1/runs/", body, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()


def _rule(world, **body) -> dict:
    resp = world["api"].post("/api/v1/alerts/rules/", body, format="json")
    assert resp.status_code == 201, resp.content
    return resp.json()


def _wait(pred, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what}: not reached in {timeout:.0f}s")


def _run(run_id: int) -> Run:
    return Run.objects.get(pk=run_id)


def _first_metrics_step(run: Run) -> int | None:
    path = Path(run.config["trainer"]["default_local_dir"]) / "events.jsonl"
    if not path.exists():
        return None
    steps = [json.loads(line)["data"]["step"] for line in path.read_text().splitlines()
             if line.strip() and json.loads(line)["type"] == "metrics"]
    return steps[0] if steps else None


def test_a_firing_rule_reaches_the_webhook_signed_pauses_the_run_and_it_resumes(world, receiver):
    url, rec = receiver
    WebhookEndpoint.objects.create(name="team-slack", url=url, secret_env=SECRET_ENV)
    body = _launch(world, "flat", **{"trainer.total_training_steps": 200, "trainer.save_freq": -1})
    rule = _rule(world, run=body["id"], kind="zero_adv_groups", threshold=0.5, window=1, pause=True,
                 webhook="team-slack")
    run = _wait(lambda: (r := _run(body["id"])).is_terminal and r, timeout=180, what="the run paused and stopped")
    assert run.status == S.STOPPED, run.error
    firing = AlertFiring.objects.get(run=run)
    assert firing.rule_id == rule["id"] and firing.paused and firing.kind == "zero_adv_groups"
    assert firing.values["critic/zero_adv_group_ratio"] == 1.0 and firing.step >= 1
    ckpt = Path(run.checkpoint_path)
    n = int(ckpt.name.split("_")[-1])
    assert ckpt.is_dir() and n >= firing.step, run.checkpoint_path
    # the webhook: POSTed by the Celery worker to the loopback server, signed with the operator's secret
    req = _wait(lambda: rec.seen and rec.seen[0], timeout=60, what="the webhook POST")
    assert verify(SECRET, req["headers"]["x-rlstudio-timestamp"], req["body"], req["headers"]["x-rlstudio-signature"])
    assert not verify("not-the-secret", req["headers"]["x-rlstudio-timestamp"], req["body"],
                      req["headers"]["x-rlstudio-signature"])
    sent = json.loads(req["body"])
    assert "Pausing run “flat”" in sent["text"] and sent["rlstudio"]["firing"]["kind"] == "zero_adv_groups"
    assert req["headers"]["x-rlstudio-event"] == "alert.zero_adv_groups"
    delivery = _wait(lambda: WebhookDelivery.objects.filter(status="delivered").first(), timeout=30,
                     what="the delivery logged")
    assert delivery.attempts == 1 and delivery.response_status == 200
    # the owner was told: the alert (critical), then the stop with why
    assert Notification.objects.get(run=run, kind="alert").level == "critical"
    stopped = _wait(lambda: Notification.objects.filter(run=run, event="stopped").first(), timeout=30,
                    what="the stopped notification")
    assert "Paused by an alert" in stopped.body
    # the run's alerts: the firing is a chart marker on its page
    assert world["api"].get(f"/api/v1/runs/{run.pk}/alerts/").json()["budget"]["paused_by"] == firing.message
    # resumable with one click (the page's Resume posts here): it continues at the next step
    resp = world["api"].post(f"/api/v1/runs/{run.pk}/resume/", {}, format="json")
    assert resp.status_code == 201, resp.content
    child = resp.json()
    new = _wait(lambda: (r := _run(child["id"])).step >= n + 1 and r, timeout=150, what=f"step {n + 1}")
    assert new.resume_from == str(ckpt) == new.config["trainer"]["resume_from_path"]
    assert _wait(lambda: _first_metrics_step(new), timeout=60, what="first metrics") == n + 1
    # the rule was the paused run's own: the resumed run is not paused again
    world["api"].post(f"/api/v1/runs/{new.pk}/stop/", {"force": True}, format="json")
    _wait(lambda: _run(new.pk).is_terminal, timeout=60, what="force-stopped")
    assert not AlertFiring.objects.filter(run=new, paused=True).exists()


def test_rules_that_must_not_fire_stay_quiet_over_a_healthy_run(world):
    quiet = [_rule(world, kind=k) for k in ("kl_high", "grad_norm_spike", "reward_collapse", "entropy_collapse",
                                            "throughput_drop")]
    quiet.append(_rule(world, kind="threshold", metric="actor/pg_loss", op="not_finite"))
    body = _launch(world, "healthy", **{"trainer.total_training_steps": 3})
    run = _wait(lambda: (r := _run(body["id"])).is_terminal and r, timeout=180, what="finished")
    assert run.status == S.SUCCEEDED, run.error
    assert not AlertFiring.objects.filter(run=run).exists()
    # they were evaluated on the run's metrics (the rolling state holds them), not skipped
    state = RunAlertState.objects.get(run=run).state
    assert {"actor/ppo_kl", "actor/grad_norm", "critic/score/mean", "actor/entropy", "perf/throughput",
            "actor/pg_loss"} <= set(state["h"])
    assert state["h"]["actor/entropy"][0] == [1, 2, 3]  # [steps, values]
    assert len(quiet) == 6 and not Notification.objects.filter(run=run, kind="alert").exists()
    finished = _wait(lambda: Notification.objects.filter(run=run, event="finished").first(), timeout=30,
                     what="the finished notification")
    assert finished.title == f"Run “healthy” (#{run.pk}) finished" and not finished.read


def test_a_run_reaching_its_gpu_hour_budget_is_stopped_with_a_checkpoint(world):
    body = _launch(world, "budgeted", **{"trainer.total_training_steps": 200, "trainer.save_freq": -1})
    _rule(world, run=body["id"], kind="gpu_hours", threshold=0.002)  # 7.2 s of one GPU
    _wait(lambda: (r := _run(body["id"])).status == S.RUNNING and r.step >= 1, timeout=150, what="running")
    Run.objects.filter(pk=body["id"]).update(gpus=1)  # the CPU run counted as holding one GPU
    run = _wait(lambda: (r := _run(body["id"])).is_terminal and r, timeout=120, what="stopped by its budget")
    assert run.status == S.STOPPED, run.error
    assert run.checkpoint_path and Path(run.checkpoint_path).is_dir()
    levels = list(AlertFiring.objects.filter(run=run, kind="gpu_hours").order_by("id").values_list("paused", flat=True))
    assert levels[-1] is True  # the 100% firing paused it (the 80% warning may have come first)
    assert Notification.objects.filter(run=run, event="run_stop", level="critical").exists()
    budget = world["api"].get(f"/api/v1/runs/{run.pk}/alerts/").json()["budget"]
    assert budget["cap"] == 0.002 and budget["gpu_hours"] >= 0.002 and budget["level"] == "stop"
