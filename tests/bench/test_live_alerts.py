"""bench/live_alerts.py's pure parts: the rules it puts on a run are valid and quiet on its workload,
and the section it writes says met or missed from the figures."""
from __future__ import annotations

from bench import live_alerts
from bench.live import small_ev
from rlstudio.alerts import rules as R


def test_the_bench_rules_are_ten_valid_ones_that_stay_quiet_on_its_workload():
    specs = []
    for i, data in enumerate(live_alerts.RULES, 1):
        metric, threshold, window, op = R.clean_rule(kind=data["kind"], metric=data.get("metric"),
                                                     threshold=data.get("threshold"), window=data.get("window"),
                                                     op=data.get("op"))
        specs.append(R.RuleSpec(id=i, kind=data["kind"], metric=metric, threshold=threshold, window=window, op=op))
    assert len(specs) == 10
    state: dict = {}
    events = [(s, small_ev(s)["data"]["metrics"]) for s in range(4, 4 * 200, 4)]
    assert R.evaluate(specs, state, events) == []
    assert len(state["h"]) == 9  # every rule but the pattern one reads a metric the workload carries


def _out(added: float, worst_ms: float) -> dict:
    return {"command": "bench/live.py --only alerts",
            "machine": {"cpus": 2, "cpu": "x", "python": "3.11", "load_1min_at_start": 1.0},
            "alerts": {"overhead": {"rate_events_per_s": 5000, "metrics_events_per_s": 1250, "seconds": 10.0,
                                    "rules_per_run": 10, "repeats": 3, "daphne_cores_without": 0.2,
                                    "daphne_cores_with": 0.2 * (1 + added / 100), "added_percent": added,
                                    "each_without": [0.2] * 3, "each_with": [0.21] * 3,
                                    "achieved_events_per_s": 4990, "late_posts": 0},
                       "evaluate": {"us_per_metrics_event": 5.0, "cpu_share_at_1250_per_s": 0.6},
                       "latency": {"firings": 30, "latency_ms_p50": 20.0, "latency_ms_p99": 50.0,
                                   "latency_ms_max": worst_ms}}}


def test_render_says_met_or_missed():
    text = live_alerts.render(_out(3.0, 80.0))
    assert text.startswith(live_alerts.BEGIN) and text.endswith(live_alerts.END)
    assert "**+3.0%**" in text and "| met |" in text and "**missed**" not in text
    text = live_alerts.render(_out(7.5, 1500.0))
    assert text.count("**missed**") == 2
