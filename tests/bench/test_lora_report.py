"""bench/lora.py's reading of a run's events (mean phase times after the warm-up, the largest RSS per
memory phase) and its table."""
from __future__ import annotations

import pytest

from bench.lora import render, summarize


def _step(step, seconds, update):
    return {"type": "metrics", "data": {"step": step, "metrics": {
        "timing_s/step": seconds, "timing_s/gen": 1.0, "timing_s/ref": 0.5, "timing_s/update_actor": update,
        "actor/grad_norm": 0.1 * step}}}


def _memory(phase, gib):
    return {"type": "memory", "data": {"phase": phase, "rss": int(gib * 2**30)}}


def test_summarize_drops_the_warmup_and_keeps_the_largest_rss_per_phase():
    events = [_memory("sync", 1.0), _step(1, 10.0, 8.0), _memory("update", 2.0), _memory("update", 2.5),
              _memory("rollout", 1.5), _step(2, 4.0, 2.0), _step(3, 6.0, 3.0), {"type": "log", "data": {}}]
    r = summarize(events, warmup=1)
    assert r["steps"] == 2 and r["times"]["step"] == 5.0 and r["times"]["update_actor"] == 2.5
    assert r["times"]["gen"] == 1.0 and r["times"]["reshard"] == 0.0  # a phase a run does not report: 0
    assert r["rss_by_phase"] == pytest.approx({"sync": 1.0, "update": 2.5, "rollout": 1.5})
    assert r["grad_norm"] == pytest.approx([0.2, 0.3])
    with pytest.raises(ValueError, match="no step after"):
        summarize([_step(1, 1.0, 1.0)], warmup=1)


def test_render_compares_the_two_runs():
    def run(peak, step):
        return {"steps": 2, "peak_rss_gib": peak, "rss_by_phase": {"update": peak - 0.1},
                "times": {"step": step, "gen": 1.0, "ref": 0.5, "update_actor": step - 2, "reshard": 0.1},
                "estimate": {"peak_gib": peak / 2, "lines": {"actor weights": 0.4, "reference weights": 0.0}}}

    text = render({"command": "python bench/lora.py", "machine": "cpu", "torch": "2", "peft": "0.21.2",
                   "threads": 1, "rank": 32, "warmup": 1, "model_line": "m", "workload": "w",
                   "full": run(4.0, 10.0), "lora": run(2.0, 5.0)})
    assert text.startswith("<!-- bench:lora:begin -->") and text.rstrip().endswith("<!-- bench:lora:end -->")
    assert "| full fine-tuning | 4.00 | 3.90 | 2.00 | 10.00 |" in text and "| LoRA rank 32 | 2.00 |" in text
    assert "0.50x full fine-tuning's (2.00 GiB less), its step 0.50x the time" in text
    assert "reference weights" not in text  # zero lines are left out of the estimate's list
