"""The Decision Dimensions radar as inline SVG (no chart library, no JavaScript).

``{% radar dims audience="patient" size="expanded" %}`` draws one radar;
``{% radar_compare a b name_a name_b %}`` draws two on one chart (indigo and pink) with
a legend ranking the axes by difference and the declared pick. ``dims`` is a radar dict
(``{axis: {"score", "bucket"}}``) or the narrative's ``axes`` list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django import template

from core import svg
from reasoning.dimensions import AXES, LABELS, MAX_SCORE, compare

register = template.Library()

VIEW = 240  # the chart's square
PAD = 100  # room either side for the axis labels (patient labels run to ~20 characters)
CENTRE = VIEW / 2
RADIUS = 80
SIZES = {"compact": 96, "expanded": 460}
RINGS = (3, 5, 7)  # the medium and high bucket thresholds, and the rim


def _as_radar(dims: Any) -> dict[str, dict[str, Any]]:
    if isinstance(dims, Mapping) and "axes" in dims:
        dims = dims["axes"]
    if isinstance(dims, Sequence) and not isinstance(dims, str):
        return {item["axis"]: {"score": item["score"], "bucket": item["bucket"]} for item in dims}
    return {axis: dict(dims[axis]) for axis in AXES}


def _point(index: int, score: float) -> tuple[float, float]:
    return svg.polar(index, len(AXES), RADIUS * score / MAX_SCORE, CENTRE)


def _polygon(scores: Sequence[float]) -> str:
    return " ".join(f"{x},{y}" for x, y in (_point(i, s) for i, s in enumerate(scores)))


def _describe(label: str, axis: str, score: int, bucket: str) -> str:
    caution = " (high means caution)" if axis == "risk" else ""
    return f"{label}: {score} of {MAX_SCORE}, {bucket}{caution}"


def _label_lines(label: str, width: int = 12) -> list[str]:
    """A long label on two lines, split at the space nearest its middle, so it fits the margin."""
    if len(label) <= width or " " not in label:
        return [label]
    middle = len(label) / 2
    cut = min((i for i, char in enumerate(label) if char == " "), key=lambda i: abs(i - middle))
    return [label[:cut], label[cut + 1 :]]


def _frame(labels: Mapping[str, str], *, width: int, labelled: bool = True) -> dict[str, Any]:
    """The rings, spokes and label positions; a compact chart has no labels and no margin."""
    pad = PAD if labelled else 0
    axes = []
    for i, axis in enumerate(AXES):
        end_x, end_y = _point(i, MAX_SCORE)
        label_x, label_y = _point(i, MAX_SCORE * 1.22)
        anchor = "middle" if abs(label_x - CENTRE) < 1 else ("start" if label_x > CENTRE else "end")
        axes.append({"axis": axis, "label": labels[axis], "x": end_x, "y": end_y})
        lines = _label_lines(labels[axis])
        # Multi-line labels are centred on the label point: the first line starts half a line up.
        axes[-1].update(lx=label_x, ly=label_y, anchor=anchor, lines=lines, first_dy=f"{-0.6 * (len(lines) - 1)}em")
    return {
        "viewbox": f"{-pad} 0 {VIEW + 2 * pad} {VIEW}",
        "size": width,
        "height": round(width * VIEW / (VIEW + 2 * pad)),
        "centre": CENTRE,
        "rings": [_polygon([ring] * len(AXES)) for ring in RINGS],
        "axes": axes,
    }


def _series(radar: Mapping[str, Mapping[str, Any]], labels: Mapping[str, str]) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    for i, axis in enumerate(AXES):
        score, bucket = int(radar[axis]["score"]), str(radar[axis]["bucket"])
        x, y = _point(i, score)
        points.append(
            {
                "axis": axis,
                "x": x,
                "y": y,
                "score": score,
                "bucket": bucket,
                "title": _describe(labels[axis], axis, score, bucket),
            }
        )
    return {"polygon": _polygon([p["score"] for p in points]), "points": points}


@register.inclusion_tag("components/radar.html")
def radar(dims: Any, audience: str = "operator", size: str = "compact", caption: str = "") -> dict[str, Any]:
    labels = LABELS.get(audience, LABELS["operator"])
    data = _as_radar(dims)
    series = _series(data, labels)
    summary = "; ".join(point["title"] for point in series["points"])
    return {
        **_frame(labels, width=SIZES.get(size, SIZES["compact"]), labelled=size == "expanded"),
        "series": series,
        "expanded": size == "expanded",
        "aria_label": f"Decision dimensions. {summary}.",
        "caption": caption,
        "audience": audience,
    }


@register.inclusion_tag("components/radar_compare.html")
def radar_compare(a: Any, b: Any, name_a: str = "A", name_b: str = "B") -> dict[str, Any]:
    labels = LABELS["operator"]
    first, second = _as_radar(a), _as_radar(b)
    result = compare(first, second, labels=labels)
    series_a, series_b = _series(first, labels), _series(second, labels)
    winner = name_a if result.winner == "a" else name_b
    return {
        **_frame(labels, width=SIZES["expanded"]),
        "a": series_a,
        "b": series_b,
        "name_a": name_a,
        "name_b": name_b,
        "deltas": result.deltas,
        "winner": winner,
        "winner_side": result.winner,
        "reason": result.reason,
        "aria_label": f"Comparison of {name_a} (indigo) and {name_b} (pink). Pick: {winner}. {result.reason}",
    }
