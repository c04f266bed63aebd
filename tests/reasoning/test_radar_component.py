"""The radar SVG component: ``{% radar %}`` and ``{% radar_compare %}`` (reasoning.templatetags.radar).

The rendered markup is read through tests/html.py, so the assertions read elements and
attributes, not substrings of the template.
"""

from __future__ import annotations

import colorsys
import math
import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.template import Context, Template
from hypothesis import given, settings
from hypothesis import strategies as st

from reasoning.dimensions import AXES, LABELS, MAX_SCORE, bucket
from reasoning.templatetags.radar import RADIUS
from tests.html import Element, parse

PATIENT_TITLES = [
    "How sure: 6 of 7, high",
    "Evidence breadth: 4 of 7, medium",
    "Proven approach: 0 of 7, low",
    "Up to date: 7 of 7, high",
    "Care team agreement: 5 of 7, high",
    "Caution flags: 2 of 7, low (high means caution)",
]
OPERATOR_LABELS = ["Confidence", "Coverage", "Maturity", "Recency", "Consensus", "Risk"]
PATIENT_LABELS = [
    "How sure",
    "Evidence breadth",
    "Proven approach",
    "Up to date",
    "Care team agreement",
    "Caution flags",
]


def dims(**scores: int) -> dict[str, dict[str, Any]]:
    values = {"confidence": 6, "coverage": 4, "maturity": 0, "recency": 7, "consensus": 5, "risk": 2, **scores}
    return {axis: {"score": values[axis], "bucket": bucket(values[axis])} for axis in AXES}


def render(source: str, **context: Any) -> Element:
    """The ``<figure>`` the tag renders."""
    return parse(Template("{% load radar %}" + source).render(Context(context))).one("figure")


def svg_of(figure: Element) -> Element:
    return figure.one("svg")


def circles(figure: Element) -> list[Element]:
    return figure.select("circle")


def title_of(element: Element) -> str:
    return element.one("title").text


def centre_of(figure: Element) -> tuple[float, float]:
    """The spokes all start at the centre."""
    starts = {(float(line.attrs["x1"]), float(line.attrs["y1"])) for line in figure.select("line")}
    assert len(starts) == 1, starts
    (centre,) = starts
    return centre


def spoke_ends(figure: Element) -> list[tuple[float, float]]:
    return [(float(line.attrs["x2"]), float(line.attrs["y2"])) for line in figure.select("line")]


def xy(circle: Element) -> tuple[float, float]:
    return float(circle.attrs["cx"]), float(circle.attrs["cy"])


def polygon_points(polygon: Element) -> list[tuple[float, float]]:
    pairs = (pair.split(",") for pair in polygon.attrs["points"].split())
    return [(float(x), float(y)) for x, y in pairs]


def texts(figure: Element) -> list[str]:
    # A long label is drawn as <tspan> lines; the words read back joined by spaces.
    return [" ".join(line.text for line in label.select("tspan")) for label in figure.select("text")]


# --- One radar ------------------------------------------------------------------------------------


def test_root_svg_is_an_image_whose_label_summarises_all_six_axes() -> None:
    figure = render("{% radar dims audience='patient' size='expanded' %}", dims=dims())

    svg = svg_of(figure)
    assert svg.attrs["role"] == "img"
    assert svg.attrs["aria-label"] == "Decision dimensions. " + "; ".join(PATIENT_TITLES) + "."


def test_six_points_each_with_a_title() -> None:
    figure = render("{% radar dims audience='patient' size='expanded' %}", dims=dims())

    points = circles(figure)
    assert len(points) == 6
    assert [title_of(point) for point in points] == PATIENT_TITLES
    assert [point.attrs["data-axis"] for point in points] == list(AXES)
    assert [point.attrs["data-score"] for point in points] == ["6", "4", "0", "7", "5", "2"]


@pytest.mark.parametrize(
    ("audience", "labels"),
    [("patient", PATIENT_LABELS), ("operator", OPERATOR_LABELS), ("someone-else", OPERATOR_LABELS)],
)
def test_axis_labels_speak_to_the_audience(audience: str, labels: list[str]) -> None:
    figure = render("{% radar dims audience=audience size='expanded' %}", dims=dims(), audience=audience)

    assert texts(figure) == labels
    assert [title_of(point).split(":")[0] for point in circles(figure)] == labels
    other = PATIENT_LABELS if labels == OPERATOR_LABELS else OPERATOR_LABELS
    aria = svg_of(figure).attrs["aria-label"]
    for label in set(other) - set(labels):
        assert f"{label}:" not in aria


def test_patient_labels_name_the_three_plain_axes() -> None:
    assert LABELS["patient"]["coverage"] == "Evidence breadth"
    assert LABELS["patient"]["consensus"] == "Care team agreement"
    assert LABELS["patient"]["risk"] == "Caution flags"


def test_compact_size_draws_no_axis_labels_but_keeps_the_titles() -> None:
    compact = render("{% radar dims audience='patient' %}", dims=dims())
    expanded = render("{% radar dims audience='patient' size='expanded' %}", dims=dims())

    assert texts(compact) == []
    assert [title_of(point) for point in circles(compact)] == PATIENT_TITLES
    assert svg_of(compact).attrs["aria-label"] == svg_of(expanded).attrs["aria-label"]
    assert len(texts(expanded)) == 6
    assert int(svg_of(compact).attrs["width"]) < int(svg_of(expanded).attrs["width"])
    # The expanded radar also spells the values out for readers who cannot see the chart.
    assert not compact.select("figcaption")
    values = expanded.one("figcaption").one("dl", "radar-values").definitions()
    assert [(label, value.text) for label, value in values.items()] == [
        ("How sure", "6/7 high"),
        ("Evidence breadth", "4/7 medium"),
        ("Proven approach", "0/7 low"),
        ("Up to date", "7/7 high"),
        ("Care team agreement", "5/7 high"),
        ("Caution flags", "2/7 low"),
    ]


@pytest.mark.parametrize("size", ["compact", "expanded"])
def test_a_7_sits_on_the_rim_and_a_0_at_the_centre(size: str) -> None:
    high_low = dims(confidence=7, coverage=0, maturity=7, recency=0, consensus=7, risk=0)
    low_high = dims(confidence=0, coverage=7, maturity=0, recency=7, consensus=0, risk=7)
    for radar, rim in ((high_low, {0, 2, 4}), (low_high, {1, 3, 5})):
        figure = render("{% radar dims size=size %}", dims=radar, size=size)
        cx, cy = centre_of(figure)
        ends = spoke_ends(figure)

        for index, point in enumerate(circles(figure)):
            x, y = xy(point)
            if index in rim:
                assert math.dist((x, y), (cx, cy)) == pytest.approx(RADIUS, abs=0.15), AXES[index]
                assert (x, y) == ends[index], AXES[index]  # on its own spoke's end
            else:
                assert (x, y) == (cx, cy), AXES[index]


@settings(max_examples=40, deadline=None)
@given(st.tuples(*[st.integers(min_value=0, max_value=MAX_SCORE)] * 6))
def test_each_point_lies_on_its_spoke_at_score_sevenths_of_the_radius(scores: tuple[int, ...]) -> None:
    radar = dims(**dict(zip(AXES, scores, strict=True)))
    figure = render("{% radar dims size='expanded' %}", dims=radar)
    cx, cy = centre_of(figure)
    area = figure.one("polygon", "radar-area")

    points = [xy(point) for point in circles(figure)]

    assert polygon_points(area) == points
    for index, ((x, y), score) in enumerate(zip(points, scores, strict=True)):
        assert math.dist((x, y), (cx, cy)) == pytest.approx(RADIUS * score / MAX_SCORE, abs=0.15)
        if score:
            # Confidence points straight up; the axes go clockwise, 60 degrees apart.
            angle = math.degrees(math.atan2(y - cy, x - cx))
            expected = -90 + 60 * index
            assert (angle - expected + 180) % 360 - 180 == pytest.approx(0, abs=1.5)


def test_the_narratives_axes_list_is_accepted_as_input() -> None:
    radar = dims()
    narrative = {
        "source": "snapshot",
        "axes": [
            {"axis": axis, "label": LABELS["patient"][axis], "score": value["score"], "bucket": value["bucket"]}
            for axis, value in radar.items()
        ],
    }
    source = "{% radar dims audience='patient' size='expanded' %}"

    from_dict = render(source, dims=radar)

    assert render(source, dims=narrative) == from_dict
    assert render(source, dims=narrative["axes"]) == from_dict


def test_caption_is_shown_and_escaped() -> None:
    figure = render("{% radar dims size='expanded' caption=caption %}", dims=dims(), caption="As of <close> & after")

    caption = figure.one("figcaption").one("p")
    assert caption.text == "As of <close> & after"  # parsed back: it was escaped in the markup


# --- Comparison -----------------------------------------------------------------------------------


def compare_figure(a: Any, b: Any, name_a: str = "Alpha", name_b: str = "Beta") -> Element:
    return render("{% radar_compare a b name_a name_b %}", a=a, b=b, name_a=name_a, name_b=name_b)


def test_comparison_draws_both_polygons_and_both_sets_of_points() -> None:
    a, b = dims(), dims(confidence=2, risk=5)
    figure = compare_figure(a, b)

    areas = figure.select("polygon", "radar-area")
    assert [p.attrs["data-series"] for p in areas] == ["a", "b"]
    assert "radar-series-a" in areas[0].classes()
    assert "radar-series-b" in areas[1].classes()
    points = circles(figure)
    assert len(points) == 12
    assert next(title_of(p) for p in points if "radar-series-a" in p.classes()) == "Alpha: Confidence: 6 of 7, high"
    assert [title_of(p) for p in points if "radar-series-b" in p.classes()][-1] == (
        "Beta: Risk: 5 of 7, high (high means caution)"
    )
    assert polygon_points(areas[0]) == [xy(p) for p in points[:6]]
    assert polygon_points(areas[1]) == [xy(p) for p in points[6:]]
    assert polygon_points(areas[0]) != polygon_points(areas[1])
    svg = svg_of(figure)
    assert svg.attrs["role"] == "img"
    assert svg.attrs["aria-label"].startswith("Comparison of Alpha (indigo) and Beta (pink). Pick: Alpha.")


def hue_of(rule_selector: str) -> float:
    css = (Path(django_settings.BASE_DIR) / "static" / "css" / "radar.css").read_text()
    rule = re.search(re.escape(rule_selector) + r"\s*\{([^}]*)\}", css)
    assert rule is not None, rule_selector
    colour = re.search(r"stroke:\s*#([0-9a-fA-F]{6})", rule.group(1))
    assert colour is not None, rule.group(1)
    r, g, b = (int(colour.group(1)[i : i + 2], 16) / 255 for i in (0, 2, 4))
    return colorsys.rgb_to_hls(r, g, b)[0] * 360


def test_series_a_is_indigo_and_series_b_is_pink() -> None:
    assert 225 <= hue_of(".radar-series-a") <= 260  # indigo
    assert 315 <= hue_of(".radar-series-b") <= 345  # pink


def test_legend_ranks_the_six_axes_by_absolute_difference() -> None:
    a = dims(confidence=6, coverage=4, maturity=0, recency=7, consensus=5, risk=2)
    b = dims(confidence=3, coverage=5, maturity=4, recency=7, consensus=2, risk=1)
    figure = compare_figure(a, b)

    legend = figure.one("figcaption").one("ol")
    assert "radar-deltas" in legend.classes()
    items = legend.select("li")
    # |deltas|: maturity 4, confidence 3, consensus 3 (axis order breaks the tie), coverage 1, risk 1, recency 0.
    assert [item.attrs["data-axis"] for item in items] == [
        "maturity",
        "confidence",
        "consensus",
        "coverage",
        "risk",
        "recency",
    ]
    assert [item.attrs["data-delta"] for item in items] == ["-4", "3", "3", "-1", "1", "0"]
    assert items[0].text == "Maturity: 0 vs 4 (-4)"
    assert items[1].text == "Confidence: 6 vs 3 (+3)"


def pick_text(figure: Element) -> str:
    return figure.one("p", "radar-pick").text


def test_comparison_declares_the_pick_with_its_reason() -> None:
    a = dims(confidence=3, coverage=3, maturity=3, recency=3, consensus=3, risk=3)
    b = dims(confidence=6, coverage=5, maturity=3, recency=3, consensus=3, risk=3)

    assert pick_text(compare_figure(a, b)) == "Pick: Beta. Stronger overall by 5 points; ahead on Confidence, Coverage."
    assert (
        pick_text(compare_figure(b, a)) == "Pick: Alpha. Stronger overall by 5 points; ahead on Confidence, Coverage."
    )


def test_risk_counts_against_the_pick() -> None:
    a = dims(confidence=5, risk=6)  # +1 confidence over b, +4 risk
    b = dims(confidence=4, risk=2)

    assert pick_text(compare_figure(a, b)) == "Pick: Beta. Stronger overall by 3 points; ahead on Risk."


def test_a_tie_goes_to_the_lower_risk_then_to_the_first_candidate() -> None:
    a = dims(confidence=6, risk=4)  # +2 confidence and +2 risk: even overall
    b = dims(confidence=4, risk=2)

    assert pick_text(compare_figure(a, b)) == "Pick: Beta. Even overall; lower Risk breaks the tie."
    assert pick_text(compare_figure(dims(), dims())) == (
        "Pick: Alpha. Even on every count; the higher-ranked candidate is kept."
    )


def test_comparison_accepts_narrative_axes_lists() -> None:
    a, b = dims(), dims(coverage=7)

    def as_list(radar: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"axis": axis, "score": v["score"], "bucket": v["bucket"]} for axis, v in radar.items()]

    assert compare_figure(as_list(a), {"axes": as_list(b)}) == compare_figure(a, b)


def test_candidate_names_are_escaped() -> None:
    figure = compare_figure(dims(), dims(), name_a='<b>"A&B"</b>', name_b="Beta")

    assert pick_text(figure).startswith('Pick: <b>"A&B"</b>.')
    assert svg_of(figure).attrs["aria-label"].startswith('Comparison of <b>"A&B"</b> (indigo)')
    assert not figure.select("b")  # no markup injected
