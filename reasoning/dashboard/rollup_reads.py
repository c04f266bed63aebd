"""The dashboard's five queries over the per-hour rollups (``reasoning.rollups``), in the row shapes
of ``reasoning.dashboard.direct`` (which computes them from the flows and steps themselves).

Each flow query reads, in one statement (one snapshot), the rollup rows of the range's hours that
no dirty mark names and the same aggregates computed from ``reasoning_flow`` for the hours a mark
names (``rollups.flow_hours``, ``rollups.agent_hours``: the job's own SQL): exact counts. The
usage query adds the usage still pending to the usage rollup. Only for a ``TIME_ZONE`` whose hours
and days are sets of UTC hours (``reasoning.dashboard.queries`` checks).
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta

from core.replica import reading_connection
from reasoning import rollups
from reasoning.dashboard.direct import AgentRow, DayRow, HourRow, UsageRow

# The hours with a dirty mark in [first, until), and the flow rollup's rows of every hour of it:
# the stored ones for the others, computed from reasoning_flow for those.
_DIRTY = """
dirty AS (
    SELECT DISTINCT hour FROM reasoning_flow_rollup_dirty WHERE hour >= %(first)s AND hour < %(until)s
)"""
_FLOW_ROWS = f"""{_DIRTY}, rolled AS (
    SELECT {rollups.FLOW_COLUMNS} FROM reasoning_flow_rollup
    WHERE hour >= %(first)s AND hour < %(until)s AND hour NOT IN (SELECT hour FROM dirty)
    UNION ALL
    SELECT * FROM ({rollups.flow_hours("dirty")}) live
)"""  # noqa: S608 (constants of this code base)


def hours(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo) -> list[HourRow]:
    with reading_connection().cursor() as cursor:
        cursor.execute(
            f"""
            WITH buckets AS (
                SELECT generate_series(%(first)s::timestamptz AT TIME ZONE %(tz)s,
                                       %(last)s::timestamptz AT TIME ZONE %(tz)s, interval '1 hour') AS bucket
            ), {_FLOW_ROWS}, opened AS (
                SELECT hour AT TIME ZONE %(tz)s AS bucket, sum(completed) AS completed, sum(aborted) AS aborted,
                       sum(active) AS active
                FROM rolled GROUP BY 1
            )
            SELECT buckets.bucket, coalesce(completed, 0), coalesce(aborted, 0), coalesce(active, 0)
            FROM buckets LEFT JOIN opened USING (bucket) ORDER BY buckets.bucket
            """,  # noqa: S608 (constants of this code base)
            {"first": first, "last": last, "until": last + timedelta(hours=1), "tz": zone.key},
        )
        return list(cursor.fetchall())


def days(first: datetime, last: datetime, zone: zoneinfo.ZoneInfo, until: datetime) -> list[DayRow]:
    with reading_connection().cursor() as cursor:
        cursor.execute(
            f"""
            WITH buckets AS (
                SELECT generate_series(%(first)s::timestamptz AT TIME ZONE %(tz)s,
                                       %(last)s::timestamptz AT TIME ZONE %(tz)s, interval '1 day') AS bucket
            ), {_FLOW_ROWS}, opened AS (
                SELECT date_trunc('day', hour AT TIME ZONE %(tz)s) AS bucket, sum(completed) AS completed,
                       sum(aborted) AS aborted, sum(active) AS active, sum(blocked) AS blocked,
                       sum(cost)::float8 AS cost
                FROM rolled GROUP BY 1
            ), timed AS (
                SELECT bucket, array_agg(duration ORDER BY duration) AS durations,
                       array_agg(flows ORDER BY duration) AS flows
                FROM (
                    SELECT r.bucket, d.duration, sum(d.flows) AS flows
                    FROM (SELECT date_trunc('day', hour AT TIME ZONE %(tz)s) AS bucket, duration_buckets,
                                 duration_counts FROM rolled) r,
                         unnest(r.duration_buckets, r.duration_counts) AS d(duration, flows)
                    GROUP BY 1, 2
                ) merged
                GROUP BY bucket
            )
            SELECT buckets.bucket, coalesce(completed, 0), coalesce(aborted, 0), coalesce(active, 0),
                   coalesce(blocked, 0), timed.durations, timed.flows, cost
            FROM buckets LEFT JOIN opened USING (bucket) LEFT JOIN timed USING (bucket) ORDER BY buckets.bucket
            """,  # noqa: S608 (constants of this code base)
            {"first": first, "last": last, "until": until, "tz": zone.key},
        )
        rows = cursor.fetchall()
    return [
        (
            start,
            completed,
            aborted,
            active,
            blocked,
            rollups.percentile(durations or [], flows or [], 0.5),
            rollups.percentile(durations or [], flows or [], 0.95),
            cost,
        )
        for start, completed, aborted, active, blocked, durations, flows, cost in rows
    ]


def agents(since: datetime, until: datetime, limit: int) -> list[AgentRow]:
    with reading_connection().cursor() as cursor:
        cursor.execute(
            f"""
            WITH {_DIRTY}, rolled AS (
                SELECT agent, completed, aborted, active, blocked FROM reasoning_flow_agent_rollup
                WHERE hour >= %(first)s AND hour < %(until)s AND hour NOT IN (SELECT hour FROM dirty)
                UNION ALL
                SELECT agent, completed, aborted, active, blocked FROM ({rollups.agent_hours("dirty")}) live
            )
            SELECT agent, sum(completed + aborted + active) AS flows, sum(completed), sum(aborted), sum(active),
                   sum(blocked)
            FROM rolled GROUP BY agent ORDER BY flows DESC, agent LIMIT %(limit)s
            """,  # noqa: S608 (constants of this code base)
            {"first": since, "until": until, "limit": limit},
        )
        return [(agent, *map(int, counts)) for agent, *counts in cursor.fetchall()]


def step_buckets(since: datetime, until: datetime) -> dict[int, int]:
    """Closed flows per bucket: 0 for no steps, i for [STEP_BOUNDS[i-1], STEP_BOUNDS[i]), the last for 64+."""
    with reading_connection().cursor() as cursor:
        cursor.execute(
            f"""
            WITH {_FLOW_ROWS}
            SELECT s.bucket - 1, sum(s.flows)
            FROM rolled, unnest(rolled.step_buckets) WITH ORDINALITY AS s(flows, bucket)
            GROUP BY 1
            """,  # noqa: S608 (constants of this code base)
            {"first": since, "until": until},
        )
        return {bucket: int(flows) for bucket, flows in cursor.fetchall()}


def usage(since: datetime, until: datetime, limit: int) -> list[UsageRow]:
    with reading_connection().cursor() as cursor:
        cursor.execute(
            f"""
            WITH rolled AS (
                SELECT {rollups.USAGE_COLUMNS} FROM reasoning_step_rollup WHERE hour >= %(first)s AND hour < %(until)s
                UNION ALL
                SELECT {rollups.USAGE_COLUMNS} FROM reasoning_step_rollup_pending
                WHERE hour >= %(first)s AND hour < %(until)s
            ), pairs AS (
                SELECT agent, model, sum(steps)::int8 AS steps, sum(input_tokens)::int8 AS input_tokens,
                       sum(output_tokens)::int8 AS output_tokens, sum(reasoning_tokens)::int8 AS reasoning_tokens,
                       CASE WHEN sum(priced) > 0 THEN sum(cost)::float8 END AS cost
                FROM rolled GROUP BY agent, model
            )
            SELECT agent, model, steps, input_tokens, output_tokens, reasoning_tokens, cost FROM pairs
            WHERE steps > 0
            ORDER BY input_tokens + output_tokens + reasoning_tokens DESC, agent, model
            LIMIT %(limit)s
            """,  # noqa: S608 (constants of this code base)
            {"first": since, "until": until, "limit": limit},
        )
        return list(cursor.fetchall())
