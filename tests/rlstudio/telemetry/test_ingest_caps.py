"""Per-run ingest caps (RLSTUDIO_RUN_MAX_EVENTS / _SAMPLES / _METRIC_ROWS): refusals with the cap's
name, control events still applied past the events cap, one audit event per cap, exact counters."""
import json
import threading

import pytest
from django.db import connection
from django.test import Client, TestCase

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs.models import Run
from rlstudio.runs.services import run_create, run_transition
from rlstudio.telemetry.models import MetricRow, RunEvent, RunIngestCount, Sample
from rlstudio.telemetry.services import events_ingest, rollout_dir

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


@pytest.fixture
def run_and_token(alice, make_dataset, make_model):
    return run_create(owner=alice, name="capped", dataset=make_dataset(alice), model=make_model(alice),
                      config={}, gpus=0)


def log(seq):
    return {"seq": seq, "type": "log", "time": T0 + seq, "data": {"level": "info", "message": f"line {seq}"}}


def metrics(seq, step, **values):
    return {"seq": seq, "type": "metrics", "time": T0 + seq, "data": {"step": step, "metrics": values or {"x": 1.0}}}


def sample(seq, step=1):
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": "p0", "index": seq, "reward": 1.0, "advantage": 0.0, "response_length": 2,
        "num_turns": 1, "finish_reason": "stop", "messages": [{"role": "user", "content": "hi"}]}}


def status(seq, state):
    return {"seq": seq, "type": "status", "time": T0 + seq, "data": {"state": state}}


def post(run_id, token, events):
    with TestCase.captureOnCommitCallbacks(execute=True):
        return Client().post(f"/api/v1/runs/{run_id}/events/", json.dumps({"events": events}),
                             content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def cap_audits(run):
    return list(AuditEvent.objects.filter(action="run.ingest_cap", object_id=str(run.pk)).order_by("id")
                .values_list("data", flat=True))


def test_events_cap_refuses_with_its_name_but_the_run_still_finishes(run_and_token, settings):
    from rlstudio.runs.launch import run_dir

    run, token = run_and_token
    settings.RLSTUDIO_RUN_MAX_EVENTS = 5
    run_transition(run=run, to="submitting")
    assert post(run.pk, token, [status(1, "running")] + [log(s) for s in (2, 3, 4)]).json()["accepted"] == 4
    response = post(run.pk, token, [log(5), log(6), metrics(7, 3)])
    assert response.status_code == 200
    body = response.json()
    # log 5 is the 5th event; the log and the metrics after it are refused.
    assert body["accepted"] == 1 and body["duplicates"] == 0
    assert [(r["index"], r["seq"]) for r in body["refused"]] == [(1, 6), (2, 7)]
    reason = body["refused"][0]["reason"]
    assert reason.startswith("event 6: run %d reached its cap of 5 stored events (RLSTUDIO_RUN_MAX_EVENTS)" % run.pk)
    assert "only status, heartbeat and checkpoint events are taken" in reason
    assert body["caps"] == [{"cap": "events", "limit": 5, "message": reason.removeprefix("event 6: ")}]
    assert cap_audits(run) == [{"cap": "events", "limit": 5, "setting": "RLSTUDIO_RUN_MAX_EVENTS"}]
    # More refusals at the same cap are not audited again; a resent stored event is a duplicate;
    # heartbeat and checkpoint are applied to the run (not stored).
    again = post(run.pk, token, [log(5), log(8), {"seq": 9, "type": "heartbeat", "time": T0 + 9, "data": {"step": 3}},
                                 {"seq": 10, "type": "checkpoint", "time": T0 + 10,
                                  "data": {"step": 3, "path": f"{run_dir(run.pk)}/global_step_3"}}]).json()
    assert (again["accepted"], again["duplicates"], [r["seq"] for r in again["refused"]]) == (2, 1, [8])
    assert len(cap_audits(run)) == 1
    run.refresh_from_db()
    assert run.step == 3 and run.last_heartbeat is not None and run.checkpoint_path == f"{run_dir(run.pk)}/global_step_3"
    # The final status passes the cap and ends the run.
    final = post(run.pk, token, [log(11), status(12, "succeeded")]).json()
    assert final["accepted"] == 1 and [r["seq"] for r in final["refused"]] == [11]
    run.refresh_from_db()
    assert run.status == "succeeded"
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2, 3, 4, 5]
    assert not MetricRow.objects.filter(run=run).exists()
    assert RunIngestCount.objects.get(run=run).events == 5


def test_stopped_from_running_passes_the_events_cap(run_and_token, settings):
    run, token = run_and_token
    settings.RLSTUDIO_RUN_MAX_EVENTS = 1
    run_transition(run=run, to="submitting")
    run_transition(run=run, to="running")
    body = post(run.pk, token, [log(1), log(2), status(3, "stopped")]).json()
    assert body["accepted"] == 2 and [r["seq"] for r in body["refused"]] == [2]
    assert Run.objects.get(pk=run.pk).status == "stopped"  # through stopping, as without the cap
    assert list(AuditEvent.objects.filter(action="run.transition", object_id=str(run.pk))
                .order_by("id").values_list("data__to", flat=True))[-2:] == ["stopping", "stopped"]


def test_samples_cap(run_and_token, settings):
    run, token = run_and_token
    settings.RLSTUDIO_RUN_MAX_SAMPLES = 3
    assert post(run.pk, token, [sample(1), sample(2)]).json()["accepted"] == 2
    body = post(run.pk, token, [sample(3), sample(4), log(5), sample(6)]).json()
    assert body["accepted"] == 2  # sample 3 and the log
    assert [(r["index"], r["seq"]) for r in body["refused"]] == [(1, 4), (3, 6)]
    assert "cap of 3 samples (RLSTUDIO_RUN_MAX_SAMPLES); further samples are refused" in body["refused"][0]["reason"]
    assert [c["cap"] for c in body["caps"]] == ["samples"]
    assert Sample.objects.filter(run=run).count() == 3
    dumped = (rollout_dir(run.pk) / "step_000001.jsonl").read_text().splitlines()
    assert [json.loads(line)["seq"] for line in dumped] == [1, 2, 3]  # the dump files are capped too
    counts = RunIngestCount.objects.get(run=run)
    assert (counts.events, counts.samples) == (4, 3)
    assert cap_audits(run) == [{"cap": "samples", "limit": 3, "setting": "RLSTUDIO_RUN_MAX_SAMPLES"}]


def test_metric_rows_cap_refuses_new_steps_only(run_and_token, settings):
    run, token = run_and_token
    settings.RLSTUDIO_RUN_MAX_METRIC_ROWS = 2
    assert post(run.pk, token, [metrics(1, 1, a=1.0)]).json()["accepted"] == 1
    # step 2 takes the last row; step 3 is refused; more metrics of steps 1 and 2 still merge.
    body = post(run.pk, token, [metrics(2, 2, a=2.0), metrics(3, 3, a=3.0), metrics(4, 2, b=2.5),
                                metrics(5, 1, b=1.5)]).json()
    assert body["accepted"] == 3 and [r["seq"] for r in body["refused"]] == [3]
    assert "cap of 2 metric rows (steps) (RLSTUDIO_RUN_MAX_METRIC_ROWS)" in body["refused"][0]["reason"]
    rows = {r.step: r.metrics for r in MetricRow.objects.filter(run=run)}
    assert rows == {1: {"a": 1.0, "b": 1.5}, 2: {"a": 2.0, "b": 2.5}}
    assert RunIngestCount.objects.get(run=run).metric_rows == 2


def test_counters_of_a_run_older_than_them_start_from_what_is_stored(run_and_token, settings):
    run, token = run_and_token
    post(run.pk, token, [metrics(1, 1), metrics(2, 1), metrics(3, 2), sample(4), log(5)])
    RunIngestCount.objects.filter(run=run).delete()  # as before the counters existed
    settings.RLSTUDIO_RUN_MAX_EVENTS = 6
    body = post(run.pk, token, [log(6), log(7)]).json()
    assert body["accepted"] == 1 and [r["seq"] for r in body["refused"]] == [7]
    counts = RunIngestCount.objects.get(run=run)
    assert (counts.events, counts.samples, counts.metric_rows) == (6, 1, 2)


def test_a_changed_limit_is_audited_again(run_and_token, settings):
    run, token = run_and_token
    settings.RLSTUDIO_RUN_MAX_EVENTS = 1
    post(run.pk, token, [log(1), log(2)])
    settings.RLSTUDIO_RUN_MAX_EVENTS = 2
    post(run.pk, token, [log(3), log(4)])
    assert [a["limit"] for a in cap_audits(run)] == [1, 2]
    assert RunEvent.objects.filter(run=run).count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_never_pass_the_cap(alice, make_dataset, make_model, settings):
    """Eight batches of 25 events posted at once by threads: the counter row's lock serializes them,
    so exactly the cap is stored, never more."""
    settings.RLSTUDIO_RUN_MAX_EVENTS = 110
    run, _ = run_create(owner=alice, name="race", dataset=make_dataset(alice), model=make_model(alice),
                        config={}, gpus=0)
    results, errors = [], []
    start = threading.Barrier(8)

    def send(i: int):
        try:
            start.wait(10)
            results.append(events_ingest(run=run, raw_events=[log(1 + i * 25 + k) for k in range(25)]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert sum(r.accepted for r in results) == 110 and sum(len(r.refused) for r in results) == 90
    assert RunEvent.objects.filter(run=run).count() == 110 == RunIngestCount.objects.get(run=run).events
    assert len(cap_audits(run)) == 1
