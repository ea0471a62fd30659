"""SIGTERM mid-run: the trainer (a real subprocess) finishes the step, checkpoints, reports stopped,
exits 0; a failing run reports failed with the traceback and exits non-zero."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _events(path: Path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return out


def _cmd(tmp_path, model, data, *extra):
    return [sys.executable, "-m", "trainer", "run", "--recipe", "cpu_smoke", f"data.train_files={data}",
            f"actor_rollout_ref.model.path={model}", "trainer.total_training_steps=30", "trainer.save_freq=-1",
            "trainer.logger=[jsonl]", *extra, "--output", str(tmp_path / "out")]


def test_sigterm_after_first_step_checkpoints_and_stops(tmp_path, tiny_model_dir, demo_data_dir):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(_cmd(tmp_path, tiny_model_dir, demo_data_dir / "train.jsonl"), cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    events = tmp_path / "out" / "events.jsonl"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if any(e["type"] == "metrics" for e in _events(events)):
                break
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            time.sleep(0.2)
        else:
            raise AssertionError("no metrics event within 120 s")
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        assert time.time() - sent < 60
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, proc.stdout.read().decode()[-3000:]
    ev = _events(events)
    status = [e["data"] for e in ev if e["type"] == "status"]
    assert status[-1]["state"] == "stopped" and "SIGTERM" in status[-1]["message"]
    step = status[-1]["step"]
    assert 1 <= step < 30
    marker = tmp_path / "out" / "latest_checkpointed_iteration.txt"
    assert marker.read_text() == str(step)
    assert (tmp_path / "out" / f"global_step_{step}" / "actor" / ".metadata").exists()
    assert [e["data"]["step"] for e in ev if e["type"] == "checkpoint"] == [step]
    assert [e["seq"] for e in ev] == list(range(1, len(ev) + 1))


def test_failure_reports_failed_and_exits_nonzero(tmp_path, tiny_model_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "no prompt column"}) + "\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    res = subprocess.run(_cmd(tmp_path, tiny_model_dir, bad), cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert res.returncode == 1
    ev = _events(tmp_path / "out" / "events.jsonl")
    last = [e["data"] for e in ev if e["type"] == "status"][-1]
    assert last["state"] == "failed" and "DataError" in last["message"] and "Traceback" in last["message"]
