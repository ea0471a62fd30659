"""codec.gc_paused: no cyclic GC inside, the collector's state back as it was after the last of the
overlapping blocks (threads included), and an ingest request, refused or not, leaves it enabled."""
from __future__ import annotations

import gc
import threading

import pytest

from rlstudio.telemetry import codec

from .test_ingest import metrics_event, post, run_and_token  # noqa: F401 - the fixture


@pytest.fixture(autouse=True)
def _gc_back_on():
    yield
    gc.enable()


def test_paused_inside_and_enabled_after_even_on_error():
    assert gc.isenabled()
    with codec.gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), codec.gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_overlapping_blocks_in_two_threads_enable_only_after_the_last():
    a_in, a_out, b_in, b_out = (threading.Event() for _ in range(4))
    seen = {}

    def block(entered, leave, name):
        with codec.gc_paused():
            entered.set()
            leave.wait(10)
        seen[name] = gc.isenabled()

    ta = threading.Thread(target=block, args=(a_in, a_out, "a"))
    tb = threading.Thread(target=block, args=(b_in, b_out, "b"))
    ta.start()
    assert a_in.wait(10)
    tb.start()
    assert b_in.wait(10)
    a_out.set()
    ta.join(10)
    assert seen["a"] is False and not gc.isenabled()  # b is still inside
    b_out.set()
    tb.join(10)
    assert seen["b"] is True and gc.isenabled()


def test_a_collector_disabled_before_stays_disabled():
    gc.disable()
    with codec.gc_paused():
        pass
    assert not gc.isenabled()


@pytest.mark.django_db
def test_ingest_requests_leave_the_collector_enabled(run_and_token):  # noqa: F811 - the fixture
    run, token = run_and_token
    assert post(run.pk, token, [metrics_event(1, 1, x=1.0)]).json()["accepted"] == 1
    assert gc.isenabled()
    assert post(run.pk, token, [], raw=b"{not json").status_code == 400
    assert gc.isenabled()
