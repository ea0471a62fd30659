"""Ingest cost shape: the SQL queries of one batch are bounded and do not grow with its size.

(Speed itself is measured by bench/live.py, not asserted here: these are correctness properties of
the bulk paths — one statement per table per batch — and of the fast validation paths, which must
give exactly what the slow ones give.)
"""
import math

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from rlstudio.runs.services import run_create
from rlstudio.telemetry.models import MemoryPoint, MetricRow, RunEvent, RunIngestCount, Sample
from rlstudio.telemetry.services import events_ingest, retention_set, wire_form
from trainer.events.schema import EventError
from trainer.events.wire import validate_event

pytestmark = pytest.mark.django_db
T0 = 1_764_440_000.0


@pytest.fixture(autouse=True)
def _rollout_dir(settings, tmp_path):
    settings.RLSTUDIO_ROLLOUT_DIR = str(tmp_path / "runs")


def sample(seq, step, *, tokens=8, ref=None):
    return {"seq": seq, "type": "sample", "time": T0 + seq, "data": {
        "step": step, "uid": f"p{seq % 3}", "index": seq % 4, "reward": 1, "advantage": -0.5,
        "response_length": tokens, "num_turns": 1, "finish_reason": "stop",
        "messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "#### 5"}],
        "token_view": {"ids": list(range(tokens)), "pieces": ["a"] * tokens, "loss_mask": [1] * tokens,
                       "logprobs": [-0.25] * tokens, "ref_logprobs": ref, "advantages": [-0.5] * tokens}}}


def mixed_batch(start, n):
    """n events of each kind that touches a table (metrics, sample, memory) plus heartbeat/log/checkpoint."""
    out, seq = [], start
    for i in range(n):
        step = start + i
        out += [
            {"seq": seq, "type": "metrics", "time": T0 + seq, "data": {"step": step, "metrics": {"a": 1.0, "b": 2}}},
            sample(seq + 1, step),
            {"seq": seq + 2, "type": "memory", "time": T0 + seq, "data": {"step": step, "phase": "rollout",
                                                                         "device": "cpu", "rss": 1000 + i}},
            {"seq": seq + 3, "type": "heartbeat", "time": T0 + seq, "data": {"step": step}},
            {"seq": seq + 4, "type": "log", "time": T0 + seq, "data": {"level": "info", "message": f"m{i}"}},
            {"seq": seq + 5, "type": "checkpoint", "time": T0 + seq, "data": {"step": step, "path": f"/c/{i}"}},
        ]
        seq += 6
    return out


def _count(run, events):
    with CaptureQueriesContext(connection) as ctx, TestCase.captureOnCommitCallbacks(execute=True):
        result = events_ingest(run=run, raw_events=events)
    assert result.accepted == len(events) and not result.refused
    return len(ctx.captured_queries)


@pytest.mark.parametrize("retention", [None, ("per_step", 2), ("every_kth_step", 2)])
def test_queries_per_batch_bounded_and_independent_of_size(alice, make_dataset, make_model, retention,
                                                          monkeypatch):
    # The alerts hook looks a run's rules up once per RULES_CACHE_S (2 s) per process: held for the test.
    monkeypatch.setattr("rlstudio.alerts.services.evaluation.RULES_CACHE_S", 3600.0)
    run, _ = run_create(owner=alice, name="shape", dataset=make_dataset(alice), model=make_model(alice),
                        config={}, gpus=0)
    if retention:
        retention_set(run=run, mode=retention[0], k=retention[1], by=None)
    # A run's first batch also creates its ingest counter row (ingest_caps.counts_lock) and looks up the
    # run's alert rules: two queries more.
    first = _count(run, mixed_batch(5000, 1))
    small = _count(run, mixed_batch(1, 3))
    large = _count(run, mixed_batch(1000, 120))  # 720 events
    assert small == large == first - 2 <= 12, (first, small, large)
    assert RunEvent.objects.filter(run=run).count() == 6 * 124
    assert MetricRow.objects.filter(run=run).count() == MemoryPoint.objects.filter(run=run).count() == 124
    assert Sample.objects.filter(run=run).count() == (124 if retention is None else 62 if retention[0] == "every_kth_step" else 124)
    counts = RunIngestCount.objects.get(run=run)  # the caps' counters agree with the tables
    assert (counts.events, counts.samples, counts.metric_rows) == (6 * 124, 124, 124)
    # A resent batch stores nothing and costs no more queries than a new one.
    with CaptureQueriesContext(connection) as ctx:
        again = events_ingest(run=run, raw_events=mixed_batch(1000, 120))
    assert again.accepted == 0 and again.duplicates == 720 and len(ctx.captured_queries) <= large


def test_wire_form_is_to_dict():
    events = mixed_batch(1, 1) + [
        sample(50, 1, ref=[None, -0.5, -1.0, 0.0, -2.0, -3.0, -4.0, -5.0]),
        {**sample(51, 1), "data": {**sample(51, 1)["data"], "token_view": None, "validation": True,
                                   "reward_extra": {"acc": 1}, "ground_truth": "5", "data_source": "gsm8k"}},
        {"seq": 52, "type": "status", "time": T0, "data": {"state": "running", "total_steps": 4}},
    ]
    for raw in events:
        ev = validate_event(raw)
        assert wire_form(ev) == ev.to_dict()


@pytest.mark.parametrize("path,value,reason", [
    (("token_view", "ids"), [0, -1], "event 7: field data.token_view.ids[1] must be an int >= 0"),
    (("token_view", "ids"), [0, True], "event 7: field data.token_view.ids[1] must be an int >= 0"),
    (("token_view", "pieces"), ["a", 3], "event 7: field data.token_view.pieces[1] must be a string"),
    (("token_view", "loss_mask"), [1, True], "event 7: field data.token_view.loss_mask[1] must be 0 or 1"),
    (("token_view", "loss_mask"), [1, 1.0], None),  # 1.0 == 1 passed before: still does
    (("token_view", "logprobs"), [-1.0, math.nan], "event 7: field data.token_view.logprobs[1] must be a finite number or null"),
    (("token_view", "advantages"), [None, math.inf], "event 7: field data.token_view.advantages[1] must be a finite number or null"),
    (("token_view", "ref_logprobs"), [1e308, 1e308], None),  # the sum overflows: slow path, still valid
    (("token_view", "logprobs"), [None, 2], None),  # ints and nulls are fine
])
def test_fast_validation_paths_keep_the_reasons(path, value, reason):
    raw = sample(7, 1, tokens=2)
    raw["data"]["token_view"][path[1]] = value
    if reason is None:
        assert validate_event(raw).data.token_view.ids == [0, 1]
        return
    with pytest.raises(EventError) as exc:
        validate_event(raw)
    assert exc.value.reason == reason


def test_fast_metric_path_keeps_values_and_reasons():
    ok = validate_event({"seq": 1, "type": "metrics", "time": T0, "data": {"step": 1, "metrics": {"a": 1, "b": None, "c": 0.5}}})
    assert ok.data.metrics == {"a": 1.0, "b": None, "c": 0.5} and type(ok.data.metrics["a"]) is float
    for bad in (math.nan, True, "1"):
        with pytest.raises(EventError) as exc:
            validate_event({"seq": 1, "type": "metrics", "time": T0, "data": {"step": 1, "metrics": {"x": bad}}})
        assert exc.value.reason == "event 1: field data.metrics['x'] must be a finite number"


@pytest.mark.parametrize("metrics,reason", [
    ({"a": 0.5, "b": None, "c": -1e-9}, None),  # the whole-dict fast path
    ({}, None),
    ({"a": 1e308, "b": 1e308}, None),  # the sum overflows: slow path, still valid
    ({"a": 0.5, "b": math.inf}, "event 1: field data.metrics['b'] must be a finite number"),
    ({"a": 0.5, "": 1.0}, "event 1: field data.metrics names must be non-empty strings of at most 200 characters"),
    ({"a": 0.5, "n" * 201: 1.0}, "event 1: field data.metrics names must be non-empty strings of at most 200 characters"),
    ({"a": 0.5, "b": False}, "event 1: field data.metrics['b'] must be a finite number"),
])
def test_whole_dict_metric_check_gives_the_walks_result(metrics, reason):
    raw = {"seq": 1, "type": "metrics", "time": T0, "data": {"step": 1, "metrics": metrics}}
    if reason is None:
        assert validate_event(raw).data.metrics == metrics
        return
    with pytest.raises(EventError) as exc:
        validate_event(raw)
    assert exc.value.reason == reason


def test_event_keys_checked_on_any_mapping():
    from types import MappingProxyType

    raw = {"seq": 1, "type": "heartbeat", "time": T0, "data": MappingProxyType({"step": 2})}
    assert validate_event(MappingProxyType(raw)).data.step == 2
    with pytest.raises(EventError) as exc:
        validate_event({**raw, "extra": 1})
    assert exc.value.reason == "event 1: field extra is not allowed (an event has seq, type, time, data)"
    with pytest.raises(EventError) as exc:
        validate_event({**raw, "data": {"step": 2, "bogus": 1}})
    assert exc.value.reason == "event 1: field data.bogus is not a field of a heartbeat event (step)"


@pytest.mark.parametrize("extra,ok", [
    ({}, True),  # role and content: plain JSON as it is, not encoded
    ({"name": None, "n": 3, "flag": True}, True),
    ({"score": 0.5}, True),  # a float: checked by encoding
    ({"score": math.nan}, False),
    ({"meta": {"x": math.inf}}, False),
])
def test_message_check_skips_only_plain_messages(extra, ok):
    raw = sample(7, 1, tokens=2)
    raw["data"]["messages"][0].update(extra)
    if ok:
        assert validate_event(raw).data.messages[0] == raw["data"]["messages"][0]
        return
    with pytest.raises(EventError) as exc:
        validate_event(raw)
    assert exc.value.reason.startswith("event 7: field data.messages[0] must be plain JSON with finite numbers")
