"""The operators' dashboard page (``/dashboard/admin/reasoning/``), and where a login lands.

``panels(dashboard)`` turns the numbers of ``reasoning.dashboard.queries`` into the page's
charts (``core.charts``), each with the table it is drawn from. The numbers are cached
for a minute (one entry per time zone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_safe

from core import charts, svg
from core.access import is_operator, operator_required
from core.charts import Panel, Table
from core.errors import InvalidInput
from core.templatetags.durations import format_duration
from reasoning.dashboard import queries
from reasoning.dashboard.queries import NO_AGENT, NO_MODEL, AgentFlows, Dashboard, Day, StateCounts, StepBucket, Usage
from reasoning.rollups import DURATION_ERROR


@login_required
@require_safe
def dashboard_home(request: HttpRequest) -> HttpResponse:
    """Where a login lands: operators on their dashboard, everyone else on their profile."""
    return redirect("reasoning-dashboard" if is_operator(request.user) else "patient-profile")


DASHBOARD_CACHE_SECONDS = 60


@operator_required
@require_safe
def reasoning_dashboard_page(request: HttpRequest) -> HttpResponse:
    """The operators' landing page: links to the console, the flow list and the library, and
    charts of the last day's and month's flows (``reasoning.dashboard``). The numbers are
    cached for a minute (one entry per time zone): they may be up to a minute old."""
    error = ""
    try:
        first, last = _range(request.GET)
    except InvalidInput as exc:
        error = f"{exc.field}: {exc.detail}"
        first = last = None
    # The version changes with the cached dataclasses' shape, so a deploy never unpickles an old one.
    key = f"reasoning-dashboard:v2:{settings.TIME_ZONE}:{first}:{last}"
    data = cache.get(key)
    if data is None:
        data = queries.operator_dashboard(timezone.now(), first, last)
        cache.set(key, data, DASHBOARD_CACHE_SECONDS)
    context = {
        "data": data,
        "totals": data.totals(),
        "panels": panels(data),
        "error": error,
        "range": {
            "from": "" if first is None else first.isoformat(),
            "to": "" if last is None else last.isoformat(),
            "days": request.GET.get("days", "") if first is None and not error else "",
        },
        "presets": PRESETS,
    }
    return render(request, "reasoning/dashboard.html", context)


# The presets beside the custom range: the last N days, today included.
PRESETS = (7, 30, 90)


def _range(params: Mapping[str, str]) -> tuple[date | None, date | None]:
    """The page's days: ``days`` (a preset), or ``from`` and ``to`` (dates, both included; either
    may be left out). None, None: the default (the last 30 days)."""
    first = _date(params.get("from", ""), "from")
    last = _date(params.get("to", ""), "to")
    if first is None and last is None and (days := params.get("days", "").strip()):
        if days not in {str(n) for n in PRESETS}:
            raise InvalidInput(f"must be one of {', '.join(map(str, PRESETS))}", field="days")
        today = timezone.localdate()
        return today - timedelta(days=int(days) - 1), today
    if first is not None and last is not None:
        if last < first:
            raise InvalidInput("must not be before from", field="to")
        if (last - first).days >= queries.MAX_DAYS:
            raise InvalidInput(f"the range may span at most {queries.MAX_DAYS} days", field="to")
    if first is not None and last is None:
        last = min(first + timedelta(days=queries.MAX_DAYS - 1), timezone.localdate())
    if first is not None and first > timezone.localdate():
        raise InvalidInput("must not be in the future", field="from")
    return first, last


def _date(raw: str, field: str) -> date | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        day = date.fromisoformat(raw)
    except ValueError:
        day = None
    if day is None or len(raw) != 10:
        raise InvalidInput("must be a date, e.g. 2026-11-01", field=field)
    return day


STATE_SERIES = (("completed", "completed"), ("aborted", "aborted"), ("active", "active"))


def panels(data: Dashboard) -> list[Panel]:
    days = Period(data.span, data.within)
    return [
        _hourly(data.hours, Period(data.hours_span, data.hours_within)),
        _daily(data.days, days),
        _durations(data.days, days),
        _rates(data.agents, data.days[0].start, data.days[-1].start, days),
        _steps(data.step_buckets, days),
        _costs(data.days, days),
        _cost_by(data.usage, days),
        _tokens(data.usage, days),
    ]


@dataclass(frozen=True)
class Period:
    """A range as a title names it ("last 30 days") and as a sentence does ("in the last 30 days")."""

    span: str
    within: str


def _state_series(rows: Sequence[StateCounts]) -> list[charts.Series]:
    return [charts.Series(name, key, [getattr(row, key) for row in rows]) for name, key in STATE_SERIES]


def _state_table(rows: Sequence[StateCounts], labels: Sequence[str]) -> Table:
    return Table(
        ("Opened", "Completed", "Aborted", "Active", "Total"),
        tuple(
            (label, str(row.completed), str(row.aborted), str(row.active), str(row.total))
            for label, row in zip(labels, rows, strict=True)
        ),
    )


def _state_summary(rows: Sequence[StateCounts], period: str) -> str:
    completed, aborted, active = (sum(getattr(row, key) for row in rows) for _, key in STATE_SERIES)
    total = completed + aborted + active
    return f"{total} flows opened {period}: {completed} completed, {aborted} aborted, {active} active."


def _hourly(hours: Sequence[StateCounts], period: Period) -> Panel:
    labels = [f"{hour.start:%H}:00" for hour in hours]
    table_labels = [f"{hour.start:%b} {hour.start.day}, {hour.start:%H}:00" for hour in hours]
    any_flows = any(hour.total for hour in hours)
    return Panel(
        slug="hourly",
        title=f"Flows per hour, {period.span}",
        summary=_state_summary(hours, period.within),
        kind="columns",
        chart=charts.column_chart(
            labels,
            _state_series(hours),
            axis_labels=[label if hour.start.hour % 6 == 0 else "" for label, hour in zip(labels, hours, strict=True)],
        )
        if any_flows
        else None,
        empty=f"No flows were opened {period.within}.",
        table=_state_table(hours, table_labels),
    )


def _day_labels(days: Sequence[StateCounts]) -> tuple[list[str], list[str]]:
    """Short labels (every seventh day, counting back from today, on the axis) and ISO dates."""
    short = [f"{day.start:%b} {day.start.day}" for day in days]
    axis = [label if (len(days) - 1 - i) % 7 == 0 else "" for i, label in enumerate(short)]
    return axis, [f"{day.start:%Y-%m-%d}" for day in days]


def _daily(days: Sequence[Day], period: Period) -> Panel:
    axis, dates = _day_labels(days)
    return Panel(
        slug="daily",
        title=f"Flows per day, {period.span}",
        summary=_state_summary(days, period.within),
        kind="columns",
        chart=charts.column_chart(dates, _state_series(days), axis_labels=axis)
        if any(day.total for day in days)
        else None,
        empty=f"No flows were opened {period.within}.",
        table=_state_table(days, dates),
    )


def _duration(seconds: float | None) -> str:
    return "—" if seconds is None else format_duration(seconds)


def _durations(days: Sequence[Day], period: Period) -> Panel:
    axis, dates = _day_labels(days)
    closed = [day for day in days if day.closed]
    slowest = max(closed, key=lambda day: day.p95 or 0, default=None)
    summary = (
        f"The slowest day was {slowest.start:%Y-%m-%d}: p95 {_duration(slowest.p95)}, p50 {_duration(slowest.p50)}."
        if slowest is not None
        else "No flows closed."
    )
    return Panel(
        slug="durations",
        title=f"Flow duration per day (p50 and p95), {period.span}",
        summary="Median and 95th percentile duration of the flows opened each day that closed (read from "
        f"histograms: within {DURATION_ERROR * 100:.0f} % of the exact figures). {summary}",
        kind="line",
        chart=charts.line_chart(
            dates,
            [
                charts.Series("p50", "p50", [day.p50 for day in days]),
                charts.Series("p95", "p95", [day.p95 for day in days]),
            ],
            axis_labels=axis,
            fmt=format_duration,
            axis=svg.duration_ticks,
        )
        if closed
        else None,
        empty=f"No flows opened {period.within} have closed yet.",
        table=Table(
            ("Opened", "Closed flows", "p50", "p95"),
            tuple(
                (date, str(day.closed), _duration(day.p50), _duration(day.p95))
                for date, day in zip(dates, days, strict=True)
            ),
        ),
    )


def _rate(value: float | None) -> str:
    return "—" if value is None else svg.share(value)


def _rates(agents: Sequence[AgentFlows], since: datetime, last_day: datetime, period: Period) -> Panel:
    decided = [agent for agent in agents if agent.closed]
    names = [agent.agent or NO_AGENT for agent in decided]
    return Panel(
        slug="rates",
        title="Abort rate and guard-blocked rate by agent",
        summary=f"Of each agent's closed flows {period.within}, the share aborted and the share whose summary "
        "the patient-safety guard blocked. "
        + "; ".join(
            f"{name}: {_rate(agent.abort_rate)} aborted, {_rate(agent.blocked_rate)} blocked"
            for name, agent in zip(names, decided, strict=True)
        ),
        kind="bars",
        chart=charts.bar_chart(
            names,
            [
                charts.Series("abort rate", "abort", [agent.abort_rate for agent in decided]),
                charts.Series("guard-blocked rate", "blocked", [agent.blocked_rate for agent in decided]),
            ],
            top_value=100,
            fmt=svg.percent,
        )
        if decided
        else None,
        empty=f"No flows opened {period.within} have closed yet.",
        table=Table(
            ("Agent", "Flows", "Closed", "Aborted", "Abort rate", "Blocked", "Blocked rate"),
            tuple(
                (
                    agent.agent or NO_AGENT,
                    str(agent.flows),
                    str(agent.closed),
                    str(agent.aborted),
                    _rate(agent.abort_rate),
                    str(agent.blocked),
                    _rate(agent.blocked_rate),
                )
                for agent in agents
            ),
            # The agent's flows of the same days on the flow list, with their duration percentiles.
            tuple(
                reverse("admin-flow-list")
                + "?"
                + urlencode(
                    {
                        "agent": agent.agent,
                        "created_after": since.isoformat(),
                        "created_before": (last_day + timedelta(days=1)).isoformat(),
                    }
                )
                if agent.agent
                else ""
                for agent in agents
            ),
        ),
    )


def _steps(buckets: Sequence[StepBucket], period: Period) -> Panel:
    total = sum(bucket.flows for bucket in buckets)
    busiest = max(buckets, key=lambda bucket: bucket.flows)
    return Panel(
        slug="steps",
        title=f"Steps per flow, closed flows opened {period.within}",
        summary=f"{total} closed flows by their number of steps; the most common step count is {busiest.label} "
        f"({busiest.flows} flows).",
        kind="columns",
        chart=charts.column_chart(
            [bucket.label for bucket in buckets], [charts.Series("closed flows", "steps", [b.flows for b in buckets])]
        )
        if total
        else None,
        empty=f"No flows opened {period.within} have closed yet.",
        table=Table(("Steps", "Closed flows"), tuple((bucket.label, str(bucket.flows)) for bucket in buckets)),
    )


TOKEN_SERIES = (("input", "input_tokens"), ("output", "output_tokens"), ("reasoning", "reasoning_tokens"))


def _tokens(usage: Sequence[Usage], period: Period) -> Panel:
    names = [f"{row.agent} · {row.model or NO_MODEL}" for row in usage]
    return Panel(
        slug="tokens",
        title=f"Tokens by agent and model, {period.span}",
        summary="Input, output and reasoning tokens that steps reported, by the step's agent and model. "
        + "; ".join(f"{name}: {row.total} tokens" for name, row in zip(names, usage, strict=True)),
        kind="bars",
        chart=charts.bar_chart(
            names,
            [charts.Series(name, name, [getattr(row, field) for row in usage]) for name, field in TOKEN_SERIES],
            stacked=True,
            integer=True,
        )
        if usage
        else None,
        empty=f"No steps {period.within} reported token usage.",
        table=Table(
            ("Agent", "Model", "Steps", "Input", "Output", "Reasoning", "Total"),
            tuple(
                (
                    row.agent,
                    row.model or NO_MODEL,
                    str(row.steps),
                    str(row.input_tokens),
                    str(row.output_tokens),
                    str(row.reasoning_tokens),
                    str(row.total),
                )
                for row in usage
            ),
        ),
    )


def _usd(value: float | None) -> str:
    return "—" if value is None else svg.usd(value)


def _costs(days: Sequence[Day], period: Period) -> Panel:
    axis, dates = _day_labels(days)
    priced = [day for day in days if day.cost is not None]
    total = sum(day.cost or 0 for day in priced)
    costliest = max(priced, key=lambda day: day.cost or 0, default=None)
    return Panel(
        slug="costs",
        title=f"Cost per day, {period.span}",
        summary=f"What the model calls of the flows opened each day cost, at each call's price on its day: "
        f"{svg.usd(total)} in all"
        + (f"; the costliest day was {costliest.start:%Y-%m-%d} ({_usd(costliest.cost)})." if costliest else ".")
        + " Calls to a model without a known price count no cost.",
        kind="columns",
        chart=charts.column_chart(
            dates,
            [charts.Series("cost (USD)", "cost", [day.cost or 0 for day in days])],
            axis_labels=axis,
            fmt=svg.usd,
            integer=False,
        )
        if priced
        else None,
        empty=f"No model call {period.within} has a known price.",
        table=Table(
            ("Opened", "Flows", "Cost"),
            tuple((date, str(day.total), _usd(day.cost)) for date, day in zip(dates, days, strict=True)),
        ),
    )


def _cost_by(usage: Sequence[Usage], period: Period) -> Panel:
    rows = sorted(usage, key=lambda row: (row.cost is None, -(row.cost or 0)))
    priced = [row for row in rows if row.cost is not None]
    names = [f"{row.agent} · {row.model or NO_MODEL}" for row in priced]
    unpriced = sorted({row.model for row in rows if row.cost is None and row.model})
    return Panel(
        slug="cost-by",
        title=f"Cost by agent and model, {period.span}",
        summary="What each agent's calls to each model cost. "
        + "; ".join(f"{name}: {svg.usd(row.cost or 0)}" for name, row in zip(names, priced, strict=True))
        + (f". No known price for {', '.join(unpriced)}: shown as —." if unpriced else ""),
        kind="bars",
        chart=charts.bar_chart(names, [charts.Series("cost (USD)", "cost", [row.cost for row in priced])], fmt=svg.usd)
        if priced
        else None,
        empty=f"No model call {period.within} has a known price.",
        table=Table(
            ("Agent", "Model", "Calls", "Tokens", "Cost"),
            tuple(
                (row.agent, row.model or NO_MODEL, str(row.steps), svg.tokens(row.total), _usd(row.cost))
                for row in rows
            ),
        ),
    )
