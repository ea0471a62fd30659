"""The pure parts of random search: the same seed draws the same points, draws stay within their
ranges, a log range covers its decades evenly, int ranges give whole numbers with both ends reached,
floats are rounded to 4 significant digits, and every malformed axis, `runs` and `seed` is refused
naming its field; the form's range text."""
import math
import random
from collections import Counter

import pytest

from rlstudio.sweeps.grid import AxesInvalid, Axis, clean_axes
from rlstudio.sweeps.sample import (
    MAX_SEED,
    MISSES_IN_A_ROW,
    RangeAxis,
    axis_text,
    clean_random_axes,
    clean_runs,
    clean_seed,
    draw_points,
    is_range_text,
    parse_range_text,
    round_sig,
    space_size,
)

LR_RANGE = {"key": "lr", "min": 1e-7, "max": 1e-5, "scale": "log"}


def _sig_digits(x: float) -> int:
    return len(f"{x:e}".split("e")[0].replace(".", "").replace("-", "").rstrip("0"))


def test_the_same_seed_draws_the_same_points_and_another_seed_others():
    axes = clean_random_axes([LR_RANGE, {"key": "n", "min": 2, "max": 16, "type": "int"},
                              {"key": "loss", "values": ["a", "b", "c"]}])
    first, again = draw_points(axes, 8, seed=1234), draw_points(axes, 8, seed=1234)
    assert [p.params for p in first] == [p.params for p in again]
    assert [p.index for p in first] == list(range(8))
    assert [list(p.params) for p in first] == [["lr", "n", "loss"]] * 8  # the axes' order
    assert [p.params for p in draw_points(axes, 8, seed=1235)] != [p.params for p in first]
    assert len({tuple(p.params.values()) for p in first}) == 8  # distinct


def test_linear_float_draws_are_inside_the_bounds_and_rounded_to_4_digits():
    axes = clean_random_axes([{"key": "x", "min": -0.3333333, "max": 0.7777777}])
    points = draw_points(axes, 16, seed=7)
    values = [p.params["x"] for p in points]
    assert all(-0.3333333 <= v <= 0.7777777 for v in values)
    assert all(isinstance(v, float) and _sig_digits(v) <= 4 for v in values)
    assert min(values) < 0 < max(values)  # both sides of 0 reached in 16 draws


def test_a_log_range_covers_its_decades_evenly():
    axis = RangeAxis("lr", 1e-7, 1e-5, scale="log")
    rng = random.Random(0)
    draws = [axis.draw(rng) for _ in range(4000)]
    assert all(1e-7 <= v <= 1e-5 for v in draws)
    low_decade = sum(v < 1e-6 for v in draws)
    assert 1800 < low_decade < 2200  # half the draws in each decade
    linear = RangeAxis("lr", 1e-7, 1e-5)
    assert sum(linear.draw(rng) < 1e-6 for _ in range(4000)) < 500  # linear: ~9% (0.9e-6 of 9.9e-6)


def test_int_ranges_give_whole_numbers_with_both_ends_reached():
    for scale in ("linear", "log"):
        axis = RangeAxis("n", 1, 8, scale=scale, type="int")
        rng = random.Random(3)
        draws = [axis.draw(rng) for _ in range(3000)]
        assert all(isinstance(v, int) and 1 <= v <= 8 for v in draws)
        assert set(draws) == set(range(1, 9)), scale
    counts = Counter(RangeAxis("n", 1, 8, type="int").draw(random.Random(s)) for s in range(4000))
    assert max(counts.values()) < 2 * min(counts.values())  # linear: about equally likely
    log_counts = Counter(RangeAxis("n", 1, 64, scale="log", type="int").draw(random.Random(s)) for s in range(4000))
    assert sum(log_counts[v] for v in range(1, 9)) > sum(log_counts[v] for v in range(33, 65))


def test_an_int_range_holding_fewer_points_than_runs_is_refused_and_a_full_one_drawn_whole():
    axes = clean_random_axes([{"key": "n", "min": 2, "max": 5, "type": "int"}, {"key": "b", "values": [True, False]}])
    assert space_size(axes) == 8
    points = draw_points(axes, 8, seed=0)
    assert sorted((p.params["n"], p.params["b"]) for p in points) == sorted(
        (n, b) for n in range(2, 6) for b in (False, True))
    with pytest.raises(AxesInvalid) as exc:
        draw_points(axes, 9, seed=0)
    assert exc.value.field == "runs" and "8 distinct points" in str(exc.value)
    assert space_size(clean_random_axes([LR_RANGE])) is None


def test_a_range_too_narrow_for_distinct_rounded_draws_is_refused_on_runs():
    axes = clean_random_axes([{"key": "x", "min": 1.00001, "max": 1.00002}])
    with pytest.raises(AxesInvalid) as exc:
        draw_points(axes, 3, seed=0)
    assert exc.value.field == "runs" and "distinct points" in str(exc.value)


def test_a_space_rounding_leaves_few_points_is_refused_after_a_few_thousand_draws(monkeypatch):
    """4 ranges that round to one point each, 1000 runs asked: refused once MISSES_IN_A_ROW draws in a
    row found nothing new. It drew TRIES_PER_RUN x runs = 200,000 points (about 2 s of a request) before."""
    draws = []
    real = RangeAxis.draw

    def counted(self, rng):
        draws.append(1)
        return real(self, rng)

    monkeypatch.setattr(RangeAxis, "draw", counted)
    axes = clean_random_axes([{"key": k, "min": 1.0, "max": 1.0001} for k in "abcd"])
    with pytest.raises(AxesInvalid) as exc:
        draw_points(axes, 1000, seed=0)
    assert exc.value.field == "runs" and "only 1 of the 1000 distinct points asked for could be drawn" in str(exc.value)
    assert len(draws) == 4 * (MISSES_IN_A_ROW + 1)


def test_a_rare_point_is_still_found_when_every_point_is_asked_for():
    """`1..16 log int` draws 16 1.1% of the time; all 16 asked for, over many seeds, are always drawn."""
    axes = clean_random_axes([{"key": "n", "min": 1, "max": 16, "scale": "log", "type": "int"}])
    for seed in range(300):
        assert sorted(p.params["n"] for p in draw_points(axes, 16, seed=seed)) == list(range(1, 17))


def test_round_sig():
    assert round_sig(3.14159265e-06) == 3.142e-06
    assert round_sig(123456.0) == 123500.0
    assert round_sig(0.0) == 0.0 and round_sig(-0.000123456) == -0.0001235


def test_ranges_are_stored_normalised_and_written_for_the_pages():
    (axis,) = clean_random_axes([{"key": " lr ", "min": 1e-7, "max": 1e-5, "scale": "log"}])
    assert axis.as_dict() == {"key": "lr", "min": 1e-7, "max": 1e-5, "scale": "log", "type": "float"}
    (n,) = clean_random_axes([{"key": "n", "min": 2.0, "max": 8, "type": "int"}])
    assert n.as_dict() == {"key": "n", "min": 2, "max": 8, "scale": "linear", "type": "int"}
    assert axis_text(axis.as_dict()) == "1e-07 .. 1e-05 (log, float)"
    assert axis_text({"key": "a", "values": [1, True]}) == "1, true"


@pytest.mark.parametrize("raw,field,text", [
    ([{"key": "lr", "min": 0, "max": 1e-5, "scale": "log"}], "axes[0].min", "log scale needs min > 0"),
    ([{"key": "lr", "min": 1e-5, "max": 1e-7}], "axes[0].min", "must be below max"),
    ([{"key": "lr", "min": 1, "max": 1}], "axes[0].min", "must be below max"),
    ([{"key": "a", "values": [1]}, {"key": "lr", "min": "x", "max": 1}], "axes[1].min", "finite number"),
    ([{"key": "lr", "min": 0, "max": float("inf")}], "axes[0].max", "finite number"),
    ([{"key": "lr", "min": 0, "max": True}], "axes[0].max", "finite number"),
    # an int past a float's range: math.isfinite raised OverflowError on it (a 500 through the API)
    ([{"key": "lr", "min": 0, "max": 10**400}], "axes[0].max", "finite number"),
    ([{"key": "n", "min": -(10**400), "max": 4, "type": "int"}], "axes[0].min", "finite number"),
    ([{"key": "n", "min": 0, "max": 10**15 + 1, "type": "int"}], "axes[0].max", "finite number"),
    ([{"key": "lr", "min": 0}], "axes[0].max", "both min and max"),
    ([{"key": "lr", "min": 0, "max": 1, "scale": "exp"}], "axes[0].scale", "linear or log"),
    ([{"key": "lr", "min": 0, "max": 1, "type": "double"}], "axes[0].type", "float or int"),
    ([{"key": "n", "min": 1.5, "max": 4, "type": "int"}], "axes[0].min", "whole number"),
    ([{"key": "lr", "min": 0, "max": 1, "step": 2}], "axes[0]", "not step"),
    ([{"key": "lr", "min": 0, "max": 1, "values": [1]}], "axes[0]", "not both"),
    ([{"key": "lr"}], "axes[0]", "values"),
    ([{"key": "lr", "min": 0, "max": 1}, {"key": "lr", "values": [1]}], "axes[1].key", "two axes"),
    ([{"key": "", "min": 0, "max": 1}], "axes[0].key", "dotted config key"),
    ([], "axes", "at least one"),
    ([LR_RANGE] * 5, "axes", "at most 4"),
    ("lr=1", "axes", "must be a list"),
    (["lr"], "axes[0]", "must be an object"),
])
def test_malformed_random_axes_are_refused_naming_the_field(raw, field, text):
    with pytest.raises(AxesInvalid) as exc:
        clean_random_axes(raw)
    assert exc.value.field == field and text in str(exc.value)


def test_a_grid_refuses_a_range_naming_the_axis():
    with pytest.raises(AxesInvalid) as exc:
        clean_axes([{"key": "a", "values": [1]}, LR_RANGE])
    assert exc.value.field == "axes[1]" and "random search only" in str(exc.value)
    assert clean_random_axes([{"key": "a", "values": [1, 2]}]) == [Axis("a", (1, 2))]


@pytest.mark.parametrize("raw", [0, 17, -1, "4", 2.0, True, None])
def test_runs_is_1_to_the_cap(raw):
    with pytest.raises(AxesInvalid) as exc:
        clean_runs(raw, cap=16)
    assert exc.value.field == "runs"


@pytest.mark.parametrize("raw", [-1, MAX_SEED + 1, "7", 1.5, False])
def test_seed_is_a_whole_number_in_range(raw):
    with pytest.raises(AxesInvalid) as exc:
        clean_seed(raw)
    assert exc.value.field == "seed"


def test_runs_and_seed_accepted():
    assert clean_runs(16, cap=16) == 16 and clean_runs(1, cap=16) == 1
    assert clean_seed(None) is None and clean_seed(0) == 0 and clean_seed(MAX_SEED) == MAX_SEED


@pytest.mark.parametrize("text,expected", [
    ("1e-7..1e-5 log", {"min": 1e-7, "max": 1e-5, "scale": "log", "type": "float"}),
    ("2..16 int", {"min": 2, "max": 16, "scale": "linear", "type": "int"}),
    (" 1 .. 64  log int ", {"min": 1, "max": 64, "scale": "log", "type": "int"}),
    ("-0.5..0.5", {"min": -0.5, "max": 0.5, "scale": "linear", "type": "float"}),
])
def test_the_form_range_text(text, expected):
    assert is_range_text(text)
    assert parse_range_text(text, field="axis_values_1") == expected


@pytest.mark.parametrize("text,msg", [
    ("1e-7..1e-5 logg", "'logg' after a range"),
    ("a..b", "not a number"),
    ("1..inf", "finite"),
    ("..5", "a range is MIN..MAX"),
])
def test_a_bad_form_range_text_is_refused_on_its_field(text, msg):
    with pytest.raises(AxesInvalid) as exc:
        parse_range_text(text, field="axis_values_2")
    assert exc.value.field == "axis_values_2" and msg in str(exc.value)


def test_values_text_is_not_a_range():
    assert not is_range_text("1e-6, 3e-6") and not is_range_text("cpu_smoke")
    assert math.isclose(round_sig(1 / 3), 0.3333)
