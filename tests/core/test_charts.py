"""core.charts: the dashboard's SVG geometry (pure functions, no database)."""

from __future__ import annotations

import pytest

from core import charts, svg
from core.charts import Series


def heights(chart: charts.ColumnChart) -> list[float]:
    return [rect.height for rect in chart.rects]


@pytest.mark.parametrize(
    ("top", "integer", "expected"),
    [
        (7, True, [0, 2, 4, 6, 8]),
        (100, False, [0, 25, 50, 75, 100]),
        (3, True, [0, 1, 2, 3]),
        (1, True, [0, 1]),
        (0.3, False, [0, 0.1, 0.2, 0.3]),
        (1234, True, [0, 500, 1000, 1500]),
        (0, True, [0, 1]),
        (-5, False, [0, 1]),
    ],
)
def test_ticks_are_nice_values_from_zero_past_the_top(top: float, integer: bool, expected: list[float]) -> None:
    assert svg.nice_ticks(top, integer=integer) == expected


def test_column_heights_are_proportional_to_the_values() -> None:
    chart = charts.column_chart(["a", "b", "c"], [Series("flows", "completed", [1, 2, 4])])

    assert heights(chart) == [pytest.approx(h) for h in (42.5, 85, 170)]
    # The axis ends on 4 (the tallest column), drawn at the top of the plot.
    assert [tick.label for tick in chart.ticks] == ["0", "1", "2", "3", "4"]
    assert chart.ticks[-1].position == chart.top and chart.ticks[0].position == chart.bottom
    # Every column stands on the axis, and says its value.
    assert all(round(rect.y + rect.height, 1) == chart.bottom for rect in chart.rects)
    assert [rect.title for rect in chart.rects] == ["a · flows: 1", "b · flows: 2", "c · flows: 4"]


def test_stacked_segments_sit_on_each_other_in_series_order() -> None:
    chart = charts.column_chart(
        ["14:00"],
        [Series("completed", "completed", [3]), Series("aborted", "aborted", [1]), Series("active", "active", [0])],
    )

    completed, aborted = chart.rects  # a zero segment is not drawn
    assert (completed.key, aborted.key) == ("completed", "aborted")
    assert completed.height == pytest.approx(3 * aborted.height, abs=0.2)
    assert aborted.y + aborted.height == pytest.approx(completed.y, abs=0.1)
    assert aborted.title == "14:00 · aborted: 1"
    assert [item.name for item in chart.legend] == ["completed", "aborted", "active"]


def test_an_all_zero_or_empty_chart_has_an_axis_and_no_bars() -> None:
    zero = charts.column_chart(["a", "b"], [Series("flows", "completed", [0, 0])])
    empty = charts.column_chart([], [Series("flows", "completed", [])])
    lines = charts.line_chart(["a"], [Series("p50", "p50", [None])])
    bars = charts.bar_chart([], [Series("rate", "abort", [])])

    assert zero.rects == () and empty.rects == ()
    assert [tick.value for tick in zero.ticks] == [0, 1]
    assert lines.lines[0].segments == ()
    assert bars.rects == () and bars.height > 0


def test_only_chosen_category_labels_are_drawn_under_their_columns() -> None:
    chart = charts.column_chart(
        ["00", "01", "02", "03"], [Series("n", "completed", [1, 1, 1, 1])], axis_labels=["00", "", "02", ""]
    )

    assert [label.text for label in chart.labels] == ["00", "02"]
    first = chart.rects[0]
    assert chart.labels[0].x == pytest.approx(first.x + first.width / 2, abs=0.1)


def test_a_label_at_an_edge_is_aligned_to_it_instead_of_running_off() -> None:
    chart = charts.column_chart(
        [f"Nov {day}" for day in range(1, 31)],
        [Series("n", "completed", [1] * 30)],
        axis_labels=["Nov 1"] + [""] * 28 + ["Nov 30"],
    )

    first, last = chart.labels
    assert (last.anchor, last.x) == ("end", chart.width - 1)
    assert first.anchor == "middle"  # the value axis leaves room on the left


def test_a_missing_value_breaks_the_line() -> None:
    chart = charts.line_chart(["d1", "d2", "d3", "d4"], [Series("p50", "p50", [2.0, None, 1.0, 4.0])])

    (line,) = chart.lines
    assert len(line.segments) == 2
    assert len(line.points) == 3
    assert [point.title for point in line.points] == ["d1 · p50: 2", "d3 · p50: 1", "d4 · p50: 4"]
    # y grows downwards: the 4 s point is highest, at the axis's top (4).
    assert line.points[2].y == chart.top
    assert line.points[0].y == pytest.approx((chart.top + chart.bottom) / 2)


def test_durations_get_ticks_in_one_readable_unit() -> None:
    for top, labels in (
        (0.3, ["0 ms", "100 ms", "200 ms", "300 ms"]),
        (90, ["0 s", "25 s", "50 s", "75 s", "100 s"]),
        (600, ["0 min", "2.5 min", "5 min", "7.5 min", "10 min"]),
        (36_000, ["0 h", "2.5 h", "5 h", "7.5 h", "10 h"]),
    ):
        values, fmt = svg.duration_ticks(top)
        assert [fmt(v) for v in values] == labels
        assert values[-1] >= top


def test_grouped_bars_measure_percentages_against_a_fixed_axis() -> None:
    chart = charts.bar_chart(
        ["researcher", "critic"],
        [Series("abort rate", "abort", [25.0, 0.0]), Series("blocked rate", "blocked", [50.0, 100.0])],
        top_value=100,
        fmt=svg.percent,
    )

    plot = chart.right - chart.left
    widths = {rect.title: rect.width for rect in chart.rects}
    assert widths["researcher · abort rate: 25 %"] == pytest.approx(plot / 4, abs=0.1)
    assert widths["researcher · blocked rate: 50 %"] == pytest.approx(plot / 2, abs=0.1)
    assert widths["critic · blocked rate: 100 %"] == pytest.approx(plot, abs=0.1)
    # A zero is a sliver, not a missing bar.
    assert widths["critic · abort rate: 0 %"] == 1.0
    assert [tick.label for tick in chart.ticks] == ["0 %", "25 %", "50 %", "75 %", "100 %"]


def test_stacked_bars_run_end_to_end_and_long_labels_are_shortened() -> None:
    name = "researcher · gpt-4o-mini-2024-07-18"
    chart = charts.bar_chart(
        [name], [Series("input", "input", [300]), Series("output", "output", [100])], stacked=True, integer=True
    )

    first, second = chart.rects
    assert second.x == pytest.approx(first.x + first.width, abs=0.1)
    assert first.width == pytest.approx(3 * second.width, abs=0.2)
    (label,) = chart.labels
    assert label.text == name[: charts.LABEL_CHARS - 1] + "…" and label.full == name


@pytest.mark.parametrize("top", [0.0005, 0.004, 12_500.0, 3.0])
def test_every_value_label_fits_left_of_the_plot(top: float) -> None:
    """A cost axis of fractions of a cent read ".00050" on the dashboard: the label ran off the
    chart's left edge. The plot now starts where its longest label ends."""
    for chart in (
        charts.column_chart(["a", "b"], [Series("cost", "cost", [top, top / 2])], fmt=svg.usd, integer=False),
        charts.line_chart(["a", "b"], [Series("cost", "cost", [top, None])], fmt=svg.usd),
    ):
        for tick in chart.ticks:
            assert chart.tick_x - len(tick.label) * charts.FONT * 0.6 >= 0, tick.label
    small = charts.column_chart(["a"], [Series("n", "n", [3])])
    assert small.left == charts.LEFT  # short labels keep the usual margin


def test_tick_labels_are_compact() -> None:
    assert [svg.plain(v) for v in (0, 2.5, 1500, 12_000, 3_000_000)] == ["0", "2.5", "1.5k", "12k", "3M"]
    assert svg.percent(100 / 3) == "33.3 %"
