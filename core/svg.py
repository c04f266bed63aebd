"""One SVG drawing kit for the server-drawn pictures: scales, axes, bars, lines and paths.

Every picture of the product (the dashboard's and the evaluation page's charts, the flow
page's waterfall, the step DAG, the turn graph, the agent pages' bars and sparklines, the
Decision Dimensions radar) is drawn on the server as SVG in user units and scales to its
container (``viewBox``): no chart library, no JavaScript. Their geometry is built from the
pieces here, so a scale, a tick or a curve is computed one way everywhere:

* ``Scale``: a linear map from values to user units (``clamp`` keeps a value in range);
* ``nice_ticks`` / ``duration_ticks``: axis values at "nice" steps (1, 2, 2.5 or 5 times a
  power of ten), with ``plain`` and ``percent`` labels;
* ``bar_length``: a value as a bar's length, at least a visible minimum when asked;
* ``points`` / ``sparkline``: polyline points (a sparkline skips missing values);
* ``polar``: a point on a spoke of a radar;
* ``s_curve`` / ``elbow``: the edges of the DAG and of the turn graph.

The arrowheads those edges end with are defined once, in
``templates/components/svg_arrow_markers.html``. Coordinates are rounded to a tenth of a
unit (``r``): enough for the eye, short in the page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

Formatter = Callable[[float], str]


def r(value: float) -> float:
    """A coordinate rounded to a tenth of a user unit."""
    return round(value, 1)


@dataclass(frozen=True)
class Scale:
    """``domain`` (``lo``..``hi``) onto ``start``..``end`` (user units; ``end`` < ``start`` flips it,
    as a vertical value axis does). An empty domain maps everything to ``start``."""

    lo: float
    hi: float
    start: float
    end: float
    clamp: bool = False

    def __call__(self, value: float) -> float:
        span = self.hi - self.lo
        if span == 0:
            return self.start
        share = (value - self.lo) / span
        if self.clamp:
            share = min(max(share, 0.0), 1.0)
        return self.start + share * (self.end - self.start)

    def length(self, value: float) -> float:
        """The distance ``value`` covers from the domain's start (a bar's length)."""
        return abs(self(value) - self.start)


def nice_ticks(top: float, count: int = 4, *, integer: bool = False) -> list[float]:
    """Axis values from 0 up to the first nice value at or above ``top``, about ``count`` steps.

    ``integer``: steps of at least 1 (counts). ``top`` <= 0 (nothing to draw) gives [0, 1], so
    an all-zero chart still has an axis instead of dividing by zero.
    """
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    if integer:
        step = max(1.0, float(math.ceil(step)))
    steps = math.ceil(top / step - 1e-9)
    return [round(i * step, 10) for i in range(steps + 1)]


def plain(value: float) -> str:
    """A tick label: 3, 2.5, 1.5k, 12k, 3M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:g}{suffix}"
    return f"{value:g}"


def percent(value: float) -> str:
    """A share in percent, to one decimal where it has one: 25 %, 33.3 %."""
    return f"{round(value, 1):g} %"


def share(value: float) -> str:
    """A share of a whole, in percent, for reading rather than for an axis: whole percents from 1 %
    ("17 %"), one decimal below ("0.3 %": 4 aborts in 1,448 flows), and a share that is not zero
    never reads "0 %" ("<0.1 %": 1 in 10,000)."""
    if value == 0:
        return "0 %"
    if abs(value) < 0.1:
        return "<0.1 %"
    if abs(value) < 1:
        return f"{round(value, 1):g} %"
    return f"{round(value):d} %"


def usd(value: float) -> str:
    """A cost in US dollars for reading: cents from a cent ("$1.23", "$1,234.50", "$0.05"), two
    significant digits below ("$0.0035"), and a cost that is not zero never reads "$0.00"."""
    if value == 0:
        return "$0"
    if abs(value) >= 0.01:
        return f"${value:,.2f}"
    if abs(value) < 0.000001:
        return "<$0.000001"
    digits = max(2, 1 - math.floor(math.log10(abs(value))))  # two significant digits
    return f"${value:.{digits}f}"


def tokens(value: float) -> str:
    """A token count for reading: 812, 12,400, 1.2M."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.1f}M".replace(".0M", "M")
    return f"{round(value):,d}"


DURATION_UNITS = ((1.0, 0.001, "ms"), (120.0, 1.0, "s"), (7200.0, 60.0, "min"), (math.inf, 3600.0, "h"))


def duration_ticks(top_seconds: float, count: int = 4) -> tuple[list[float], Formatter]:
    """Ticks for seconds in one readable unit: nice values of ms, s, min or h, and their label."""
    _, size, unit = next(u for u in DURATION_UNITS if top_seconds < u[0])
    values = [v * size for v in nice_ticks(top_seconds / size, count)]
    return values, lambda seconds: f"{seconds / size:g} {unit}"


def bar_length(value: float | None, scale: Scale, *, minimum: float = 0.0) -> float:
    """``value`` as a bar's length on ``scale`` (clamped to it); None is no bar. A non-zero bar is
    at least ``minimum`` long, so a very short one stays visible."""
    if value is None:
        return 0.0
    length = scale.length(value)
    return r(max(length, minimum) if value else length)


def points(pairs: Iterable[tuple[float, float]]) -> str:
    """Polyline or polygon points: ``x,y x,y …``."""
    return " ".join(f"{r(x):g},{r(y):g}" for x, y in pairs)


def sparkline(values: Sequence[float | None], *, width: float, height: float, pad: float) -> str:
    """Polyline points for values in 0..1 spread evenly across ``width`` (one value: the middle),
    1 at the top; ``pad`` keeps 0, 1 and the stroke inside the box. A missing value is skipped
    (the line joins its neighbours)."""
    inner_w = width - 2 * pad
    x = Scale(0, max(len(values) - 1, 1), pad, pad + inner_w)
    y = Scale(0.0, 1.0, height - pad, pad, clamp=True)
    middle = pad + inner_w / 2
    return points(
        (x(i) if len(values) > 1 else middle, y(value)) for i, value in enumerate(values) if value is not None
    )


def polar(index: int, spokes: int, radius: float, centre: float) -> tuple[float, float]:
    """The point ``radius`` out along spoke ``index`` of ``spokes``, the first pointing up."""
    angle = -math.pi / 2 + index * 2 * math.pi / spokes
    return r(centre + radius * math.cos(angle)), r(centre + radius * math.sin(angle))


def s_curve(x1: float, y1: float, x2: float, y2: float) -> str:
    """Path commands for a vertical S-curve from (x1, y1) to (x2, y2): it leaves and arrives
    heading down (the pen is at (x1, y1))."""
    middle = (y1 + y2) / 2
    return f"C{x1:g},{middle:g} {x2:g},{middle:g} {x2:g},{y2:g}"


def elbow(x1: float, y1: float, lane_x: float, x2: float, y2: float) -> str:
    """A path from (x1, y1) across to a vertical lane at ``lane_x``, along it to ``y2``, then
    across to (x2, y2): right angles only, so lanes side by side never cross each other."""
    return f"M{x1:g},{y1:g} H{lane_x:g} V{y2:g} H{x2:g}"
