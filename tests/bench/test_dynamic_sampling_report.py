"""bench/dynamic_sampling.py's counting: samples generated per useful sample, time per useful step."""
from __future__ import annotations

import math

from bench.dynamic_sampling import reading, render, summarize


def _step(step, seconds, **extra):
    return {"type": "metrics", "data": {"step": step, "metrics": {"timing_s/step": seconds, "timing_s/gen": seconds / 2,
                                                                   "critic/score/mean": 0.5, **extra}}}


def _sample(step, uid, std, validation=False):
    return {"type": "sample", "data": {"step": step, "uid": uid, "group_std": std, "validation": validation}}


def test_grpo_counts_useful_groups_from_the_samples():
    # 2 steps of 4 groups x 2 samples; step 1 has 3 useful groups, step 2 has 1 (None std = flat)
    events = [_step(1, 2.0), _sample(1, "a", 0.5), _sample(1, "a", 0.5), _sample(1, "b", 0.7),
              _sample(1, "c", 0.1), _sample(1, "d", 0.0), _step(2, 4.0), _sample(2, "e", 0.3),
              _sample(2, "f", None), _sample(2, "v", 0.9, validation=True), {"type": "log", "data": {}}]
    r = summarize(events, train_batch_size=4, n=2)
    assert r["steps"] == 2 and r["s_per_step"] == 3.0 and r["gen_s_per_step"] == 1.5
    assert r["samples_per_step"] == 8 and r["gen_batches_per_step"] == 1
    assert r["useful_groups_per_step"] == 2.0
    assert r["samples_per_useful_sample"] == 8 / 4  # 8 groups generated, 4 useful
    assert r["s_per_useful_step"] == 6.0 / (4 / 4)


def test_dapo_counts_the_groups_it_generated():
    events = [_step(1, 9.0, **{"train/num_groups_generated": 12, "train/num_gen_batches": 3,
                               "train/num_groups_filled": 0}),
              _step(2, 9.0, **{"train/num_groups_generated": 12, "train/num_gen_batches": 3,
                               "train/num_groups_filled": 1})]
    events += [_sample(s, f"{s}{u}", 0.4) for s in (1, 2) for u in "abcd"]
    r = summarize(events, train_batch_size=4, n=2)
    assert r["samples_per_step"] == 24 and r["gen_batches_per_step"] == 3 and r["steps_filled"] == 1
    assert r["samples_per_useful_sample"] == 3.0 and r["s_per_useful_step"] == 9.0


def test_no_useful_group_is_infinite_and_the_report_renders():
    r = summarize([_step(1, 1.0), _sample(1, "a", 0.0)], train_batch_size=1, n=1)
    assert math.isinf(r["s_per_useful_step"])
    g = summarize([_step(1, 2.0), _sample(1, "a", 1.0)], train_batch_size=2, n=1)
    d = summarize([_step(1, 3.0, **{"train/num_groups_generated": 4, "train/num_gen_batches": 2}),
                   _sample(1, "a", 1.0), _sample(1, "b", 1.0)], train_batch_size=2, n=1)
    text = reading({"GRPO": g, "DAPO": d})
    assert "2.00x the samples" in text and "3.00 s against GRPO's 4.00 s (0.75x)" in text
    out = render({"command": "c", "machine": "m", "threads": 1, "steps": 1, "warm": "w",
                  "runs": {"GRPO": g, "DAPO": d}, "reading": text})
    assert out.startswith("<!-- bench:dynamic_sampling:begin -->") and "| DAPO | 3.00 |" in out
