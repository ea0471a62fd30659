"""A hung Redis under the channel layer (connection accepted, never answered) does not hold the ingest.

The broadcast after commit gives up after RLSTUDIO_BROADCAST_TIMEOUT_S; the events are stored and the
trainer's POST gets its answer (viewers catch up by replay). A real listening socket that nobody
reads plays the hung server, as in tests/e2e/test_broker_outage.py.
"""
import socket
import time

import pytest
from django.test import override_settings

from rlstudio.telemetry.broadcast import run_events_send
from rlstudio.telemetry.models import RunEvent
from rlstudio.telemetry.services import events_ingest

pytestmark = pytest.mark.django_db


@pytest.fixture
def hung_layer(settings):
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # the kernel completes the handshakes; nobody ever reads or answers
    layer = dict(settings.CHANNEL_LAYERS["default"])
    config = dict(layer["CONFIG"])
    config["hosts"] = [{"address": f"redis://127.0.0.1:{hung.getsockname()[1]}/0", "socket_timeout": 30}]
    layer["CONFIG"] = config
    try:
        with override_settings(CHANNEL_LAYERS={"default": layer}, RLSTUDIO_BROADCAST_TIMEOUT_S=0.5):
            yield
    finally:
        hung.close()


def _ev(seq):
    return {"seq": seq, "type": "heartbeat", "time": time.time(), "data": {"step": seq}}


def test_broadcast_gives_up_after_its_timeout(hung_layer):
    t = time.monotonic()
    with pytest.raises(TimeoutError):
        run_events_send(run_id=1, events=[_ev(1)])
    assert time.monotonic() - t < 5  # not the layer's 30 s socket timeout


def test_ingest_answers_and_stores_while_the_layer_hangs(hung_layer, alice, make_run,
                                                        django_capture_on_commit_callbacks):
    run = make_run(alice, "hung-layer")
    t = time.monotonic()
    with django_capture_on_commit_callbacks(execute=True):
        result = events_ingest(run=run, raw_events=[_ev(1), _ev(2)])
    assert time.monotonic() - t < 5
    assert result.accepted == 2 and not result.refused
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True).order_by("seq")) == [1, 2]
