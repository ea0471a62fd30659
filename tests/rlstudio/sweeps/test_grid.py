"""The pure parts of sweeps: the grid's expansion worked out by hand, the axes' shape checks, run
names, the sweep's tag and the form's comma-separated values."""
import pytest

from rlstudio.sweeps.grid import (
    MAX_RUN_NAME,
    AxesInvalid,
    Axis,
    clean_axes,
    expand_grid,
    grid_size,
    parse_values_text,
    run_name,
    sweep_tag,
)
from rlstudio.sweeps.selectors import best_index


def test_a_2x3_grid_varies_the_first_axis_slowest():
    axes = [Axis("a", (1, 2)), Axis("b", ("x", "y", "z"))]
    points = expand_grid(axes)
    assert grid_size(axes) == 6
    assert [p.index for p in points] == [0, 1, 2, 3, 4, 5]
    assert [p.params for p in points] == [
        {"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"},
        {"a": 2, "b": "x"}, {"a": 2, "b": "y"}, {"a": 2, "b": "z"},
    ]


def test_one_axis_and_three_axes_by_hand():
    assert [p.params for p in expand_grid([Axis("k", (0.1,))])] == [{"k": 0.1}]
    three = expand_grid([Axis("a", (1, 2)), Axis("b", (True,)), Axis("c", (3, 4))])
    assert [tuple(p.params.values()) for p in three] == [(1, True, 3), (1, True, 4), (2, True, 3), (2, True, 4)]
    assert list(three[0].params) == ["a", "b", "c"]  # the axes' order
    assert expand_grid([]) == [] and grid_size([]) == 0


@pytest.mark.parametrize("raw,field", [
    ({"key": "a", "values": [1]}, "axes"),
    ([], "axes"),
    ([{"key": f"k{i}", "values": [1]} for i in range(5)], "axes"),
    ([{"key": "a"}], "axes[0]"),
    ([{"key": "a", "values": [1], "extra": 1}], "axes[0]"),
    ([{"key": "", "values": [1]}], "axes[0].key"),
    ([{"key": 3, "values": [1]}], "axes[0].key"),
    ([{"key": "a", "values": [1]}, {"key": "a", "values": [2]}], "axes[1].key"),
    ([{"key": "a", "values": []}], "axes[0].values"),
    ([{"key": "a", "values": "1,2"}], "axes[0].values"),
    ([{"key": "a", "values": [1, [2]]}], "axes[0].values[1]"),
    ([{"key": "a", "values": [{"x": 1}]}], "axes[0].values[0]"),
    ([{"key": "a", "values": [1, 2, 1]}], "axes[0].values[2]"),
    ([{"key": "a", "values": [float("nan")]}], "axes[0].values[0]"),
    ([{"key": "a", "values": ["a\x00b"]}], "axes[0].values[0]"),
])
def test_malformed_axes_are_refused_naming_the_field(raw, field):
    with pytest.raises(AxesInvalid) as err:
        clean_axes(raw)
    assert err.value.field == field


def test_clean_axes_keeps_order_and_types():
    axes = clean_axes([{"key": " b ", "values": [1, 1.0e-6, True, None, "s"]}, {"key": "a", "values": [2]}])
    assert axes == [Axis("b", (1, 1e-6, True, None, "s")), Axis("a", (2,))]


def test_run_names_and_their_cut():
    assert run_name("lr", {"x.lr": 1e-06, "x.n": 4, "x.on": False}) == "lr/x.lr=1e-06,x.n=4,x.on=false"
    long = run_name("s" * 100, {"k" * 80: "v" * 80})
    assert len(long) == MAX_RUN_NAME and long.endswith("…")


def test_the_tag_is_the_name_in_tag_characters():
    assert sweep_tag("lr-sweep") == "lr-sweep"
    assert sweep_tag("my sweep <b>") == "my-sweep--b"
    assert sweep_tag("<>") == "sweep"
    assert len(sweep_tag("x" * 90)) == 40


def test_form_values_read_as_yaml_scalars():
    assert parse_values_text("1e-6, 3e-6", field="f") == [1e-6, 3e-6]
    assert parse_values_text("4,8", field="f") == [4, 8]
    assert parse_values_text("true, cpu_smoke", field="f") == [True, "cpu_smoke"]
    for bad in ("", "1,,2", "[1, 2]", "{a: 1}", "&x 1"):
        with pytest.raises(AxesInvalid) as err:
            parse_values_text(bad, field="axis_values_2")
        assert err.value.field == "axis_values_2"


def test_best_index_skips_missing_values_and_names_no_best_on_a_tie():
    assert best_index([None, 0.2, 0.5, 0.4, None]) == 2
    assert best_index([None, 0.2, 0.5, 0.5, None]) is None  # two runs share the top: neither is the best
    assert best_index([0.0, 0.0]) is None
    assert best_index([None, None]) is None
    assert best_index([-1.0]) == 0
