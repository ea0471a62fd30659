"""DAPO's group filter (trainer.algorithms.filter_groups) on hand-made scores: which groups are kept,
the filter metrics, and a step's pool across generation batches (full, limit, fill-up, metrics)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from trainer.algorithms.filter_groups import GroupPool, group_rows, kept_group_uids, metric_values


def test_kept_groups_have_varying_values_or_one_sample():
    uids = ["a", "a", "a", "b", "b", "c", "d", "d", "e", "e"]
    vals = [1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 1.0, 1.0, 0.2, 0.3]
    # a varies; b all 0 (flat); c a group of one (kept, as verl); d all 1 (flat); e varies
    assert kept_group_uids(uids, vals) == ["a", "c", "e"]
    assert group_rows(uids)["a"] == [0, 1, 2]


def test_identical_floats_are_flat_even_where_numpy_std_is_not_zero():
    assert np.std([0.1] * 3) > 0  # verl's std > 0 test would keep this group
    assert kept_group_uids(["x"] * 3, [0.1] * 3) == []
    assert kept_group_uids(["x"] * 3, [0.1, 0.1, 0.1 + 1e-12]) == ["x"]


def test_interleaved_uids_keep_first_seen_order():
    assert kept_group_uids(["b", "a", "b", "a"], [0, 1, 1, 1]) == ["b"]
    with pytest.raises(ValueError):
        kept_group_uids(["a"], [1.0, 2.0])


def _tr(score, reward=None, **extra):
    return SimpleNamespace(score=score, reward=score if reward is None else reward, reward_extra=extra)


def test_metric_values():
    trs = [_tr(1.0, 0.75, acc=True), _tr(0.0, -0.5), _tr(0.5, 0.5, acc=0.0)]
    assert metric_values("acc", trs) == [1.0, 0.0, 0.0]  # the acc field, else the score
    assert metric_values("score", trs) == [1.0, 0.0, 0.5]  # before overlong shaping
    assert metric_values("seq_reward", trs) == [0.75, -0.5, 0.5]  # after it
    assert metric_values("seq_final_reward", trs) == [0.75, -0.5, 0.5]
    with pytest.raises(ValueError):
        metric_values("nope", trs)


def _gen(batch, spec):
    """A generation batch: rows named '<batch>:<group>:<i>', uid '<batch>:<group>', values from spec."""
    rows, uids, vals = [], [], []
    for g, values in enumerate(spec):
        for i, v in enumerate(values):
            rows.append(f"{batch}:{g}:{i}")
            uids.append(f"{batch}:{g}")
            vals.append(v)
    return rows, uids, vals


def test_pool_fills_across_batches_and_cuts_to_target():
    pool = GroupPool(target=3)
    pool.add(*_gen(0, [[1, 1], [0, 1], [0, 0]]))  # 1 kept
    assert not pool.full and not pool.limit_reached(0)
    pool.add(*_gen(1, [[1, 0], [1, 0], [1, 1]]))  # 2 kept: full
    assert pool.full
    pool.add(*_gen(2, [[0, 1], [0, 0], [0, 0]]))  # more than needed: the surplus is not trained on
    assert pool.batch() == ["0:1:0", "0:1:1", "1:0:0", "1:0:1", "1:1:0", "1:1:1"]
    assert pool.metrics() == {"train/num_gen_batches": 3.0, "train/num_groups_generated": 9.0,
                              "train/num_groups_kept": 4.0, "train/kept_group_ratio": 4 / 9,
                              "train/num_groups_filled": 0.0}


def test_pool_at_the_limit_tops_up_with_dropped_groups_in_order():
    pool = GroupPool(target=3)
    assert not pool.limit_reached(2)
    pool.add(*_gen(0, [[1, 1], [0, 0]]))
    pool.add(*_gen(1, [[2, 1], [5, 5]]))
    assert pool.limit_reached(2) and not pool.limit_reached(3) and not pool.limit_reached(0)
    assert not pool.full
    # the kept group first, then dropped groups as generated
    assert pool.batch() == ["1:0:0", "1:0:1", "0:0:0", "0:0:1", "0:1:0", "0:1:1"]
    m = pool.metrics()
    assert (m["train/num_groups_kept"], m["train/num_groups_filled"], m["train/kept_group_ratio"]) == (1.0, 2.0, 0.25)


def test_pool_with_nothing_kept_trains_on_the_first_groups():
    pool = GroupPool(target=2)
    pool.add(*_gen(0, [[0, 0], [1, 1], [0, 0]]))
    assert pool.batch() == ["0:0:0", "0:0:1", "0:1:0", "0:1:1"]
    assert pool.metrics()["train/num_groups_filled"] == 2.0
