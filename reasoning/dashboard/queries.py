"""The operators' dashboard: what the flows of the last day and month add up to.

``operator_dashboard(now)`` runs five aggregate queries, whatever the number of flows:

1. flows opened per hour over the last 24 hours, by state (``generate_series`` of hours, so
   an hour without flows is a zero);
2. flows opened per day over the last 30 days, by state, with the p50 / p95 duration
   (``closed_at - created_at``) of those that closed, how many the guard blocked, and their cost;
3. per agent (the flow's ``agent``): flows by state and guard-blocked (an agent's durations are
   on the flow list filtered by it, which each agent's row links to);
4. closed flows by ``step_count`` (powers of two: 0, 1, 2-3, 4-7, … 64+);
5. tokens (``input_tokens``, ``output_tokens``, ``reasoning_tokens`` of steps) and cost by step
   agent and model.

Hours and days are the operator's (``settings.TIME_ZONE``); a flow is counted in the hour or
day it was opened, with its state now. Rates are over closed flows: an active flow has not
been decided yet, and the summary guard runs at close (``FlowSummary.blocked_share``).
The page (``reasoning.dashboard.page``) turns the numbers into charts, each with the table it
is drawn from.

Cost: over 1,000,000 flows of 30 days (and 200,000 steps reporting tokens) the five queries
take about 3 s together, the daily percentiles most (measured 2026-12-01 on the 2-core dev
machine): the page caches the result for a minute.
"""

from __future__ import annotations

import itertools
import zoneinfo
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db.models import Count, Q

from core.replica import reading_connection
from reasoning.models import ReasoningFlow

HOURS = 24


DAYS = 30


# The longest custom range (from/to on the page): a year of daily bars.
MAX_DAYS = 366


TOP_AGENTS = 12


TOP_USAGE = 12


# Lower bounds of the step-count buckets after "0" (``width_bucket`` thresholds).
STEP_BOUNDS = (1, 2, 4, 8, 16, 32, 64)


STATES = (ReasoningFlow.State.COMPLETED, ReasoningFlow.State.ABORTED, ReasoningFlow.State.ACTIVE)


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


def operator_dashboard(now: datetime, first: date | None = None, last: date | None = None) -> Dashboard:
    """The dashboard's numbers as of ``now``: five queries (see the module's docstring).

    The days are the last ``DAYS`` (today included), or ``first`` to ``last`` (the operator's
    dates, both included; ``last`` defaults to today, later days are cut at today); the hours are
    the 24 before the range's end (now, when the range ends today)."""
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
    return Dashboard(
        generated_at=now,
        time_zone=settings.TIME_ZONE,
        hours=tuple(_hours(first_hour, last_hour, zone)),
        days=tuple(_days(first_day, last_day, zone, until)),
        agents=tuple(_agents(first_day, until)),
        step_buckets=tuple(_step_buckets(first_day, until)),
        usage=tuple(_usage(first_day, until)),
        **labels,
    )


def _midnight(day: date, zone: zoneinfo.ZoneInfo) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=zone)


def _day(day: date) -> str:
    return f"{day:%b} {day.day}"


def _params(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo, until: datetime) -> dict[str, str | datetime]:
    return {
        "first": first,
        "last": last,
        "until": until,  # the end of the last bucket (exclusive)
        "tz": zone.key,
        **{state.value: state.value for state in STATES},
    }


def _hours(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo) -> list[StateCounts]:
    until = last + timedelta(hours=1)
    with reading_connection().cursor() as cursor:
        cursor.execute(
            """
            WITH buckets AS (
                SELECT generate_series(%(first)s::timestamptz AT TIME ZONE %(tz)s,
                                       %(last)s::timestamptz AT TIME ZONE %(tz)s, interval '1 hour') AS bucket
            ), opened AS (
                SELECT date_trunc('hour', created_at AT TIME ZONE %(tz)s) AS bucket,
                       count(*) FILTER (WHERE flow_state = %(completed)s) AS completed,
                       count(*) FILTER (WHERE flow_state = %(aborted)s) AS aborted,
                       count(*) FILTER (WHERE flow_state = %(active)s) AS active
                FROM reasoning_flow WHERE created_at >= %(first)s AND created_at < %(until)s GROUP BY 1
            )
            SELECT buckets.bucket, coalesce(completed, 0), coalesce(aborted, 0), coalesce(active, 0)
            FROM buckets LEFT JOIN opened USING (bucket) ORDER BY buckets.bucket
            """,
            _params(first, last, zone, until),
        )
        return [StateCounts(start.replace(tzinfo=zone), c, a, o) for start, c, a, o in cursor.fetchall()]


def _days(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo, until: datetime) -> list[Day]:
    with reading_connection().cursor() as cursor:
        cursor.execute(
            """
            WITH buckets AS (
                SELECT generate_series(%(first)s::timestamptz AT TIME ZONE %(tz)s,
                                       %(last)s::timestamptz AT TIME ZONE %(tz)s, interval '1 day') AS bucket
            ), opened AS (
                SELECT date_trunc('day', created_at AT TIME ZONE %(tz)s) AS bucket,
                       count(*) FILTER (WHERE flow_state = %(completed)s) AS completed,
                       count(*) FILTER (WHERE flow_state = %(aborted)s) AS aborted,
                       count(*) FILTER (WHERE flow_state = %(active)s) AS active,
                       count(*) FILTER (WHERE patient_safe_summary IS FALSE) AS blocked,
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM closed_at - created_at)::float8)
                           AS p50,
                       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM closed_at - created_at)::float8)
                           AS p95,
                       sum(cost_usd)::float8 AS cost
                FROM reasoning_flow WHERE created_at >= %(first)s AND created_at < %(until)s GROUP BY 1
            )
            SELECT buckets.bucket, coalesce(completed, 0), coalesce(aborted, 0), coalesce(active, 0),
                   coalesce(blocked, 0), p50, p95, cost
            FROM buckets LEFT JOIN opened USING (bucket) ORDER BY buckets.bucket
            """,
            _params(first, last, zone, until),
        )
        return [
            Day(start.replace(tzinfo=zone), c, a, o, b, p50, p95, cost)
            for start, c, a, o, b, p50, p95, cost in cursor.fetchall()
        ]


def _agents(since: datetime, until: datetime) -> list[AgentFlows]:
    # Counts only: percentiles per agent would double this query's time (a sort per agent).
    rows = (
        ReasoningFlow.objects.filter(created_at__gte=since, created_at__lt=until)
        .values("agent")
        .annotate(
            flows=Count("id"),
            completed=Count("id", filter=Q(flow_state=ReasoningFlow.State.COMPLETED)),
            aborted=Count("id", filter=Q(flow_state=ReasoningFlow.State.ABORTED)),
            active=Count("id", filter=Q(flow_state=ReasoningFlow.State.ACTIVE)),
            # The flow search's "blocked" filter: the guard refused a summary at close.
            blocked=Count("id", filter=Q(patient_safe_summary=False)),
        )
        .order_by("-flows", "agent")[:TOP_AGENTS]
    )
    return [AgentFlows(**row) for row in rows]


def step_bucket_labels() -> list[str]:
    """The bucket labels: 0, then each bound up to the next (2-3), then 64+."""
    labels = ["0"]
    for low, next_low in itertools.pairwise(STEP_BOUNDS):
        labels.append(str(low) if next_low == low + 1 else f"{low}-{next_low - 1}")
    return [*labels, f"{STEP_BOUNDS[-1]}+"]


def _step_buckets(since: datetime, until: datetime) -> list[StepBucket]:
    with reading_connection().cursor() as cursor:
        # width_bucket: 0 below the first bound (no steps), i for [bound i, bound i+1), the last for 64+.
        cursor.execute(
            "SELECT width_bucket(step_count, %s::int[]), count(*) FROM reasoning_flow "
            "WHERE created_at >= %s AND created_at < %s AND flow_state <> %s GROUP BY 1",
            [list(STEP_BOUNDS), since, until, ReasoningFlow.State.ACTIVE.value],
        )
        counts = dict(cursor.fetchall())
    return [StepBucket(label, counts.get(i, 0)) for i, label in enumerate(step_bucket_labels())]


def _usage(since: datetime, until: datetime) -> list[Usage]:
    with reading_connection().cursor() as cursor:
        cursor.execute(
            """
            SELECT agent, model, count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                   coalesce(sum(reasoning_tokens), 0), sum(cost_usd)::float8
            FROM reasoning_step
            WHERE created_at >= %s AND created_at < %s
              AND (input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR reasoning_tokens IS NOT NULL)
            GROUP BY agent, model
            ORDER BY coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0)
                     + coalesce(sum(reasoning_tokens), 0) DESC, agent, model
            LIMIT %s
            """,
            [since, until, TOP_USAGE],
        )
        return [Usage(*row) for row in cursor.fetchall()]
