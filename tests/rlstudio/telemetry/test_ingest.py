"""The trainer's ingest API: run-token auth, exactly-once storage, refusals with reasons, effects."""
import gzip
import json
from pathlib import Path

import pytest
from django.test import Client, TestCase

from rlstudio.accounts.models import AuditEvent
from rlstudio.runs.models import Run
from rlstudio.runs.services import run_create, run_transition
from rlstudio.telemetry.models import MemoryPoint, MetricRow, RunEvent, Sample
from rlstudio.telemetry.services import retention_set, rollout_dir

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


@pytest.fixture
def run_and_token(alice, make_dataset, make_model):
    run, token = run_create(owner=alice, name="ingest-run", dataset=make_dataset(alice),
                            model=make_model(alice), config={}, gpus=0)
    return run, token


def sample_event(seq, *, step=1, uid="p0", index=0, reward=1.0, adv=0.5, tool=False, finish="stop"):
    assistant = {"role": "assistant", "content": "<b>#### 5</b>"}
    if tool:
        assistant = {"role": "assistant", "content": None,
                     "tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}]}
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": uid, "index": index, "reward": reward, "advantage": adv,
        "response_length": 7, "num_turns": 1, "finish_reason": finish, "tool_calls": 1 if tool else 0,
        "messages": [{"role": "user", "content": "2+3?"}, assistant],
        "token_view": {"ids": [5, 6], "pieces": ["#", "5"], "loss_mask": [1, 1], "logprobs": [-0.1, -2.0],
                       "ref_logprobs": None, "advantages": [adv, adv]}}}


def metrics_event(seq, step, **metrics):
    return {"seq": seq, "type": "metrics", "time": T0 + seq, "data": {"step": step, "metrics": metrics}}


def post(run_id, token, events, *, gz=False, raw=None, auth="Bearer"):
    body = raw if raw is not None else json.dumps({"events": events}).encode()
    headers = {}
    if gz:
        body = gzip.compress(body)
        headers["HTTP_CONTENT_ENCODING"] = "gzip"
    if token is not None:
        headers["HTTP_AUTHORIZATION"] = f"{auth} {token}"
    # The test's transaction never commits: run the after-commit work (broadcast, dumps) on exit.
    with TestCase.captureOnCommitCallbacks(execute=True):
        return Client().post(f"/api/v1/runs/{run_id}/events/", body, content_type="application/json", **headers)


def test_token_checks(run_and_token, alice, make_dataset, make_model):
    run, token = run_and_token
    other, other_token = run_create(owner=alice, name="other", dataset=make_dataset(alice, "d2"),
                                    model=make_model(alice, "m2"), config={}, gpus=0)
    ev = [metrics_event(1, 1, x=1.0)]
    assert post(run.pk, None, ev).status_code == 401
    assert post(run.pk, "rit_wrong", ev).status_code == 401
    refused = post(run.pk, other_token, ev)  # a token of run B cannot write to run A
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_token"
    assert post(run.pk, token, ev, auth="Token").status_code == 401
    # a run that does not exist answers as a wrong token does: nobody learns which run ids exist
    for missing in (post(987654, token, ev), post(987654, None, ev), post(987654, "rit_guess", ev)):
        assert missing.status_code == 401, missing.content[:200]
    assert post(987654, token, ev).json() == refused.json()
    assert RunEvent.objects.count() == 0
    assert post(run.pk, token, ev).json() == {"accepted": 1, "duplicates": 0, "refused": []}
    assert post(other.pk, other_token, ev).json()["accepted"] == 1


def test_duplicates_stored_once_and_gzip(run_and_token):
    run, token = run_and_token
    batch = [metrics_event(i, i, **{"critic/score/mean": i / 10}) for i in range(1, 6)]
    assert post(run.pk, token, batch, gz=True).json()["accepted"] == 5
    again = post(run.pk, token, batch + [metrics_event(6, 6, x=0.0), metrics_event(6, 6, x=9.0)]).json()
    assert again == {"accepted": 1, "duplicates": 6, "refused": []}
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2, 3, 4, 5, 6]
    assert MetricRow.objects.get(run=run, step=6).metrics == {"x": 0.0}  # the first of the batch wins
    assert MetricRow.objects.get(run=run, step=3).metrics == {"critic/score/mean": 0.3}
    run.refresh_from_db()
    assert run.step == 6


def test_malformed_and_oversized_refused_rest_kept(run_and_token, settings):
    run, token = run_and_token
    settings.RLSTUDIO_INGEST_MAX_EVENT_BYTES = 2000
    big = {"seq": 3, "type": "log", "time": T0, "data": {"level": "info", "message": "x" * 5000}}
    batch = [metrics_event(1, 1, a=1.0), {"seq": 2, "type": "metrics", "time": T0, "data": {"step": -1, "metrics": {}}},
             big, "not an object", {"seq": 5, "type": "bogus", "time": T0, "data": {}},
             {"seq": 6, "type": "log", "time": T0, "data": {"level": "info", "message": "ok <script>"}}]
    body = post(run.pk, token, batch).json()
    assert body["accepted"] == 2
    reasons = {r["index"]: r["reason"] for r in body["refused"]}
    assert set(reasons) == {1, 2, 3, 4}
    assert "data.step" in reasons[1] and "exceeds the per-event limit of 2000" in reasons[2]
    assert "must be an object" in reasons[3] and "type" in reasons[4]
    assert sorted(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 6]


def test_bad_bodies_never_500(run_and_token, settings):
    run, token = run_and_token
    assert post(run.pk, token, None, raw=b"{nope").status_code == 400
    assert post(run.pk, token, None, raw=b'{"events": 3}').json()["error"]["field"] == "events"
    bad_gzip = Client().post(f"/api/v1/runs/{run.pk}/events/", b"not gzip", content_type="application/json",
                             HTTP_CONTENT_ENCODING="gzip", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert bad_gzip.status_code == 400
    settings.RLSTUDIO_INGEST_MAX_REQUEST_BYTES = 10_000
    bomb = json.dumps({"events": [], "pad": "0" * 200_000}).encode()
    assert post(run.pk, token, None, raw=bomb, gz=True).status_code == 413  # small gzip, huge inside
    assert post(run.pk, token, None, raw=bomb).status_code == 413
    settings.RLSTUDIO_INGEST_MAX_EVENTS = 3
    assert post(run.pk, token, [metrics_event(i, i) for i in range(1, 5)]).status_code == 413


def test_too_deeply_nested_bodies_are_a_400_not_a_500(run_and_token):
    """orjson stops at 1024 levels and json.loads then hits the recursion limit: both are 'not JSON'."""
    run, token = run_and_token
    for raw in (b"[" * 100_000, b'{"events": [' + b"[" * 5_000 + b"]" * 5_000 + b"]}"):
        r = post(run.pk, token, None, raw=raw)
        assert r.status_code == 400 and r.json()["error"]["code"] == "parse_error", r.content[:200]
    assert not RunEvent.objects.filter(run=run).exists()


def test_samples_memory_heartbeat_checkpoint_logs(run_and_token):
    from rlstudio.runs.launch import run_dir

    run, token = run_and_token
    ckpt = run_dir(run.pk)
    batch = [
        sample_event(1, index=0, reward=1.0), sample_event(2, index=1, reward=0.0, tool=True, finish="length"),
        {"seq": 3, "type": "memory", "time": T0 + 3, "data": {"step": 1, "phase": "rollout", "device": "cpu",
                                                             "rss": 123456, "peak": 200000}},
        {"seq": 4, "type": "heartbeat", "time": T0 + 4, "data": {"step": 2}},
        {"seq": 5, "type": "checkpoint", "time": T0 + 5, "data": {"step": 2, "path": f"{ckpt}/global_step_2"}},
        {"seq": 7, "type": "checkpoint", "time": T0 + 7, "data": {"step": 2, "path": "/elsewhere/global_step_2"}},
        {"seq": 6, "type": "log", "time": T0 + 6, "data": {"level": "warning", "message": "hello"}},
    ]
    assert post(run.pk, token, batch).json()["accepted"] == 7
    s0, s1 = Sample.objects.filter(run=run).order_by("index")
    assert (s0.reward, s0.has_tool_call, s1.has_tool_call, s1.finish_reason) == (1.0, False, True, "length")
    assert s0.transcript["messages"][1]["content"] == "<b>#### 5</b>" and s0.token_view["logprobs"] == [-0.1, -2.0]
    # The replay source holds the sample's summary with its id, not the transcript.
    ev = RunEvent.objects.get(run=run, seq=2).data
    assert ev["sample_id"] == s1.pk and ev["has_tool_call"] is True and "messages" not in ev
    mp = MemoryPoint.objects.get(run=run)
    assert (mp.phase, mp.rss, mp.peak) == ("rollout", 123456, 200000)
    run.refresh_from_db()
    # The last checkpoint event named a folder outside the run's own: the one inside it is kept.
    assert run.last_heartbeat is not None and run.checkpoint_path == f"{ckpt}/global_step_2" and run.step == 2
    lines = [json.loads(x) for x in (rollout_dir(run.pk) / "step_000001.jsonl").read_text().splitlines()]
    assert [x["seq"] for x in lines] == [1, 2] and lines[0]["data"]["messages"][0]["content"] == "2+3?"


def test_memory_points_keep_the_worker_rank_and_the_nvml_device_reading(run_and_token):
    from rlstudio.telemetry.selectors import memory_for

    run, token = run_and_token
    gib = 2**30
    batch = [{"seq": 1 + r, "type": "memory", "time": T0 + r, "data": {
        "step": 3, "phase": "update", "device": f"cuda:{r}", "rss": 1000, "allocated": 2 * gib, "reserved": 3 * gib,
        "peak": 2 * gib, "rank": r, "device_used": 5 * gib + r}} for r in range(2)]
    batch.append({"seq": 3, "type": "memory", "time": T0 + 3,  # an older trainer: no rank, no NVML
                  "data": {"step": 3, "phase": "rollout", "device": "cpu", "rss": 1000}})
    assert post(run.pk, token, batch).json()["accepted"] == 3
    got = [(p["rank"], p["device"], p["device_used"]) for p in memory_for(run=run)]
    assert got == [(0, "cuda:0", 5 * gib), (1, "cuda:1", 5 * gib + 1), (0, "cpu", 0)]


def test_nul_characters_from_the_model_are_stored_not_a_500(run_and_token):
    """PostgreSQL refuses NUL in text and jsonb; a tiny model emits one now and then (found by the
    browser journey: the whole batch answered 500 and the trainer resent it forever)."""
    run, token = run_and_token
    ev = sample_event(1)
    ev["data"]["messages"][1]["content"] = "#### 5\x00tail"
    ev["data"]["token_view"]["pieces"] = ["#", "\x00"]
    log = {"seq": 2, "type": "log", "time": T0 + 2, "data": {"level": "info", "message": "a\x00b"}}
    resp = post(run.pk, token, [ev, log])
    assert resp.status_code == 200 and resp.json()["accepted"] == 2
    sample = Sample.objects.get(run=run)
    assert sample.transcript["messages"][1]["content"] == "#### 5\ufffdtail"
    assert sample.token_view["pieces"] == ["#", "\ufffd"]
    assert RunEvent.objects.get(run=run, seq=2).data["message"] == "a\ufffdb"


def test_lone_surrogates_from_the_trainer_are_stored_not_a_500(run_and_token):
    """JSON may spell a lone UTF-16 surrogate ("\\ud800", half of a pair) that no UTF-8 encoder takes:
    a metric named with one broke the broadcast and a refusal echoing one broke the response (500s, the
    batch resent forever). Like a NUL, each is stored as U+FFFD."""
    run, token = run_and_token
    ev = sample_event(1)
    ev["data"]["messages"][1]["content"] = "#### 5\ud800"
    metrics = metrics_event(2, 1, **{"reward/\udfff": 0.5})
    log = {"seq": 3, "type": "log", "time": T0 + 3, "data": {"level": "info", "message": "a\udc00b"}}
    odd = {"seq": 4, "type": "log", "time": T0 + 4, "data": {"\udfff": 1}}  # refused: its reason names the key
    resp = post(run.pk, token, [ev, metrics, log, odd])
    assert resp.status_code == 200 and resp.json()["accepted"] == 3, resp.content[:300]
    assert [r["seq"] for r in resp.json()["refused"]] == [4]
    assert Sample.objects.get(run=run).transcript["messages"][1]["content"] == "#### 5\ufffd"
    assert MetricRow.objects.get(run=run, step=1).metrics == {"reward/\ufffd": 0.5}
    assert RunEvent.objects.get(run=run, seq=3).data["message"] == "a\ufffdb"


@pytest.mark.parametrize("when", [1e20, 1e308, 253_402_300_800])
def test_a_time_past_year_9999_is_refused_not_a_500(run_and_token, when):
    """`time` is unix seconds > 0; one no timestamp holds (PostgreSQL: out of range, a 500) is refused
    with its reason, and the rest of the batch is stored."""
    run, token = run_and_token
    far = metrics_event(1, 1, **{"critic/score/mean": 0.5})
    far["time"] = when
    resp = post(run.pk, token, [far, metrics_event(2, 2, **{"critic/score/mean": 0.6})])
    assert resp.status_code == 200 and resp.json()["accepted"] == 1, resp.content[:300]
    (refusal,) = resp.json()["refused"]
    assert refusal["seq"] == 1 and "time" in refusal["reason"]
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [2]


def test_status_events_move_the_run_only_where_legal(run_and_token):
    run, token = run_and_token

    def status(seq, state, **extra):
        return {"seq": seq, "type": "status", "time": T0 + seq, "data": {"state": state, **extra}}

    post(run.pk, token, [status(1, "running", total_steps=20)])
    run.refresh_from_db()
    assert run.status == "queued" and run.total_steps == 20  # queued → running is not legal: ignored
    run_transition(run=run, to="submitting")
    post(run.pk, token, [status(2, "running")])
    run.refresh_from_db()
    assert run.status == "running" and run.started is not None
    post(run.pk, token, [status(3, "failed", message="CUDA out of memory")])
    run.refresh_from_db()
    assert run.status == "failed" and run.error == "CUDA out of memory"
    post(run.pk, token, [status(4, "succeeded")])  # terminal: nothing follows
    assert Run.objects.get(pk=run.pk).status == "failed"
    actions = list(AuditEvent.objects.filter(action="run.transition").order_by("id").values_list("data__to", flat=True))
    assert actions == ["submitting", "running", "failed"]


def test_stopped_from_running_goes_through_stopping(run_and_token):
    run, token = run_and_token
    run_transition(run=run, to="submitting")
    run_transition(run=run, to="running")
    post(run.pk, token, [{"seq": 1, "type": "status", "time": T0, "data": {"state": "stopped"}}])
    assert Run.objects.get(pk=run.pk).status == "stopped"


def test_a_stop_whose_checkpoint_is_over_the_disk_budget_ends_the_run_stopped(run_and_token, alice, settings,
                                                                              tmp_path):
    """What the trainer reports when a stop's final checkpoint alone is over trainer.disk_budget_gb
    (trainer.resume.save_run with `final`, run here on the run's folder): the checkpoint, a warning
    naming the budget, then the step's metrics and "stopped". The stopping run ends stopped, not
    failed, with that checkpoint recorded, so it can be resumed; the warning is stored as a log event."""
    from trainer.config import Config, apply_overrides
    from trainer.resume import save_run

    from rlstudio.runs.launch import run_dir
    from rlstudio.runs.selectors import run_header_context

    settings.RUNS_DIR = str(tmp_path / "runs")
    run, token = run_and_token
    for to in ("submitting", "running", "stopping"):
        run_transition(run=run, to=to)
    sent = []

    class Group:
        def call(self, method, *, path, critic_path):
            (Path(path) / "shard.distcp").write_bytes(b"\0" * 4096)

    class Loader:
        def state_dict(self):
            return {"epoch": 0, "position": 1}

    class Emitter:
        def checkpoint(self, step, path):
            sent.append({"type": "checkpoint", "data": {"step": step, "path": path}})

        def log(self, level, message):
            sent.append({"type": "log", "data": {"level": level, "message": message}})

    folder = run_dir(run.pk)
    folder.mkdir(parents=True)
    cfg = apply_overrides(Config(), {"trainer.disk_budget_gb": 1e-6})
    save_run(folder, 3, group=Group(), loader=Loader(), trainer_state={"epoch": 0, "seq": 0}, cfg=cfg,
             emitter=Emitter(), final=True)
    sent += [{"type": "metrics", "data": {"step": 3, "metrics": {"critic/score/mean": 0.5}}},
             {"type": "status", "data": {"state": "stopped", "message": "stopped by SIGTERM after a checkpoint",
                                         "step": 3, "total_steps": 10}}]
    events = [{"seq": i, "time": T0 + i, **e} for i, e in enumerate(sent, start=1)]
    assert [e["type"] for e in events] == ["checkpoint", "log", "metrics", "status"]
    assert post(run.pk, token, events).json()["accepted"] == 4
    run.refresh_from_db()
    assert run.status == "stopped" and run.error == ""
    assert run.checkpoint_path == str(folder / "global_step_3") and run.step == 3
    assert run_header_context(run=run, user=alice)["can_resume"]
    warning = RunEvent.objects.get(run=run, type="log").data
    assert warning["level"] == "warning" and "disk budget of 1e-06 GB (trainer.disk_budget_gb" in warning["message"]


def test_retention_per_step_and_every_kth(run_and_token):
    run, token = run_and_token
    retention_set(run=run, mode="per_step", k=2, by=None)
    post(run.pk, token, [sample_event(i, step=1, index=i) for i in range(1, 4)])
    post(run.pk, token, [sample_event(i, step=1, index=i) for i in range(4, 6)])
    assert Sample.objects.filter(run=run).count() == 2
    assert RunEvent.objects.filter(run=run, type="sample").count() == 5  # summaries all kept
    retention_set(run=run, mode="every_kth_step", k=3, by=None)
    post(run.pk, token, [sample_event(10 + s, step=s) for s in range(2, 8)])
    assert sorted(Sample.objects.filter(run=run, step__gt=1).values_list("step", flat=True)) == [3, 6]
    dumped = sum(len(p.read_text().splitlines()) for p in rollout_dir(run.pk).glob("*.jsonl"))
    assert dumped == 11  # the files keep every sample
    with pytest.raises(ValueError):
        retention_set(run=run, mode="per_step", k=0, by=None)


def test_throughput_5000_events_one_request(run_and_token):
    run, token = run_and_token
    batch = [metrics_event(i, i, **{"critic/score/mean": 0.5, "actor/pg_loss": -0.1}) for i in range(1, 5001)]
    assert post(run.pk, token, batch, gz=True).json()["accepted"] == 5000  # speed: bench, not here
    assert RunEvent.objects.filter(run=run).count() == 5000 and MetricRow.objects.filter(run=run).count() == 5000


@pytest.mark.parametrize("where", ["metric", "time"])
def test_an_int_past_a_floats_range_is_refused_not_a_500(run_and_token, where):
    """A JSON integer of 400 digits is an int in Python, which `math.isfinite` cannot take (OverflowError:
    it converts to a float): the event is refused with its reason and the rest of the batch is stored."""
    run, token = run_and_token
    huge = metrics_event(1, 1, **{"critic/score/mean": 0.5})
    if where == "metric":
        huge["data"]["metrics"]["critic/score/mean"] = 10**400
    else:
        huge["time"] = 10**400
    raw = json.dumps({"events": [huge, metrics_event(2, 2, **{"critic/score/mean": 0.6})]}).encode()
    resp = post(run.pk, token, None, raw=raw)
    assert resp.status_code == 200 and resp.json()["accepted"] == 1, resp.content[:300]
    (refusal,) = resp.json()["refused"]
    assert refusal["seq"] == 1 and "finite number" in refusal["reason"]
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [2]
