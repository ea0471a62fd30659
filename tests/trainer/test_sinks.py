"""trainer.sinks / trainer.memory: numbering, validation, resume of seq, console line, registry, trackers."""
from __future__ import annotations

import importlib.util
import io
import json
import time

import pytest
import torch

from trainer.events.schema import EventError
from trainer.memory import MemoryMonitor, read_memory
from trainer.sinks import ConsoleSink, Emitter, build_sinks, last_seq, register_sink, Sink


def test_jsonl_numbering_continues_after_restart_and_skips_torn_line(tmp_path):
    em = Emitter(build_sinks([], out_dir=tmp_path))
    em.status("starting")
    em.metrics(1, {"critic/score/mean": 0.5})
    em.close()
    path = tmp_path / "events.jsonl"
    with open(path, "a") as fh:
        fh.write('{"seq": 3, "type": "log", "da')  # a process killed mid-write
    assert last_seq(path) == 2
    em2 = Emitter(build_sinks(["jsonl"], out_dir=tmp_path), start_seq=last_seq(path))
    em2.log("info", "again")
    em2.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["seq"] == 1 and json.loads(lines[1])["data"]["metrics"] == {"critic/score/mean": 0.5}
    assert lines[-1].endswith('"message":"again"}}')
    assert last_seq(path) == 3
    assert last_seq(tmp_path / "none.jsonl") == 0


def test_invalid_event_is_rejected_and_not_numbered(tmp_path):
    em = Emitter(build_sinks([], out_dir=tmp_path))
    with pytest.raises(EventError):
        em.status("exploded")
    em.log("info", "ok")
    assert json.loads((tmp_path / "events.jsonl").read_text())["seq"] == 1


def test_console_progress_line():
    buf = io.StringIO()
    sink = ConsoleSink(stream=buf)
    em = Emitter([sink])
    em.status("running", step=0, total_steps=4)
    em.metrics(2, {"critic/score/mean": 0.25, "actor/pg_loss": -0.1, "val-core/arith/reward/mean@1": 1.0})
    out = buf.getvalue().splitlines()
    assert out[0].startswith("[status] running")
    assert "##########.........." in out[1] and "step 2/4" in out[1] and "score 0.25" in out[1]
    assert "val-core/arith/reward/mean@1 1" in out[1]


def test_console_names_verls_turn_count_as_the_metric():
    """num_turns/mean is verl's count (prompt + generations + tool rounds: 2 for one answer); the
    samples page counts assistant turns (1). The line names the metric, not a bare "turns"."""
    buf = io.StringIO()
    em = Emitter([ConsoleSink(stream=buf)])
    em.status("running", step=0, total_steps=2)
    em.metrics(1, {"num_turns/mean": 2.0})
    line = buf.getvalue().splitlines()[1]
    assert "num_turns/mean 2" in line
    assert " turns 2" not in line.replace("num_turns/mean", "")


def test_registry_unknown_and_missing_tracker(tmp_path):
    with pytest.raises(ValueError, match="unknown sink 'nope'"):
        build_sinks(["nope"], out_dir=tmp_path)
    got = []

    @register_sink("test_memory_sink")
    class MemorySink(Sink):
        def __init__(self, *, out_dir, config=None):
            pass

        def write(self, event):
            got.append(event)

    em = Emitter(build_sinks(["test_memory_sink"], out_dir=tmp_path))
    em.heartbeat(3)
    assert got[0]["type"] == "heartbeat" and got[0]["seq"] == 1
    for name, module in (("wandb", "wandb"), ("mlflow", "mlflow")):
        if importlib.util.find_spec(module) is None:
            with pytest.raises(RuntimeError, match=f"{name!r} but"):
                build_sinks([name], out_dir=tmp_path)


def test_memory_monitor_phases_and_heartbeats(tmp_path):
    got = []

    class ListSink(Sink):
        def write(self, event):
            got.append(event)

    em = Emitter([ListSink()])
    mon = MemoryMonitor(em, device="cpu", memory_interval_s=0.05, heartbeat_interval_s=0.1)
    mon.step = 4
    mon.start()
    with mon.phase("rollout"):
        time.sleep(0.35)
    mon.stop()
    with pytest.raises(ValueError):
        with mon.phase("lunch"):
            pass
    mem = [e["data"] for e in got if e["type"] == "memory"]
    assert mem[0]["phase"] == "rollout" and mem[0]["step"] == 4 and mem[0]["device"] == "cpu"
    assert len(mem) >= 3 and all(m["rss"] > 10_000_000 for m in mem)
    assert sum(e["type"] == "heartbeat" for e in got) >= 2
    assert [e["seq"] for e in got] == list(range(1, len(got) + 1))
    assert read_memory("cpu")["allocated"] == 0
    assert read_memory("cpu")["device_used"] == 0 and all(m["device_used"] == 0 for m in mem)


def test_nvml_reading_is_none_off_cuda_and_a_failure_is_remembered_with_its_reason():
    from trainer import memory

    assert memory.nvml_used_bytes("cpu") is None and memory.nvml_unavailable("cpu") is None
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: tests/trainer/parallel/test_parallel_gpu.py reads NVML for real")
    # No CUDA here: torch's NVML query fails; the reason is kept and the reading is 0, not an error.
    assert memory.nvml_used_bytes("cuda:0") is None
    assert memory.nvml_unavailable("cuda:0")
    assert memory.nvml_used_bytes("cuda:0") is None  # asked once: later samples do not retry


@pytest.mark.parametrize("name,expected", [
    ("gsm8k-grpo_v1.2", "gsm8k-grpo_v1.2"), ("../../etc", "_.._etc"), ("a/b", "a_b"), ("..", "_"), ("", "_"),
    ("x" * 100, "x" * 64),
])
def test_names_become_one_safe_folder_name(name, expected):
    from trainer.sinks import path_part

    assert path_part(name) == expected
    assert "/" not in path_part(name) and not path_part(name).startswith(".")


def test_the_cpu_peak_is_the_processs_high_water_mark_not_its_rss_now():
    """On the CPU `peak` is the most resident memory the process has held, so it stays up after memory
    is given back (it was the RSS of the moment: the timeline's "peak RSS" line hid the RSS line under
    it and fell with it)."""
    before = read_memory("cpu")
    block = bytearray(256 * 2**20)  # 256 MiB, touched so it is resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    held = read_memory("cpu")
    del block
    after = read_memory("cpu")
    assert held["rss"] >= before["rss"] + 200 * 2**20
    # The kernel's high-water mark trails its RSS counters by a few pages (they are synced lazily).
    assert held["peak"] >= held["rss"] and after["peak"] >= held["rss"] - 2**20
    assert after["rss"] < held["rss"] - 200 * 2**20  # given back (a large block is its own mapping)
    assert after["peak"] > after["rss"]
