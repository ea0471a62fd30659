"""verl's validation figures (trainer.val_metrics) against values worked by hand and against a plain
re-implementation of verl's per-subset bootstrap."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.val_metrics import (group_figures, majority_value, sample_variables, subset_sizes,
                                 validation_metrics)


def test_subset_sizes_are_powers_of_two_below_n_then_n():
    assert subset_sizes(1) == [] and subset_sizes(2) == [2] and subset_sizes(5) == [2, 4, 5]
    assert subset_sizes(8) == [2, 4, 8] and subset_sizes(9) == [2, 4, 8, 9]


def test_one_sample_per_prompt_is_the_mean_alone():
    assert group_figures([0.5]) == {"mean@1": 0.5}


def test_group_figures_by_hand_and_as_a_bootstrap():
    values = [0.0, 1.0, 1.0, 0.0]
    out = group_figures(values, seed=0)
    assert out["mean@4"] == 0.5 and out["std@4"] == 0.5  # numpy's population std, as verl's np.std
    assert set(out) == {"mean@4", "std@4", *(f"{w}@{k}/{s}" for w in ("best", "worst") for k in (2, 4)
                                              for s in ("mean", "std"))}
    # best of k draws with replacement from half ones: 1 - 0.5**k in expectation
    assert out["best@2/mean"] == pytest.approx(0.75, abs=0.05) and out["best@4/mean"] == pytest.approx(0.9375, abs=0.03)
    assert out["worst@2/mean"] == pytest.approx(0.25, abs=0.05)
    # constant values: every draw is that value
    assert group_figures([1.0, 1.0, 1.0]) == {"mean@3": 1.0, "std@3": 0.0, "best@2/mean": 1.0, "best@2/std": 0.0,
                                                   "worst@2/mean": 1.0, "worst@2/std": 0.0, "best@3/mean": 1.0,
                                                   "best@3/std": 0.0, "worst@3/mean": 1.0, "worst@3/std": 0.0}


def test_the_bootstrap_agrees_with_verls_one_subset_at_a_time_within_its_noise():
    rng = np.random.RandomState(7)
    values = rng.rand(6).tolist()

    def verl_style(k):  # one subset per draw from a seeded global stream, as verl's bootstrap_metric
        state = np.random.RandomState(42)
        draws = [[values[i] for i in state.choice(len(values), size=k, replace=True)] for _ in range(1000)]
        return np.mean([max(d) for d in draws]), np.mean([min(d) for d in draws])

    out = group_figures(values)
    for k in (2, 4, 6):
        best, worst = verl_style(k)
        assert out[f"best@{k}/mean"] == pytest.approx(best, abs=0.03)
        assert out[f"worst@{k}/mean"] == pytest.approx(worst, abs=0.03)
    assert group_figures(values) == out  # seeded: the same figures every time


def test_majority_vote_takes_the_first_sample_of_the_most_common_answer():
    assert majority_value([0.9, 0.8, 0.7], ["A", "B", "A"]) == 0.9
    assert majority_value([0.1, 0.8, 0.7, 0.2], ["B", "A", "A", "B"]) == 0.1  # a tie: the answer seen first
    out = group_figures([1.0, 0.0, 0.0], ["7", "3", "3"])
    assert out["maj@3/mean"] < 0.5 and "maj@2/mean" in out  # "3" (wrong) wins most draws


def test_sample_variables_keep_numbers_and_the_vote():
    assert sample_variables(1.0, {"acc": True, "pred": "42", "note": "x", "rm": None, "part": 0.25,
                                  "bad": float("nan")}) == {"reward": 1.0, "acc": 1.0, "pred": "42", "part": 0.25}


def test_sections_core_is_acc_when_given_else_reward():
    # two prompts of source "gsm8k", 2 samples each; no acc: reward is the core variable
    out = validation_metrics(["gsm8k"] * 4, ["a", "a", "b", "b"],
                             [{"reward": r} for r in (1.0, 0.0, 1.0, 1.0)])
    assert out["val-core/gsm8k/reward/mean@2"] == pytest.approx(0.75)  # mean of the prompts' means
    assert out["val-aux/gsm8k/reward/std@2"] == pytest.approx(0.25)  # (0.5 + 0) / 2
    # verl's rule: mean / maj / best figures at the largest N (their std too) are core, worst@ is aux
    assert "val-core/gsm8k/reward/best@2/mean" in out and "val-core/gsm8k/reward/best@2/std" in out
    assert "val-aux/gsm8k/reward/worst@2/mean" in out
    # with acc and pred: acc is the core, reward goes to val-aux, maj@ appears
    variables = [{"reward": r, "acc": a, "pred": p} for r, a, p in
                 ((0.9, 1.0, "4"), (0.1, 0.0, "5"), (0.9, 1.0, "4"), (0.9, 1.0, "4"))]
    out = validation_metrics(["math"] * 4, ["a", "a", "b", "b"], variables)
    assert out["val-core/math/acc/mean@2"] == pytest.approx(0.75)
    assert "val-core/math/acc/maj@2/mean" in out and "val-aux/math/reward/mean@2" in out
    assert not any(k.startswith("val-core/math/reward") for k in out)
    # two data sources are kept apart
    out = validation_metrics(["x", "y"], ["a", "b"], [{"reward": 1.0}, {"reward": 0.0}])
    assert out == {"val-core/x/reward/mean@1": 1.0, "val-core/y/reward/mean@1": 0.0}
