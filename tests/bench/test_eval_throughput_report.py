"""bench/eval_throughput.py's table: samples/s of each side and the evaluation / trainer ratio."""
from __future__ import annotations

from bench.eval_throughput import BEGIN, END, render


def test_render_gives_each_sides_rate_and_the_ratio():
    res = {"trainer": {"samples": 512, "cpu": 8.0, "wall": 10.0},
           "evaluation": {"samples": 512, "cpu": 6.4, "wall": 12.8, "gen_wall": 6.4, "mean_at_k": 0.25,
                          "pass_at_k": 0.5},
           "machine": "CPU X, 2 cores", "threads": 1, "device": "cpu", "warm": "w", "prompts": 64, "k": 8,
           "max_new_tokens": 96, "repeats": 3, "command": "python bench/eval_throughput.py"}
    text = render(res)
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)
    assert "| 512 | 8.00 | 64.0 | 10.00 | 51.2 |" in text  # trainer: 512 / 8 CPU s, 512 / 10 wall s
    assert "| 512 | 6.40 | 80.0 | 12.80 | 40.0 |" in text
    assert "1.25x on CPU time, 0.78x on wall time" in text
    assert "8 steps of 8 x 8" in text and "mean@8 0.250, pass@8 0.500" in text
