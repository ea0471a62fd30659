"""The rule catalogue's conditions as pure functions: hand-made metric series, what fires and when."""
from __future__ import annotations

import math

import pytest

from rlstudio.alerts import rules as R


def spec(kind: str, rid: int = 1, **kw) -> R.RuleSpec:
    metric, threshold, window, op = R.clean_rule(kind=kind, metric=kw.get("metric"), threshold=kw.get("threshold"),
                                                 window=kw.get("window"), op=kw.get("op"))
    return R.RuleSpec(id=rid, kind=kind, metric=metric, threshold=threshold, window=window, op=op)


def feed(rules, series: dict[str, list], start: int = 1, state=None):
    """Evaluate one metrics event per step built from `series` ({metric: [values]}); (triggers, state)."""
    state = {} if state is None else state
    n = max(len(v) for v in series.values())
    events = [(start + i, {k: v[i] for k, v in series.items() if i < len(v) and v[i] is not ...}) for i in range(n)]
    return R.evaluate(rules, state, events), state


def test_entropy_collapse_needs_window_steps_in_a_row_and_fires_once():
    rule = spec("entropy_collapse", threshold=0.05, window=3)
    fired, state = feed([rule], {"actor/entropy": [0.9, 0.04, 0.03, 0.2, 0.04, 0.03, 0.02, 0.01, 0.01]})
    assert [t.step for t in fired] == [7]  # steps 5-7 below 0.05 (2-3 were only two in a row)
    assert fired[0].values["actor/entropy"] == 0.02 and fired[0].values["window"] == [0.04, 0.03, 0.02]
    assert "actor/entropy 0.02 (< 0.05 for 3 steps)" == fired[0].message
    # still below: no second firing; after it recovers and falls again, it fires again
    fired, _ = feed([rule], {"actor/entropy": [0.01, 0.5, 0.01, 0.01, 0.01]}, start=10, state=state)
    assert [t.step for t in fired] == [14]


def test_kl_high_and_clip_fraction_and_length_limit_and_zero_adv_groups():
    rules = [spec("kl_high", 1, threshold=0.1, window=2), spec("clip_frac_high", 2),
             spec("length_limit", 3), spec("zero_adv_groups", 4)]
    fired, _ = feed(rules, {
        "actor/ppo_kl": [0.01, 0.2, 0.3, 0.05, 0.05, 0.05],
        "actor/pg_clipfrac": [0.1, 0.25, 0.3, 0.35, 0.1, 0.1],
        "response_length/clip_ratio": [0.6, 0.6, 0.4, 0.6, 0.6, 0.6],
        "critic/zero_adv_group_ratio": [0.95, 0.95, 0.95, 0.95, 0.95, 0.5],
    })
    assert [(t.kind, t.step) for t in fired] == [("kl_high", 3), ("clip_frac_high", 4), ("zero_adv_groups", 5),
                                                 ("length_limit", 6)]


def test_reward_collapse_compares_three_step_means_with_the_best_in_the_window():
    rule = spec("reward_collapse", threshold=0.3, window=10)
    healthy = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.55, 0.62, 0.58, 0.6]
    fired, state = feed([rule], {"critic/score/mean": healthy})
    assert fired == []
    fired, _ = feed([rule], {"critic/score/mean": [0.3, 0.1, 0.0]}, start=11, state=state)
    # 3-step means: best 0.6 (0.62, 0.58, 0.6); at step 12 (0.6, 0.3, 0.1) = 0.333 (-0.267); step 13: 0.133
    assert [t.step for t in fired] == [13]
    assert fired[0].values["best_mean_3"] == pytest.approx(0.6) and fired[0].values["mean_3"] == pytest.approx(0.4 / 3)


def test_grad_norm_non_finite_fires_at_once_and_a_spike_against_the_median():
    rule = spec("grad_norm_spike", threshold=10.0, window=20)
    fired, state = feed([rule], {"actor/grad_norm": [1.0, None]})
    assert [(t.step, t.message) for t in fired] == [(2, "actor/grad_norm is not finite (NaN or inf)")]
    fired, _ = feed([rule], {"actor/grad_norm": [1.0, 1.2, 0.9, 1.1, 1.0, 9.0, 25.0]}, start=3, state=state)
    assert [t.step for t in fired] == [9]  # 25 > 10 x median 1.05; 9.0 is not
    assert fired[0].values["median"] == pytest.approx(1.0)


def test_throughput_drop_against_the_median_of_the_previous_window():
    rule = spec("throughput_drop", threshold=0.5, window=5)
    fired, _ = feed([rule], {"perf/throughput": [1000, 1100, 900, 1000, 600, 450, 1000]})
    assert [t.step for t in fired] == [6]


def test_reward_hacking_needs_held_out_falling_while_train_rises():
    rule = spec("reward_hacking", threshold=0.05, window=5)
    train = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    val = [..., 0.5, ..., 0.52, ..., 0.45, ..., 0.40]  # validations every other step
    series = {"critic/score/mean": train, "val-core/gsm8k/reward/mean@1": val}
    fired, _ = feed([rule], series)
    assert [t.step for t in fired] == [6]  # best 0.52 at step 4, 0.45 at 6 (drop 0.07) while train rose
    assert fired[0].values["best_heldout"] == 0.52 and fired[0].values["best_step"] == 4
    # the same held-out drop with the train reward falling too is no hacking signal
    falling = {"critic/score/mean": train[::-1], "val-core/gsm8k/reward/mean@1": val}
    assert feed([rule], falling)[0] == []


def test_reward_hacking_reads_the_core_mean_acc_or_reward_not_verls_other_validation_figures():
    """verl's validation reports acc as its core variable when the reward function gives it, beside
    best@k / std figures: the rule's default pattern reads the core mean only."""
    rule = spec("reward_hacking", threshold=0.05, window=5)
    assert rule.metric == "val-core/*/*/mean@*"
    train = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    series = {"critic/score/mean": train, "val-core/math/acc/mean@4": [..., 0.5, ..., 0.52, ..., 0.45, ..., 0.4],
              "val-core/math/acc/best@4/mean": [..., 0.9, ..., 0.95, ..., 0.99, ..., 1.0],
              "val-aux/math/reward/mean@4": [..., 0.1, ..., 0.1, ..., 0.9, ..., 0.9]}
    fired, _ = feed([rule], series)
    assert [t.step for t in fired] == [6] and fired[0].values["best_heldout"] == 0.52


def test_a_pattern_is_the_mean_of_the_keys_it_matches():
    assert R.metric_value("val-core/*/reward/mean@*", {"val-core/a/reward/mean@1": 0.2,
                                                      "val-core/b/reward/mean@4": 0.4, "x": 1}) == (True, 0.30000000000000004)
    assert R.metric_value("actor/entropy", {"actor/entropy": None}) == (True, None)
    assert R.metric_value("actor/entropy", {}) == (False, None)


def test_any_metric_against_a_threshold_including_not_finite():
    above = spec("threshold", 1, metric="actor/pg_loss", op=">=", threshold=2.0, window=1)
    nan = spec("threshold", 2, metric="actor/pg_loss", op="not_finite", threshold=0.0)
    fired, _ = feed([above, nan], {"actor/pg_loss": [1.0, 2.0, None, 3.0]})
    assert [(t.rule_id, t.step) for t in fired] == [(1, 2), (2, 3), (1, 4)]


def test_metrics_of_one_step_merged_from_two_events_count_once():
    rule = spec("entropy_collapse", window=2)
    state: dict = {}
    assert R.evaluate([rule], state, [(1, {"actor/entropy": 0.01}), (1, {"actor/entropy": 0.02})]) == []
    assert state["h"]["actor/entropy"] == [[1], [0.02]]
    assert [t.step for t in R.evaluate([rule], state, [(2, {"actor/entropy": 0.01})])] == [2]


def test_history_is_bounded_and_forgotten_when_no_rule_reads_it():
    rule = spec("entropy_collapse", window=3)
    _, state = feed([rule], {"actor/entropy": [1.0] * 100, "other": [1.0] * 100})
    assert len(state["h"]["actor/entropy"][0]) == 3 + R.SMOOTH + 1 and "other" not in state["h"]
    R.evaluate([spec("kl_high", 2)], state, [(101, {"actor/ppo_kl": 0.0})])
    assert set(state["h"]) == {"actor/ppo_kl"}


def test_clean_rule_fills_defaults_and_refuses_bad_fields():
    assert R.clean_rule(kind="kl_high", metric=None, threshold=None, window=None, op=None) == (
        "actor/ppo_kl", 0.1, 2, ">")
    for kw, field in [({"kind": "nope"}, "kind"), ({"kind": "threshold"}, "metric"),
                      ({"kind": "threshold", "metric": "a/b"}, "threshold"),
                      ({"kind": "threshold", "metric": "a/b", "threshold": 1.0, "op": "=="}, "op"),
                      ({"kind": "kl_high", "metric": "../etc; rm"}, "metric"),
                      ({"kind": "kl_high", "threshold": math.nan}, "threshold"),
                      ({"kind": "kl_high", "window": 0}, "window"),
                      ({"kind": "gpu_hours", "threshold": 0}, "threshold"),
                      # A budget nobody chose: the catalogue's 10 GPU-h stopped runs while the page
                      # said the budget "needs its threshold".
                      ({"kind": "gpu_hours"}, "threshold")]:
        args = {"metric": None, "threshold": None, "window": None, "op": None, **kw}
        with pytest.raises(R.RuleInvalid) as err:
            R.clean_rule(**args)
        assert err.value.field == field, kw
    assert R.clean_rule(kind="no_heartbeat", metric="x", threshold=None, window=None, op=None)[0] == ""
    assert R.clean_rule(kind="threshold", metric="a/b", threshold=None, window=None, op="not_finite") == (
        "a/b", 0.0, 1, "not_finite")


def test_budget_levels_and_heartbeat_silence():
    assert R.budget_level(used=7.9, cap=10) == "" and R.budget_level(used=8, cap=10) == "warn"
    assert R.budget_level(used=10, cap=10) == "stop" and R.budget_level(used=0, cap=0) == "stop"
    assert R.heartbeat_silent(seconds_since=61, threshold_s=60) and not R.heartbeat_silent(seconds_since=None,
                                                                                              threshold_s=60)


def test_effective_rules_own_replace_defaults_and_disabled_mutes():
    class Rule:
        def __init__(self, kind, metric, enabled=True, name=""):
            self.kind, self.metric, self.enabled, self.name = kind, metric, enabled, name

    defaults = [Rule("kl_high", "actor/ppo_kl", name="d1"), Rule("entropy_collapse", "actor/entropy", name="d2"),
                Rule("threshold", "x", name="d3")]
    own = [Rule("kl_high", "actor/ppo_kl", name="o1"), Rule("entropy_collapse", "actor/entropy", False, "o2")]
    got = R.effective_rules(defaults=defaults, own=own, key=lambda r: (r.kind, r.metric))
    assert [r.name for r in got] == ["o1", "d3"]
