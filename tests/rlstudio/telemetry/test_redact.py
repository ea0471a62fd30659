"""`redact.event_for_viewer`: a run's events as a reader sees them (no server paths), unchanged for
its owner and staff; and the check that lets a pre-encoded frame go to a reader as it is."""
import pytest

from rlstudio.runs.failure import PATH_MARK
from rlstudio.telemetry import codec
from rlstudio.telemetry.broadcast import run_events_message
from rlstudio.telemetry.redact import event_for_viewer, frame_may_hold_redacted

FOLDER = "/srv/rlstudio/runs/12"
TRACEBACK = ('Traceback (most recent call last):\n  File "/opt/rlstudio/trainer/run.py", line 151, in run\n'
             f"FileNotFoundError: {FOLDER}/train.parquet\n")
CHECKPOINT = {"seq": 5, "type": "checkpoint", "time": 1.0, "data": {"step": 2, "path": f"{FOLDER}/global_step_2"}}
FAILED = {"seq": 6, "type": "status", "time": 2.0,
          "data": {"state": "failed", "message": TRACEBACK, "step": 2, "total_steps": 10}}
STARTING = {"seq": 1, "type": "status", "time": 0.5, "data": {"state": "starting", "message": "loading /models/qwen",
                                                              "step": 0, "total_steps": 0}}
LOG = {"seq": 7, "type": "log", "time": 3.0, "data": {"level": "info", "message": f"resumed from {FOLDER}/global_step_2"}}
METRICS = {"seq": 8, "type": "metrics", "time": 4.0, "data": {"step": 3, "metrics": {"critic/score/mean": 0.5}}}


def test_a_reader_gets_no_server_path():
    assert event_for_viewer(CHECKPOINT, manager=False) == {**CHECKPOINT, "data": {"step": 2, "path": ""}}
    assert event_for_viewer(FAILED, manager=False)["data"] == {**FAILED["data"],
                                                                "message": f"FileNotFoundError: {PATH_MARK}"}
    assert event_for_viewer(STARTING, manager=False)["data"]["message"] == f"loading {PATH_MARK}"
    assert event_for_viewer(LOG, manager=False)["data"] == {"level": "info", "message": f"resumed from {PATH_MARK}"}
    assert event_for_viewer(METRICS, manager=False) is METRICS
    assert CHECKPOINT["data"]["path"] == f"{FOLDER}/global_step_2"  # a copy: the stored event is unchanged


@pytest.mark.parametrize("event", [CHECKPOINT, FAILED, STARTING, LOG, METRICS])
def test_the_owner_and_staff_get_the_event_as_stored(event):
    assert event_for_viewer(event, manager=True) is event


@pytest.mark.parametrize("event", [
    {"seq": 1, "type": "checkpoint", "data": None}, {"seq": 2, "type": "log", "data": {"line": "x"}},
    {"seq": 3, "type": "status", "data": {"status": "running"}}, "not an event", {"type": "checkpoint"},
])
def test_an_event_of_another_shape_passes_as_it_is(event):
    assert event_for_viewer(event, manager=False) == event


def test_only_a_frame_holding_an_event_to_redact_is_decoded_for_a_reader():
    assert not frame_may_hold_redacted(run_events_message([METRICS])["frame"])
    for event in (CHECKPOINT, FAILED, LOG):
        assert frame_may_hold_redacted(run_events_message([METRICS, event])["frame"]), event["type"]
    # a sample's text that merely quotes such an event is escaped inside its string: no false alarm needed
    quoting = {"seq": 9, "type": "metrics", "data": {"step": 1, "note": codec.dumps(CHECKPOINT)}}
    assert '\\"type\\":\\"checkpoint\\"' in run_events_message([quoting])["frame"]
    assert not frame_may_hold_redacted(run_events_message([quoting])["frame"])
    assert frame_may_hold_redacted('{"events": [{"type" : "checkpoint"}]}')  # any spacing
