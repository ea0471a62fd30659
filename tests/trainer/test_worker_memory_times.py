"""Worker memory samples are forwarded stamped with the time the worker read them: the live page's
phase bands span the phases as they ran, not the instant the driver forwarded the buffer."""
import time
from types import SimpleNamespace

from trainer.loop import Trainer
from trainer.parallel.worker import BufferEmitter
from trainer.sinks import Emitter, Sink


class ListSink(Sink):
    def __init__(self):
        self.events = []

    def write(self, event):
        self.events.append(event)


def test_forwarded_memory_events_keep_the_workers_read_times():
    buffer = BufferEmitter(rank=1)
    reading = {"step": 3, "device": "cpu", "allocated": 0, "reserved": 0, "peak": 0, "rss": 1}
    for phase in ("rollout", "old_log_prob", "update"):
        buffer.memory({**reading, "phase": phase})
        time.sleep(0.05)
    read_at = [m["time"] for m in buffer._items]
    sink = ListSink()
    trainer = Trainer.__new__(Trainer)  # only the forwarding: no model, no data
    trainer.group = SimpleNamespace(drain_memory=buffer.drain)
    trainer.emitter = Emitter([sink])
    time.sleep(0.2)
    trainer.emit_worker_memory()
    assert [e["data"]["phase"] for e in sink.events] == ["rollout", "old_log_prob", "update"]
    assert [e["time"] for e in sink.events] == read_at  # not the forwarding time
    assert read_at[2] - read_at[0] >= 0.09  # the phases' spans survive
    assert [e["seq"] for e in sink.events] == [1, 2, 3]


def test_an_event_without_a_given_time_is_stamped_now():
    sink = ListSink()
    before = time.time()
    Emitter([sink]).log("info", "x")
    assert before <= sink.events[0]["time"] <= time.time()
