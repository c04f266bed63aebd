"""Chart geometry for server-rendered SVG, on the drawing kit of ``core.svg``.

Each function takes categories (the x axis of a column chart, the rows of a bar chart) and
one or more ``Series`` and returns a frozen dataclass in SVG user units that a template in
``templates/components/`` draws as it is: ``column_chart`` (columns, stacked when there are
several series), ``line_chart`` (one polyline per series, broken where a value is missing)
and ``bar_chart`` (horizontal bars, grouped or stacked). Charts are ``WIDTH`` units wide and
scale to their container (``viewBox``); text is ``FONT`` units high.

The value axis always starts at zero and ends on the last of ``nice_ticks(top)``, "nice" values
(1, 2, 2.5 or 5 times a power of ten), so a bar's length is proportional to its value and
an all-zero chart still has an axis (0 to 1) instead of dividing by zero.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.svg import Formatter, nice_ticks, plain, r

WIDTH = 400  # SVG user units; the drawing scales to its container
FONT = 12  # text height in user units (the stylesheet sets the same)
LEFT = 48  # room for the value axis labels
RIGHT = 10
TOP = 10
BOTTOM = 34  # room for the category labels
COLUMN_HEIGHT = 170  # the plot area of column and line charts
COLUMN_FILL = 0.72  # share of a category's slot its column takes
LABEL_WIDTH = 128  # the category column of a horizontal bar chart
LABEL_CHARS = 19  # longer labels are shortened on the chart (the title and table keep them whole)
BAR_HEIGHT = 12
ROW_GAP = 10


@dataclass(frozen=True)
class Series:
    name: str  # shown in the legend, the titles and the table header
    key: str  # a CSS-safe name: the bars are drawn with class ``chart-<key>``
    values: Sequence[float | None]  # one per category; None (a line's missing point) counts as 0 in bars


@dataclass(frozen=True)
class Tick:
    value: float
    label: str
    position: float  # y of a column or line chart's horizontal grid line, x of a bar chart's vertical one


@dataclass(frozen=True)
class Label:
    text: str
    x: float
    y: float
    full: str = ""  # the whole text when ``text`` is shortened
    anchor: str = "middle"  # SVG text-anchor


@dataclass(frozen=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    key: str
    title: str  # "14:00 · completed: 3"
    value: float


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    title: str


@dataclass(frozen=True)
class Line:
    key: str
    name: str
    segments: tuple[str, ...]  # polyline ``points`` attributes, one per unbroken run
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Legend:
    key: str
    name: str


@dataclass(frozen=True)
class Frame:
    """What every chart has: its size, the plot area and the value axis."""

    width: float
    height: float
    left: float
    top: float
    right: float
    bottom: float
    ticks: tuple[Tick, ...]
    labels: tuple[Label, ...]
    legend: tuple[Legend, ...]

    @property
    def viewbox(self) -> str:
        return f"0 0 {r(self.width)} {r(self.height)}"

    @property
    def tick_x(self) -> float:
        """Where a column or line chart's value labels end (left of the plot)."""
        return self.left - 6

    @property
    def tick_y(self) -> float:
        """The baseline of a bar chart's value labels (under the plot)."""
        return self.bottom + FONT + 4


@dataclass(frozen=True)
class ColumnChart(Frame):
    rects: tuple[Rect, ...]


@dataclass(frozen=True)
class LineChart(Frame):
    lines: tuple[Line, ...]


@dataclass(frozen=True)
class BarChart(Frame):
    rects: tuple[Rect, ...]


def column_chart(
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    axis_labels: Sequence[str] | None = None,
    fmt: Formatter = plain,
    integer: bool = True,
) -> ColumnChart:
    """Columns, one per category, the series stacked bottom up in the order given.

    ``axis_labels``: the text under each column ("" for none; default: every category).
    A column's segments are drawn only where their value is above zero.
    """
    width, height = WIDTH, TOP + COLUMN_HEIGHT + BOTTOM
    totals = [sum(_value(s.values, i) for s in series) for i in range(len(categories))]
    values = nice_ticks(max(totals, default=0), integer=integer)
    left, right, top, bottom = _plot_left([fmt(v) for v in values]), WIDTH - RIGHT, TOP, TOP + COLUMN_HEIGHT
    scale = (bottom - top) / values[-1]
    slot = (right - left) / max(len(categories), 1)
    column = slot * COLUMN_FILL
    rects: list[Rect] = []
    for i, category in enumerate(categories):
        x = left + i * slot + (slot - column) / 2
        base = float(bottom)
        for s in series:
            value = _value(s.values, i)
            if value <= 0:
                continue
            h = value * scale
            rects.append(Rect(r(x), r(base - h), r(column), r(h), s.key, f"{category} · {s.name}: {fmt(value)}", value))
            base -= h
    shown = list(categories) if axis_labels is None else list(axis_labels)
    labels = _category_labels(shown, left, slot, bottom + FONT + 6)
    return ColumnChart(
        width=width,
        height=height,
        left=left,
        top=top,
        right=right,
        bottom=bottom,
        ticks=tuple(Tick(v, fmt(v), r(bottom - v * scale)) for v in values),
        labels=labels,
        legend=tuple(Legend(s.key, s.name) for s in series) if len(series) > 1 else (),
        rects=tuple(rects),
    )


def line_chart(
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    axis_labels: Sequence[str] | None = None,
    fmt: Formatter = plain,
    axis: Callable[[float], tuple[list[float], Formatter]] | None = None,
) -> LineChart:
    """One line per series through the middle of each category's slot; a missing value
    (None) breaks the line. ``axis(top)`` may choose the tick values and their labels
    (durations pick a unit); by default ``nice_ticks(top)`` labelled with ``fmt``."""
    width, height = WIDTH, TOP + COLUMN_HEIGHT + BOTTOM
    highest = max((v for s in series for v in s.values if v is not None), default=0.0)
    values, tick_fmt = axis(highest) if axis is not None else (nice_ticks(highest), fmt)
    left, right, top, bottom = _plot_left([tick_fmt(v) for v in values]), WIDTH - RIGHT, TOP, TOP + COLUMN_HEIGHT
    scale = (bottom - top) / values[-1]
    slot = (right - left) / max(len(categories), 1)
    lines: list[Line] = []
    for s in series:
        segments: list[str] = []
        run: list[str] = []
        points: list[Point] = []
        for i, category in enumerate(categories):
            value = s.values[i] if i < len(s.values) else None
            if value is None:
                if run:
                    segments.append(" ".join(run))
                run = []
                continue
            x, y = r(left + (i + 0.5) * slot), r(bottom - value * scale)
            run.append(f"{x},{y}")
            points.append(Point(x, y, f"{category} · {s.name}: {fmt(value)}"))
        if run:
            segments.append(" ".join(run))
        lines.append(Line(s.key, s.name, tuple(segments), tuple(points)))
    shown = list(categories) if axis_labels is None else list(axis_labels)
    return LineChart(
        width=width,
        height=height,
        left=left,
        top=top,
        right=right,
        bottom=bottom,
        ticks=tuple(Tick(v, tick_fmt(v), r(bottom - v * scale)) for v in values),
        labels=_category_labels(shown, left, slot, bottom + FONT + 6),
        legend=tuple(Legend(s.key, s.name) for s in series),
        lines=tuple(lines),
    )


def bar_chart(
    categories: Sequence[str],
    series: Sequence[Series],
    *,
    stacked: bool = False,
    top_value: float | None = None,
    fmt: Formatter = plain,
    integer: bool = False,
) -> BarChart:
    """Horizontal bars, one row per category: the series side by side (grouped) or end to
    end (``stacked``). ``top_value`` fixes the axis's end (100 for percentages)."""
    left, right, top = LABEL_WIDTH, WIDTH - RIGHT - 8, TOP
    per_row = 1 if stacked else max(len(series), 1)
    row = per_row * BAR_HEIGHT + ROW_GAP
    bottom = top + row * len(categories)
    height = bottom + BOTTOM - 8
    if stacked:
        highest = max((sum(_value(s.values, i) for s in series) for i in range(len(categories))), default=0)
    else:
        highest = max((_value(s.values, i) for s in series for i in range(len(categories))), default=0)
    values = nice_ticks(top_value if top_value is not None else highest, integer=integer)
    scale = (right - left) / values[-1]
    rects: list[Rect] = []
    labels: list[Label] = []
    for i, category in enumerate(categories):
        y0 = top + i * row + ROW_GAP / 2
        text = category if len(category) <= LABEL_CHARS else category[: LABEL_CHARS - 1] + "…"
        full = category if text != category else ""
        labels.append(Label(text, left - 6, r(y0 + per_row * BAR_HEIGHT / 2), full=full, anchor="end"))
        start = float(left)
        for j, s in enumerate(series):
            value = _value(s.values, i)
            w = value * scale
            y = y0 if stacked else y0 + j * BAR_HEIGHT
            title = f"{category} · {s.name}: {fmt(value)}"
            if stacked:
                if value > 0:
                    rects.append(Rect(r(start), r(y), r(w), BAR_HEIGHT, s.key, title, value))
                start += w
            else:
                # A zero keeps a sliver, so a row reads "0", not "missing".
                rects.append(Rect(left, r(y), r(max(w, 1.0)), BAR_HEIGHT - 2, s.key, title, value))
    return BarChart(
        width=WIDTH,
        height=height,
        left=left,
        top=top,
        right=right,
        bottom=bottom,
        ticks=tuple(Tick(v, fmt(v), r(left + v * scale)) for v in values),
        labels=tuple(labels),
        legend=tuple(Legend(s.key, s.name) for s in series) if len(series) > 1 else (),
        rects=tuple(rects),
    )


def _plot_left(tick_labels: Sequence[str]) -> float:
    """Where a column or line chart's plot starts: ``LEFT``, or further right when the longest value
    label (about 0.6 em a character, ending 6 units left of the plot) would not fit ("$0.00050")."""
    longest = max((len(text) for text in tick_labels), default=0)
    return max(LEFT, r(longest * FONT * 0.6 + 8))


def _category_labels(texts: Sequence[str], left: float, slot: float, y: float) -> tuple[Label, ...]:
    """Labels centred under their slots; one that would run off an edge is aligned to it instead."""
    labels = []
    for i, text in enumerate(texts):
        if not text:
            continue
        x, half = left + (i + 0.5) * slot, len(text) * FONT * 0.3  # about 0.6 em a character
        if x + half > WIDTH - 1:
            labels.append(Label(text, WIDTH - 1, y, anchor="end"))
        elif x - half < 1:
            labels.append(Label(text, 1, y, anchor="start"))
        else:
            labels.append(Label(text, r(x), y))
    return tuple(labels)


def _value(values: Sequence[float | None], i: int) -> float:
    value = values[i] if i < len(values) else None
    return float(value) if value is not None else 0.0


@dataclass(frozen=True)
class Table:
    """The numbers a chart is drawn from, shown under it (**Table**)."""

    headers: tuple[str, ...]  # the first column names the row
    rows: tuple[tuple[str, ...], ...]
    links: tuple[str, ...] = ()  # where a row's first cell links to, if anywhere ("": nowhere)

    @property
    def entries(self) -> list[tuple[tuple[str, ...], str]]:
        return [(row, self.links[i] if i < len(self.links) else "") for i, row in enumerate(self.rows)]


@dataclass(frozen=True)
class Panel:
    """One chart of a page with its title, its summary for screen readers and its table
    (``templates/components/chart.html`` draws it)."""

    slug: str  # the figure's id: chart-<slug>
    title: str
    summary: str  # one sentence for screen readers (the SVG's <desc>)
    kind: str  # "columns", "line" or "bars": the component that draws ``chart``
    chart: ColumnChart | LineChart | BarChart | None  # None: nothing to draw
    empty: str  # what the panel says instead of a chart
    table: Table
