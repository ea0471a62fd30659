"""Alerts on a real PostgreSQL and Redis: rules evaluated by the ingest hook, firings and notifications,
auto-pause, lifecycle notifications, the reconcile's heartbeat and GPU-hour watch, e-mail through the
locmem backend, signed webhooks to a loopback server with retries, and the delivery log."""
from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail
from django.test import TestCase
from django.utils import timezone

from rlstudio.accounts.models import AuditEvent
from rlstudio.alerts.models import (AlertFiring, AlertRule, DeliveryStatus, Notification, RunAlertState,
                                    WebhookDelivery, WebhookEndpoint)
from rlstudio.alerts.services import rule_create, rules_cache_clear, settings_update, watch_running
from rlstudio.alerts.services.delivery import (backoff_s, delivery_attempt, delivery_for, email_send, verify,
                                               webhook_body)
from rlstudio.alerts.tasks import deliver
from rlstudio.runs.models import Run, RunStatus
from rlstudio.runs.services import run_transition
from rlstudio.telemetry.services import events_ingest

pytestmark = pytest.mark.django_db
S = RunStatus
SECRET_ENV = "RLSTUDIO_WEBHOOK_SECRET_UNIT"
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _clean(settings, tmp_path, monkeypatch):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    monkeypatch.setenv(SECRET_ENV, "s3cret-for-tests")
    rules_cache_clear()


def running(run: Run) -> Run:
    run_transition(run=run, to=S.SUBMITTING)
    Run.objects.filter(pk=run.pk).update(ray_submission_id=f"rlstudio-run-{run.pk}")
    run_transition(run=run, to=S.RUNNING)
    run.refresh_from_db()
    return run


def metrics(seq: int, step: int, **values) -> dict:
    return {"seq": seq, "type": "metrics", "time": T0 + seq,
            "data": {"step": step, "metrics": {k.replace("__", "/"): v for k, v in values.items()}}}


def ingest(run, events):
    with TestCase.captureOnCommitCallbacks(execute=True) as callbacks:
        result = events_ingest(run=run, raw_events=events)
    return result, callbacks


def test_a_rule_fires_once_with_its_values_and_the_owner_is_told(alice, make_run):
    alice.email = "alice@example.org"
    alice.save()
    run = running(make_run(alice))
    rule = rule_create(owner=alice, run=run, data={"kind": "entropy_collapse", "threshold": 0.05, "window": 2,
                                                   "email": True})
    quiet = rule_create(owner=alice, data={"kind": "kl_high"})  # a default that must stay quiet
    events = [metrics(i, i, actor__entropy=e, actor__ppo_kl=0.001) for i, e in enumerate([0.5, 0.04, 0.03, 0.02], 1)]
    result, _ = ingest(run, events)
    assert result.accepted == 4
    firing = AlertFiring.objects.get(run=run)
    assert (firing.rule_id, firing.kind, firing.step, firing.metric) == (rule.pk, "entropy_collapse", 3, "actor/entropy")
    assert firing.values == {"actor/entropy": 0.03, "window": [0.04, 0.03], "threshold": 0.05}
    assert not AlertFiring.objects.filter(rule=quiet).exists()
    n = Notification.objects.get(user=alice, kind="alert")
    assert n.firing_id == firing.pk and n.email and "actor/entropy 0.03" in n.body and not n.read
    # the state is the run's rolling window, not a re-read of its metrics
    state = RunAlertState.objects.get(run=run).state
    steps, values = state["h"]["actor/entropy"]
    assert (steps[-1], values[-1]) == (4, 0.02) and state["on"] == [rule.pk]
    # still collapsed in the next batch: no second firing
    ingest(run, [metrics(5, 5, actor__entropy=0.01)])
    assert AlertFiring.objects.filter(run=run).count() == 1
    # e-mail through Django's mail settings (locmem here)
    assert deliver(n.pk) == "e-mailed"
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.org"]
    assert mail.outbox[0].subject.startswith("[RL Studio] Entropy collapse on run")
    assert f"/runs/{run.pk}/" in mail.outbox[0].body
    assert deliver(n.pk) == "nothing to deliver"  # once
    assert len(mail.outbox) == 1


def test_a_pause_rule_stops_the_run_with_a_checkpoint(alice, make_run):
    run = running(make_run(alice))
    rule_create(owner=alice, run=run, data={"kind": "threshold", "metric": "critic/score/mean", "op": "<",
                                            "threshold": 0.1, "pause": True})
    ingest(run, [metrics(1, 1, critic__score__mean=0.5), metrics(2, 2, critic__score__mean=0.05)])
    run.refresh_from_db()
    assert run.status == S.STOPPING and run.stop_requested is not None
    firing = AlertFiring.objects.get(run=run)
    assert firing.paused and firing.step == 2
    stop = AuditEvent.objects.get(action="run.stop", object_id=str(run.pk))  # by the platform, not alice
    assert stop.actor_id is None and stop.data == {"checkpoint": True, "force": False,
                                                   "reason": f"rule {firing.rule_id} (threshold)"}
    assert AuditEvent.objects.filter(action="alert.pause", object_id=str(run.pk)).exists()
    n = Notification.objects.get(user=alice, kind="alert")
    assert n.level == "critical" and n.title.startswith("Pausing run")


def test_run_rules_replace_defaults_of_the_same_kind_and_a_disabled_one_mutes(alice, make_run):
    run = running(make_run(alice))
    rule_create(owner=alice, data={"kind": "entropy_collapse", "window": 1})
    rule_create(owner=alice, run=run, data={"kind": "entropy_collapse", "enabled": False})
    other = running(make_run(alice, "run-2"))
    ingest(run, [metrics(1, 1, actor__entropy=0.0)])
    ingest(other, [metrics(1, 1, actor__entropy=0.0)])
    assert not AlertFiring.objects.filter(run=run).exists()
    assert AlertFiring.objects.filter(run=other).count() == 1


def test_a_faulty_rule_never_fails_the_ingest(alice, make_run):
    run = running(make_run(alice))
    rule = rule_create(owner=alice, run=run, data={"kind": "kl_high"})
    AlertRule.objects.filter(pk=rule.pk).update(kind="no-such-kind")  # what the services never store
    rules_cache_clear()
    result, _ = ingest(run, [metrics(1, 1, actor__ppo_kl=9.0)])
    assert result.accepted == 1 and not AlertFiring.objects.exists()


def test_lifecycle_notifications_follow_the_users_routes(alice, make_run):
    alice.email = "alice@example.org"
    alice.save()
    settings_update(user=alice, routes={"stopped": ["email"]})
    run = running(make_run(alice))
    with TestCase.captureOnCommitCallbacks(execute=True):
        run_transition(run=run, to=S.FAILED, error="Traceback (most recent call last):\n  File x\n" +
                       "\n".join(f"line {i}" for i in range(20)) + "\nValueError: boom")
    failed = Notification.objects.get(user=alice, event="failed")
    assert failed.level == "critical" and not failed.read and failed.email
    assert "Traceback" in failed.body and "line 5" in failed.body and "boom" not in failed.body  # first lines
    run2 = running(make_run(alice, "run-2"))
    with TestCase.captureOnCommitCallbacks(execute=True):
        run_transition(run=run2, to=S.STOPPING)
        run_transition(run=run2, to=S.STOPPED)
    stopped = Notification.objects.get(user=alice, event="stopped")
    assert stopped.read and stopped.email  # not in the header (no "app"), but e-mailed
    assert email_send(stopped) and mail.outbox[-1].subject == f"[RL Studio] Run “run-2” (#{run2.pk}) stopped"
    # The run's address is the delivery's to add (a link in the app, a line in the mail), not the body's.
    assert "/runs/" not in failed.body and "/runs/" not in stopped.body
    assert mail.outbox[-1].body.count(f"/runs/{run2.pk}/") == 1


def test_started_after_waiting_in_the_queue(alice, make_run):
    run = make_run(alice)
    Run.objects.filter(pk=run.pk).update(queue_reason="you run 1 of your 1 concurrent run")
    with TestCase.captureOnCommitCallbacks(execute=True):
        running(run)
    n = Notification.objects.get(user=alice, event="started")
    assert "1 of your 1 concurrent run" in n.body
    quick = make_run(alice, "quick")
    with TestCase.captureOnCommitCallbacks(execute=True):
        running(quick)
    assert not Notification.objects.filter(run=quick, event="started").exists()


def test_the_reconcile_watch_no_heartbeat_and_a_runs_gpu_hour_budget(alice, make_run):
    run = running(make_run(alice, gpus=2))
    hour_ago = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=run.pk).update(started=hour_ago, last_heartbeat=hour_ago)
    rule_create(owner=alice, data={"kind": "no_heartbeat", "threshold": 30})
    budget = rule_create(owner=alice, run=run, data={"kind": "gpu_hours", "threshold": 2.4})  # used: 2 GPU-h
    with TestCase.captureOnCommitCallbacks(execute=True):
        done = watch_running()
    assert done["heartbeat"] == 1 and done["budget_warn"] == 1 and done["budget_stop"] == 0
    assert Notification.objects.get(event="run_warn").title.startswith(f"Run “{run.name}” used 83%")
    with TestCase.captureOnCommitCallbacks(execute=True):
        done = watch_running()
    assert done == {"heartbeat": 0, "budget_warn": 0, "budget_stop": 0, "month_warn": 0, "month_stop": 0}
    AlertRule.objects.filter(pk=budget.pk).update(threshold=1.9)
    rules_cache_clear()
    with TestCase.captureOnCommitCallbacks(execute=True):
        done = watch_running()
    run.refresh_from_db()
    assert done["budget_stop"] == 1 and run.status == S.STOPPING
    assert AlertFiring.objects.get(run=run, kind="gpu_hours", paused=True).values["cap"] == 1.9


def test_the_monthly_quota_warns_at_80_percent_and_stops_gpu_runs_at_100(alice, make_run):
    from rlstudio.quotas.models import GpuQuota

    GpuQuota.objects.create(user=alice, max_gpus=4, gpu_hours_per_month=1, max_concurrent_runs=4)
    run = running(make_run(alice, gpus=4))
    cpu = running(make_run(alice, "cpu", gpus=0))
    # minutes, not hours: the month's GPU-hours count from its first day
    Run.objects.filter(pk=run.pk).update(started=timezone.now() - timedelta(minutes=13))  # 0.87 GPU-h
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert watch_running()["month_warn"] == 1
        assert watch_running()["month_warn"] == 0  # once a month
    Run.objects.filter(pk=run.pk).update(started=timezone.now() - timedelta(minutes=16))  # 1.07 GPU-h
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert watch_running()["month_stop"] == 1
    assert Run.objects.get(pk=run.pk).status == S.STOPPING and Run.objects.get(pk=cpu.pk).status == S.RUNNING
    assert Notification.objects.get(event="month_stop").level == "critical"


class Receiver(BaseHTTPRequestHandler):
    """A webhook receiver on loopback: answers the scripted statuses in turn, records each request."""

    statuses: list[int] = []
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        code = type(self).statuses.pop(0) if type(self).statuses else 200
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    Receiver.statuses, Receiver.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", Receiver
    server.shutdown()


def test_webhooks_are_signed_retried_and_logged(alice, make_run, receiver, staff):
    url, rec = receiver
    hook = WebhookEndpoint.objects.create(name="ops-slack", url=url, secret_env=SECRET_ENV, created_by=staff)
    run = running(make_run(alice))
    rule_create(owner=alice, run=run, data={"kind": "kl_high", "threshold": 0.5, "window": 1, "webhook": "ops-slack"})
    ingest(run, [metrics(1, 1, actor__ppo_kl=0.9)])
    n = Notification.objects.get(user=alice, kind="alert")
    assert n.webhook_id == hook.pk
    delivery = delivery_for(n)
    rec.statuses = [503]
    first = delivery_attempt(delivery.pk, final=False)
    assert not first.delivered and first.retry and first.status == 503
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == DeliveryStatus.PENDING
    second = delivery_attempt(delivery.pk, final=False)
    assert second.delivered and second.status == 200
    d = WebhookDelivery.objects.get(pk=delivery.pk)
    assert (d.status, d.attempts, d.response_status) == (DeliveryStatus.DELIVERED, 2, 200) and d.delivered
    assert delivery_attempt(delivery.pk, final=False) is None  # delivered: nothing more is sent
    req = rec.seen[-1]
    assert verify("s3cret-for-tests", req["headers"]["x-rlstudio-timestamp"], req["body"],
                  req["headers"]["x-rlstudio-signature"])
    assert not verify("another-secret", req["headers"]["x-rlstudio-timestamp"], req["body"],
                      req["headers"]["x-rlstudio-signature"])
    assert rec.seen[0]["body"] == rec.seen[1]["body"]  # the same bytes every attempt
    body = json.loads(req["body"])
    assert body["text"].startswith(":warning: *KL above a bound on run") and f"/runs/{run.pk}/" in body["text"]
    assert body["rlstudio"]["firing"]["values"]["actor/ppo_kl"] == 0.9
    assert req["headers"]["x-rlstudio-event"] == "alert.kl_high"
    assert [backoff_s(i) for i in (1, 2, 3, 10)] == [5, 10, 20, 240]


def test_a_webhook_without_its_secret_or_answering_4xx_fails_without_retrying(alice, make_run, receiver, monkeypatch):
    url, rec = receiver
    WebhookEndpoint.objects.create(name="nosecret", url=url, secret_env="RLSTUDIO_WEBHOOK_SECRET_MISSING")
    WebhookEndpoint.objects.create(name="gone", url=url, secret_env=SECRET_ENV)
    run = running(make_run(alice))
    n1 = Notification.objects.create(user=alice, run=run, kind="alert", event="x", title="t",
                                     webhook=WebhookEndpoint.objects.get(name="nosecret"))
    result = delivery_attempt(delivery_for(n1).pk, final=False)
    assert not result.retry and "RLSTUDIO_WEBHOOK_SECRET_MISSING is not set" in result.error and not rec.seen
    n2 = Notification.objects.create(user=alice, run=run, kind="alert", event="x", title="t",
                                     webhook=WebhookEndpoint.objects.get(name="gone"))
    rec.statuses = [404]
    d = delivery_for(n2)
    assert not delivery_attempt(d.pk, final=False).retry
    assert WebhookDelivery.objects.get(pk=d.pk).status == DeliveryStatus.FAILED
    assert webhook_body(n2)["rlstudio"]["id"] == n2.pk
    WebhookEndpoint.objects.filter(name="gone").update(body_format="slack")  # Slack's own field only
    n2.refresh_from_db()
    assert set(webhook_body(n2)) == {"text"} and webhook_body(n2)["text"].startswith(":information_source: *t*")


def test_rules_refuse_another_users_run_and_unknown_webhooks(alice, bob, make_run):
    from rlstudio.alerts.services import AlertInvalid

    bobs = make_run(bob, "bobs")
    with pytest.raises(AlertInvalid) as err:
        rule_create(owner=alice, run=bobs, data={"kind": "kl_high"})
    assert err.value.field == "run"
    with pytest.raises(AlertInvalid) as err:
        rule_create(owner=alice, data={"kind": "kl_high", "webhook": "https://evil.example/hook"})
    assert err.value.field == "webhook" and "registered by the operators" in err.value.message


def test_a_rule_state_another_process_moved_on_is_read_again(alice, make_run):
    """The ingest keeps a run's rule state per process with its version; a write checks the version, so
    a state written meanwhile by another server process is read back, never overwritten."""
    from django.db import connection

    run = running(make_run(alice))
    rule_create(owner=alice, run=run, data={"kind": "entropy_collapse", "threshold": 0.05, "window": 2})
    ingest(run, [metrics(1, 1, actor__entropy=0.01)])  # this process now caches the state (streak 1)
    row = RunAlertState.objects.get(run=run)
    other = {**row.state, "h": {"actor/entropy": [[1, 2], [0.01, 0.5]]}}  # another process saw step 2
    with connection.cursor() as cur:
        cur.execute("UPDATE alerts_runalertstate SET state = %s::jsonb, version = version + 1 WHERE run_id = %s",
                    [json.dumps(other), run.pk])
    ingest(run, [metrics(3, 3, actor__entropy=0.01)])
    assert not AlertFiring.objects.filter(run=run).exists()  # the stale streak (1, 3) would have fired
    assert RunAlertState.objects.get(run=run).state["h"]["actor/entropy"] == [[1, 2, 3], [0.01, 0.5, 0.01]]
    ingest(run, [metrics(4, 4, actor__entropy=0.01)])
    assert AlertFiring.objects.get(run=run).step == 4


def test_a_starting_run_is_not_silent_before_the_start_up_grace(alice, make_run, settings):
    """A trainer still importing torch (no report yet) does not fire a no_heartbeat rule of 30 s, nor
    pause the run; past RLSTUDIO_RUN_STARTUP_TIMEOUT_S it does, saying it never reported."""
    settings.RLSTUDIO_RUN_STARTUP_TIMEOUT_S = 600
    run = running(make_run(alice))
    Run.objects.filter(pk=run.pk).update(started=timezone.now() - timedelta(seconds=208), last_heartbeat=None)
    rule_create(owner=alice, data={"kind": "no_heartbeat", "threshold": 30, "pause": True})
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert watch_running()["heartbeat"] == 0
    run.refresh_from_db()
    assert run.status == S.RUNNING and not AlertFiring.objects.exists()
    Run.objects.filter(pk=run.pk).update(started=timezone.now() - timedelta(seconds=601))
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert watch_running()["heartbeat"] == 1
    assert AlertFiring.objects.get(run=run).message.startswith("the trainer has not reported since the run started")


def test_a_trainer_still_starting_read_by_the_reconcile_keeps_the_start_up_grace(alice, make_run, settings,
                                                                                 tmp_path, monkeypatch):
    """The reconcile reads the trainer's events file: a "starting" status (the model loading) is no
    heartbeat, so a no_heartbeat rule of 30 s neither fires nor pauses the run 200 s in, as the
    reconcile itself waits RLSTUDIO_RUN_STARTUP_TIMEOUT_S; the first heartbeat then counts."""
    from rlstudio.runs import launch, ray_jobs
    from rlstudio.runs.reconcile import reconcile_run

    settings.RUNS_DIR = tmp_path
    settings.RLSTUDIO_RUN_STARTUP_TIMEOUT_S = 600
    run = running(make_run(alice))
    Run.objects.filter(pk=run.pk).update(started=timezone.now() - timedelta(seconds=200), last_heartbeat=None)
    run.refresh_from_db()
    folder = launch.run_folder(run)
    folder.mkdir(parents=True, exist_ok=True)
    said = timezone.now().timestamp() - 190
    (folder / "events.jsonl").write_text(json.dumps(
        {"seq": 1, "type": "status", "time": said, "data": {"state": "starting", "message": "loading the model"}}) + "\n")
    monkeypatch.setattr(ray_jobs, "job_info", lambda submission_id: ray_jobs.JobInfo(
        submission_id=submission_id, status=ray_jobs.RUNNING, message="", driver_exit_code=None))
    rule_create(owner=alice, data={"kind": "no_heartbeat", "threshold": 30, "pause": True})
    assert reconcile_run(run) is None
    run.refresh_from_db()
    assert run.last_heartbeat is None
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert watch_running()["heartbeat"] == 0
    assert Run.objects.get(pk=run.pk).status == S.RUNNING and not AlertFiring.objects.exists()
    with (folder / "events.jsonl").open("a") as f:
        f.write(json.dumps({"seq": 2, "type": "heartbeat", "time": said + 150, "data": {"step": 0}}) + "\n")
    assert reconcile_run(run) is None
    assert Run.objects.get(pk=run.pk).last_heartbeat.timestamp() == pytest.approx(said + 150)
