"""The dashboard's five aggregates computed from ``reasoning_flow`` and ``reasoning_step`` directly,
as the dashboard read them before its rollups (``reasoning.rollups``): what it reads when
``TIME_ZONE`` is not a whole number of hours from UTC over the range (its hours and days are then
not unions of UTC hours), and the reference the benchmark and the tests compare the rollups with.
Exact (``percentile_cont``), and 1.4-2.2 s over 1,000,000 flows (docs/performance.md, "Dashboard").

Each function returns the rows ``reasoning.dashboard.queries`` turns into its dataclasses, in the
same shape as the rollups' reads there.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

from django.db.models import Count, Q

from core.replica import reading_connection
from reasoning.models import ReasoningFlow
from reasoning.rollups import STEP_BOUNDS

HourRow = tuple[datetime, int, int, int]  # local start (naive), completed, aborted, active
# local start (naive), completed, aborted, active, blocked, p50, p95 (seconds), cost
DayRow = tuple[datetime, int, int, int, int, float | None, float | None, float | None]
AgentRow = tuple[str, int, int, int, int, int]  # agent, flows, completed, aborted, active, blocked
# agent, model, steps, input, output and reasoning tokens, cost
UsageRow = tuple[str, str, int, int, int, int, float | None]

STATES = (ReasoningFlow.State.COMPLETED, ReasoningFlow.State.ABORTED, ReasoningFlow.State.ACTIVE)


def params(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo, until: datetime) -> dict[str, str | datetime]:
    return {
        "first": first,
        "last": last,
        "until": until,  # the end of the last bucket (exclusive)
        "tz": zone.key,
        **{state.value: state.value for state in STATES},
    }


def hours(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo) -> list[HourRow]:
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
            params(first, last, zone, until),
        )
        return list(cursor.fetchall())


def days(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo, until: datetime) -> list[DayRow]:
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
            params(first, last, zone, until),
        )
        return list(cursor.fetchall())


def agents(since: datetime, until: datetime, limit: int) -> list[AgentRow]:
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
        .order_by("-flows", "agent")
        .values_list("agent", "flows", "completed", "aborted", "active", "blocked")[:limit]
    )
    return list(rows)


def step_buckets(since: datetime, until: datetime) -> dict[int, int]:
    """Closed flows per bucket: 0 below the first bound (no steps), i for [bound i, bound i+1), the last for 64+."""
    with reading_connection().cursor() as cursor:
        cursor.execute(
            "SELECT width_bucket(step_count, %s::int[]), count(*) FROM reasoning_flow "
            "WHERE created_at >= %s AND created_at < %s AND flow_state <> %s GROUP BY 1",
            [list(STEP_BOUNDS), since, until, ReasoningFlow.State.ACTIVE.value],
        )
        return dict(cursor.fetchall())


def usage(since: datetime, until: datetime, limit: int) -> list[UsageRow]:
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
            [since, until, limit],
        )
        return list(cursor.fetchall())
