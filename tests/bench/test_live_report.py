"""bench/live.py's report: with --repeat, the table shows the median-p99 run and a row per run."""
from __future__ import annotations

from bench.live import median_run, render


def _run(p99: float, load: float, small: int) -> dict:
    return {"machine": {"cpus": 2, "cpu": "test cpu", "python": "3.11", "load_1min_at_start": load,
                        "load_1min_at_end": load},
            "command": "bench/live.py --repeat 3",
            "ingest": [{"workload": "small", "senders": 1, "events": 1000, "batch": 500, "viewers": 5,
                        "bytes_gzip_per_batch": 9000, "ingest_events_per_s": small, "post_ms_median": 50,
                        "server_cpu_ms_per_1000_events": 60, "delivered_events_per_s_per_viewer": small,
                        "all_viewers_got_all": True}],
            "latency": {"rate_events_per_s": 200, "viewers": 100, "sink_linger_s": 0.005, "sink_posts": 300,
                        "seconds": 10.0, "latency_ms_p50": p99 / 3, "latency_ms_p99": p99, "latency_ms_max": p99 + 1,
                        "received": 200000, "expected": 200000, "frames_per_viewer": 300,
                        "server_cpu_ms_per_1000_events": 3900}}


def test_median_run_is_the_middle_p99_and_every_run_is_listed():
    out = median_run([_run(300.0, 1.5, 4000), _run(120.0, 0.4, 9000), _run(150.0, 0.6, 8000)])
    assert out["latency"]["latency_ms_p99"] == 150.0
    assert [r["p99"] for r in out["repeats"]] == [300.0, 120.0, 150.0]
    text = render(out)
    assert "p99 **150.0 ms**" in text and "met" in text
    assert "median p99 of 3 runs" in text
    # one row per run, in the order they ran, with the load each started under
    rows = [line for line in text.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")
            or line.startswith("| 3 |")]
    assert rows[0].startswith("| 1 | 1.5 | 4,000 |") and rows[2].startswith("| 3 | 0.6 | 8,000 |")
    assert "—" in rows[0]  # no samples / concurrent / page figures in these runs


def test_a_single_run_has_no_repeats_table():
    out = median_run([_run(200.0, 0.5, 7000)])
    assert "runs, one after the other" not in render(out)
