"""core.svg: the drawing kit every server-drawn picture is built from (pure functions)."""

from __future__ import annotations

import pytest

from core import svg


def test_a_scale_maps_its_domain_onto_its_range_and_can_flip_and_clamp() -> None:
    across = svg.Scale(0, 100, 260, 984)
    assert (across(0), across(50), across(100)) == (260, 622, 984)
    assert across.length(25) == 181

    up = svg.Scale(0.0, 1.0, 30.0, 10.0, clamp=True)  # a value axis: 1 at the top
    assert (up(0), up(1), up(0.5)) == (30, 10, 20)
    assert (up(-3), up(7)) == (30, 10)

    assert svg.Scale(5, 5, 12, 40)(5) == 12  # an empty domain draws at the start, never divides by zero


@pytest.mark.parametrize(
    ("top", "integer", "expected"),
    [
        (0, False, [0, 1]),
        (7, True, [0, 2, 4, 6, 8]),
        (0.9, False, [0, 0.25, 0.5, 0.75, 1]),
        (1, True, [0, 1]),
    ],
)
def test_ticks_run_from_zero_to_a_nice_value_at_or_above_the_top(
    top: float, integer: bool, expected: list[float]
) -> None:
    assert svg.nice_ticks(top, integer=integer) == expected


def test_durations_get_ticks_in_one_readable_unit() -> None:
    values, label = svg.duration_ticks(0.4)
    assert [label(v) for v in values] == ["0 ms", "100 ms", "200 ms", "300 ms", "400 ms"]
    values, label = svg.duration_ticks(5400)
    assert label(values[-1]) == "100 min"


def test_a_bar_is_proportional_and_a_short_one_stays_visible() -> None:
    scale = svg.Scale(0, 10, 0, 160, clamp=True)
    assert svg.bar_length(5, scale) == 80
    assert svg.bar_length(50, scale) == 160  # clamped to the axis
    assert svg.bar_length(None, scale) == 0
    assert svg.bar_length(0.01, scale, minimum=2) == 2
    assert svg.bar_length(0, scale, minimum=2) == 0  # nothing is no bar


def test_a_sparkline_spreads_its_values_and_skips_the_missing_ones() -> None:
    assert svg.sparkline([0.0, None, 1.0], width=120, height=32, pad=3) == "3,29 117,3"
    assert svg.sparkline([0.5], width=120, height=32, pad=3) == "60,16"
    assert svg.sparkline([], width=120, height=32, pad=3) == ""


def test_polar_points_start_at_the_top_and_go_clockwise() -> None:
    assert svg.polar(0, 4, 80, 120) == (120, 40)
    assert svg.polar(1, 4, 80, 120) == (200, 120)
    assert svg.polar(2, 4, 80, 120) == (120, 200)


def test_graph_edges_leave_and_arrive_heading_down_or_run_in_right_angles() -> None:
    assert svg.s_curve(10, 0, 50, 40) == "C10,20 50,20 50,40"
    assert svg.elbow(100, 20, 140, 90.5, 200) == "M100,20 H140 V200 H90.5"
    assert svg.points([(1.04, 2), (3, 4.56)]) == "1,2 3,4.6"


def test_a_share_that_is_not_zero_never_reads_zero() -> None:
    assert [svg.share(100 * n / d) for n, d in ((0, 5), (1, 10_000), (4, 1448), (1, 6), (1, 1))] == [
        "0 %",
        "<0.1 %",
        "0.3 %",
        "17 %",
        "100 %",
    ]


def test_a_cost_reads_in_cents_or_two_significant_digits_and_never_zero_when_it_is_not() -> None:
    assert [svg.usd(v) for v in (0, 0.004375, 0.05, 0.42, 1.5, 1234.5)] == [
        "$0",
        "$0.0044",
        "$0.05",
        "$0.42",
        "$1.50",
        "$1,234.50",
    ]
    assert svg.usd(1e-9) == "<$0.000001"


def test_token_counts_read_with_separators_and_millions_short() -> None:
    assert [svg.tokens(v) for v in (812, 12_400, 1_234_567, 5_000_000)] == ["812", "12,400", "1.2M", "5M"]
