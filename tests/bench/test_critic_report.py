"""bench/critic.py's pure parts: per-phase means after the warm-up, the same-batch check, the table."""
from __future__ import annotations

import pytest

from bench.critic import BEGIN, END, PHASES, critic_ratio, render, same_batches, summarize


def _m(step, gen, values=None):
    m = {"timing_s/step": gen + 1.0, "timing_s/gen": gen, "response_length/mean": 10.0 + step,
         "critic/score/mean": 0.5}
    if values is not None:
        m["timing_s/values"] = values
    return m


def test_summarize_skips_the_warmup_and_fills_missing_phases_with_zero():
    s = summarize({1: _m(1, 9.0), 2: _m(2, 1.0, 0.2), 3: _m(3, 3.0, 0.4)}, warmup=1)
    assert s["gen"] == pytest.approx(2.0) and s["step"] == pytest.approx(3.0)
    assert s["values"] == pytest.approx(0.3) and s["update_critic"] == 0.0
    with pytest.raises(RuntimeError):
        summarize({1: _m(1, 1.0)}, warmup=1)


def test_same_batches_compares_every_step():
    a = {1: _m(1, 1.0), 2: _m(2, 1.0)}
    b = {1: _m(1, 5.0), 2: _m(2, 7.0)}
    assert same_batches(a, b)
    b[2] = {**b[2], "critic/score/mean": 0.25}
    assert not same_batches(a, b)
    assert not same_batches(a, {1: _m(1, 1.0)})


def test_render_reports_the_critics_share_and_the_ratio():
    grpo = {p: 0.0 for p in PHASES} | {"gen": 2.0, "update_actor": 1.0, "step": 3.0}
    gae = {p: 0.0 for p in PHASES} | {"gen": 2.0, "update_actor": 1.0, "values": 0.25, "update_critic": 0.75,
                                      "step": 4.0}
    res = {"command": "python bench/critic.py", "machine": "cpu", "torch": "2", "threads": 1, "model": "m",
           "steps": 5, "warmup": 1, "rounds": 1, "same": True, "rounds_data": [{"grpo": grpo, "gae": gae}],
           "median": {"grpo": grpo, "gae": gae}}
    text = render(res)
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)
    assert "costs 1.000 s a step, 25% of the PPO+GAE step" in text and "1.33x GRPO's (+1.000 s)" in text
    assert "| **step** | 3.000 | 4.000 |" in text and "checked: equal" in text
    assert critic_ratio(gae) == 1.0 and "the critic took 1.00x the actor's update (median 1.00)" in text
