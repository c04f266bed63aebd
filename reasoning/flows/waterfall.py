"""The flow page's waterfall: each step a bar from its start for its latency, on the flow's clock.

``layout(flow, steps, now)`` takes one page of steps (the flow page's step dicts: ``position``,
``started_at``, ``created_at``, ``latency_ms``, ``parent_position``, ``extra_parent_positions``)
and returns rows in SVG user units (``WIDTH`` wide; the drawing scales to its panel):

* the time axis runs from the flow's start (``created_at``) to its end (``closed_at``, or now
  while it is open), stretched to cover the latest step end, and on to the next nice tick
  (``core.svg.duration_ticks``: one unit, distinct labels);
* a step starts at its ``started_at`` (else when it was recorded) and lasts ``latency_ms``;
  a step without a latency is a tick mark (``instant``), not a guess;
* rows are in tree order: each step under its parent (indented by depth), siblings in start
  order, so parents stand above their children; a merge (extra parents) is marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.svg import Scale, duration_ticks

WIDTH = 1000  # SVG user units
LABEL_WIDTH = 260  # the left column: #position kind
ROW_HEIGHT = 26
BAR_HEIGHT = 14
AXIS_HEIGHT = 28
INDENT = 12  # per depth, inside the label column
MAX_INDENT_DEPTH = 8
MIN_BAR = 2.0  # a very short step stays visible


@dataclass(frozen=True)
class Bar:
    step: dict[str, Any]
    depth: int
    y: float
    x: float
    width: float
    start_ms: float
    latency_ms: int | None
    merge: bool

    @property
    def instant(self) -> bool:
        return self.latency_ms is None

    @property
    def label_x(self) -> float:
        return 8 + INDENT * min(self.depth, MAX_INDENT_DEPTH)

    @property
    def bar_y(self) -> float:
        return self.y + (ROW_HEIGHT - BAR_HEIGHT) / 2


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Waterfall:
    bars: list[Bar]
    ticks: list[Tick]
    total_ms: float
    height: float
    width: int = WIDTH
    label_width: int = LABEL_WIDTH
    bar_height: int = BAR_HEIGHT
    axis_height: int = AXIS_HEIGHT


def layout(created_at: datetime, ended_at: datetime, steps: Sequence[dict[str, Any]]) -> Waterfall:
    starts = {step["position"]: _start_ms(step, created_at) for step in steps}
    ends = [starts[step["position"]] + (step["latency_ms"] or 0) for step in steps]
    total_ms = max([(ended_at - created_at).total_seconds() * 1000, *ends, 1.0])
    # Nice ticks in one unit (0, 0.5, 1, 1.5 ms; 0, 1, 2 s), each label its own: the axis ends on
    # the last tick, at or past the flow's end.
    values, label = duration_ticks(total_ms / 1000)
    x = Scale(0.0, values[-1] * 1000, LABEL_WIDTH, WIDTH - 16)

    bars = []
    for row, (step, depth) in enumerate(_tree_order(steps, starts)):
        start = starts[step["position"]]
        latency = step["latency_ms"]
        bars.append(
            Bar(
                step=step,
                depth=depth,
                y=AXIS_HEIGHT + row * ROW_HEIGHT,
                x=x(start),
                width=max(MIN_BAR, x.length(latency or 0)),
                start_ms=start,
                latency_ms=latency,
                merge=bool(step["extra_parent_positions"]),
            )
        )
    ticks = [Tick(x(seconds * 1000), label(seconds)) for seconds in values]
    return Waterfall(bars, ticks, total_ms, AXIS_HEIGHT + len(bars) * ROW_HEIGHT + 8)


def _start_ms(step: dict[str, Any], created_at: datetime) -> float:
    began: datetime = step.get("started_at") or step["created_at"]
    return max((began - created_at).total_seconds() * 1000, 0.0)


def _tree_order(steps: Sequence[dict[str, Any]], starts: dict[int, float]) -> list[tuple[dict[str, Any], int]]:
    """Depth-first from the roots (steps whose parent is not on this page), children by start."""
    on_page = {step["position"] for step in steps}
    children: dict[int | None, list[dict[str, Any]]] = {}
    for step in steps:
        parent = step["parent_position"] if step["parent_position"] in on_page else None
        children.setdefault(parent, []).append(step)
    for siblings in children.values():
        siblings.sort(key=lambda step: (starts[step["position"]], step["position"]))
    ordered: list[tuple[dict[str, Any], int]] = []
    stack = [(step, 0) for step in reversed(children.get(None, []))]
    while stack:
        step, depth = stack.pop()
        ordered.append((step, depth))
        stack.extend((child, depth + 1) for child in reversed(children.get(step["position"], [])))
    return ordered
