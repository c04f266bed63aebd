"""The operators' dashboard: what the flows of the last day and month add up to.

``operator_dashboard(now)`` runs five queries, whatever the number of flows:

1. flows opened per hour over the last 24 hours, by state (``generate_series`` of hours, so
   an hour without flows is a zero);
2. flows opened per day over the last 30 days, by state, with the p50 / p95 duration
   (``closed_at - created_at``) of those that closed, how many the guard blocked, and their cost;
3. per agent (the flow's ``agent``): flows by state and guard-blocked (an agent's durations are
   on the flow list filtered by it, which each agent's row links to);
4. closed flows by ``step_count`` (powers of two: 0, 1, 2-3, 4-7, ... 64+);
5. tokens (``input_tokens``, ``output_tokens``, ``reasoning_tokens`` of steps) and cost by step
   agent and model.

Hours and days are the operator's (``settings.TIME_ZONE``); a flow is counted in the hour or
day it was opened, with its state now. Rates are over closed flows: an active flow has not
been decided yet, and the summary guard runs at close (``FlowSummary.blocked_share``).
The page (``reasoning.dashboard.page``) turns the numbers into charts, each with the table it
is drawn from.

The queries read the per-hour rollups (``reasoning.rollups``): ``reasoning_flow_rollup`` for the
hours and days (counts, cost, step-count buckets, a duration histogram per hour),
``reasoning_flow_agent_rollup`` for the agents, ``reasoning_step_rollup`` for the usage. Each query
takes, in one statement, the rollup rows of the hours without a dirty mark and computes the hours
still marked (usually the current one: the job runs every minute) from ``reasoning_flow``, and
adds the usage still pending to the usage rollup: every count is exact and as fresh as the
flows. The percentiles are read from the merged duration histograms: within 2 % (or 1 ms) of
``percentile_cont``'s (``reasoning.rollups.percentile``).

A local hour or day is a set of UTC hours only when ``TIME_ZONE`` is a whole number of hours from
UTC at its bounds; otherwise (a zone such as Asia/Kolkata, UTC+05:30) the five aggregates are
computed from the flows and steps themselves (``reasoning.dashboard.direct``: exact, and seconds
over 1,000,000 flows). ``direct_queries=True`` asks for those (the benchmark's and the tests'
reference).

Cost: over 1,000,000 flows of 30 days (and 200,000 steps reporting tokens) the five queries take
70-100 ms together from the rollups (the daily percentiles most: 720 hourly histograms merged),
against 1.4-2.2 s from the flows (``bench/bench_dashboard.py``, 2026-12-05 on the 2-core dev machine;
docs/performance.md, "Dashboard"); the page still caches the result for a minute.
"""

from __future__ import annotations

import itertools
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from django.conf import settings

from reasoning.dashboard import direct, rollup_reads
from reasoning.dashboard.direct import AgentRow, DayRow, HourRow, UsageRow
from reasoning.rollups import STEP_BOUNDS

HOURS = 24


DAYS = 30


# The longest custom range (from/to on the page): a year of daily bars.
MAX_DAYS = 366


TOP_AGENTS = 12


TOP_USAGE = 12


NO_AGENT = "(no agent)"


NO_MODEL = "(no model)"


@dataclass(frozen=True)
class StateCounts:
    start: datetime  # the hour or day, in the operator's time zone
    completed: int
    aborted: int
    active: int

    @property
    def total(self) -> int:
        return self.completed + self.aborted + self.active


@dataclass(frozen=True)
class Day(StateCounts):
    blocked: int
    p50: float | None  # seconds, over the day's flows that closed
    p95: float | None
    cost: float | None = None  # US dollars, the day's flows that have a cost; None when none has

    @property
    def closed(self) -> int:
        return self.completed + self.aborted


@dataclass(frozen=True)
class AgentFlows:
    agent: str
    flows: int
    completed: int
    aborted: int
    active: int
    blocked: int

    @property
    def closed(self) -> int:
        return self.completed + self.aborted

    @property
    def abort_rate(self) -> float | None:
        """Percent of closed flows that were aborted."""
        return 100 * self.aborted / self.closed if self.closed else None

    @property
    def blocked_rate(self) -> float | None:
        """Percent of closed flows whose summary the guard blocked for patients."""
        return 100 * self.blocked / self.closed if self.closed else None


@dataclass(frozen=True)
class StepBucket:
    label: str  # "0", "1", "2-3", … "64+"
    flows: int


@dataclass(frozen=True)
class Usage:
    agent: str
    model: str
    steps: int
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    cost: float | None = None  # US dollars; None when no step of the pair has a known price

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens + self.reasoning_tokens


@dataclass(frozen=True)
class Dashboard:
    generated_at: datetime
    time_zone: str
    hours: tuple[StateCounts, ...]  # oldest first, the current hour last
    days: tuple[Day, ...]  # oldest first, today last
    agents: tuple[AgentFlows, ...]  # the agents with the most flows, most first
    step_buckets: tuple[StepBucket, ...]
    usage: tuple[Usage, ...]  # the agent/model pairs that used the most tokens, most first
    # How the page names the range of days and of hours: for a title ("last 30 days", "Nov 1 to
    # Nov 15, 2026") and inside a sentence ("in the last 30 days", "from Nov 1 to Nov 15, 2026").
    span: str = "last 30 days"
    within: str = "in the last 30 days"
    hours_span: str = "last 24 hours"
    hours_within: str = "in the last 24 hours"

    @property
    def flows(self) -> int:
        return sum(day.total for day in self.days)

    @property
    def empty(self) -> bool:
        return not self.flows and not self.usage

    def totals(self) -> dict[str, float | int | None]:
        completed = sum(day.completed for day in self.days)
        aborted = sum(day.aborted for day in self.days)
        blocked = sum(day.blocked for day in self.days)
        closed = completed + aborted
        return {
            "flows": self.flows,
            "completed": completed,
            "aborted": aborted,
            "active": sum(day.active for day in self.days),
            "abort_rate": 100 * aborted / closed if closed else None,
            "blocked_rate": 100 * blocked / closed if closed else None,
        }


def operator_dashboard(
    now: datetime, first: date | None = None, last: date | None = None, *, direct_queries: bool = False
) -> Dashboard:
    """The dashboard's numbers as of ``now``: five queries (see the module's docstring).

    The days are the last ``DAYS`` (today included), or ``first`` to ``last`` (the operator's
    dates, both included; ``last`` defaults to today, later days are cut at today); the hours are
    the 24 before the range's end (now, when the range ends today). ``direct_queries``: from the
    flows and steps, not the rollups."""
    zone = zoneinfo.ZoneInfo(settings.TIME_ZONE)
    local = now.astimezone(zone)
    today = local.date()
    custom = first is not None or last is not None
    last = min(last or today, today)
    first = first or last - timedelta(days=DAYS - 1)
    # Wall-clock arithmetic, as generate_series over local timestamps counts.
    first_day, last_day = _midnight(first, zone), _midnight(last, zone)
    until = _midnight(last + timedelta(days=1), zone)
    end = min(local, until - timedelta(microseconds=1))
    last_hour = end.replace(minute=0, second=0, microsecond=0)
    first_hour = (last_hour.replace(tzinfo=None) - timedelta(hours=HOURS - 1)).replace(tzinfo=zone)
    labels: dict[str, str] = {}
    if custom:
        span = f"{_day(first)} to {_day(last)}, {last.year}" if first != last else f"{_day(last)}, {last.year}"
        within = f"from {_day(first)} to {_day(last)}, {last.year}" if first != last else f"on {_day(last)}"
        labels = {"span": span, "within": within}
        if last != today:
            labels |= {
                "hours_span": f"last 24 hours of {_day(last)}",
                "hours_within": f"in the last 24 hours of {_day(last)}",
            }
    source: Source = direct
    if not direct_queries and _whole_hours(zone, first, last, first_hour, last_hour):
        source = rollup_reads
    steps = source.step_buckets(first_day, until)
    return Dashboard(
        generated_at=now,
        time_zone=settings.TIME_ZONE,
        hours=tuple(
            StateCounts(row[0].replace(tzinfo=zone), *row[1:]) for row in source.hours(first_hour, last_hour, zone)
        ),
        days=tuple(Day(row[0].replace(tzinfo=zone), *row[1:]) for row in source.days(first_day, last_day, zone, until)),
        agents=tuple(AgentFlows(*row) for row in source.agents(first_day, until, TOP_AGENTS)),
        step_buckets=tuple(StepBucket(label, steps.get(i, 0)) for i, label in enumerate(step_bucket_labels())),
        usage=tuple(Usage(*row) for row in source.usage(first_day, until, TOP_USAGE)),
        **labels,
    )


class Source(Protocol):
    """Where the five queries read: ``rollup_reads`` (the rollups) or ``direct`` (the flows and steps)."""

    def hours(self, first: datetime, last: datetime, zone: zoneinfo.ZoneInfo) -> list[HourRow]: ...

    def days(self, first: datetime, last: datetime, zone: zoneinfo.ZoneInfo, until: datetime) -> list[DayRow]: ...

    def agents(self, since: datetime, until: datetime, limit: int) -> list[AgentRow]: ...

    def step_buckets(self, since: datetime, until: datetime) -> dict[int, int]: ...

    def usage(self, since: datetime, until: datetime, limit: int) -> list[UsageRow]: ...


def _whole_hours(zone: zoneinfo.ZoneInfo, first: date, last: date, first_hour: datetime, last_hour: datetime) -> bool:
    """Whether the range's local days and hours are sets of UTC hours: the zone is a whole number of
    hours from UTC at every midnight of the range and every hour of the 24."""
    moments = [_midnight(first + timedelta(days=n), zone) for n in range((last - first).days + 2)]
    hour = first_hour.astimezone(UTC)
    while hour <= last_hour.astimezone(UTC) + timedelta(hours=1):
        moments.append(hour.astimezone(zone))
        hour += timedelta(hours=1)
    return all((moment.utcoffset() or timedelta()) % timedelta(hours=1) == timedelta() for moment in moments)


def _midnight(day: date, zone: zoneinfo.ZoneInfo) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone)


def _day(day: date) -> str:
    return f"{day:%b} {day.day}"


def step_bucket_labels() -> list[str]:
    """The bucket labels: 0, then each bound up to the next (2-3), then 64+."""
    labels = ["0"]
    for low, next_low in itertools.pairwise(STEP_BOUNDS):
        labels.append(str(low) if next_low == low + 1 else f"{low}-{next_low - 1}")
    return [*labels, f"{STEP_BOUNDS[-1]}+"]
