"""The operators' dashboard's rollups: what the flows and the model usage add up to per UTC hour,
kept as flows change, so the dashboard (``reasoning.dashboard.queries``) reads a few thousand
rows instead of aggregating every flow of its range.

The tables (``reasoning.models``):

* ``reasoning_flow_rollup`` (``FlowRollup``), a row per hour: the flows opened in it by state now,
  guard-blocked, their cost; of those closed, the flows per step-count bucket and a histogram of
  their durations;
* ``reasoning_flow_agent_rollup`` (``FlowAgentRollup``): the counts per hour and flow agent;
* ``reasoning_step_rollup`` (``StepRollup``): the steps that reported tokens, their tokens and cost,
  per hour (the step's ``created_at``), step agent and model.

How they stay right:

1. A flow changes after it opens (a step adds cost; the close sets its state, guard result,
   duration and step count, possibly long after). The write path (``reasoning.recording.ingest``)
   marks the hour of every flow it opens, closes or adds cost to, in the statements that write the
   flows (``MARK_HOURS`` over their ``RETURNING``: no statement of its own, and a mark exists
   exactly when the change committed). The marks are an append-only log, without a unique key: a
   unique mark added with ``ON CONFLICT DO NOTHING`` would lose changes (the writer finds a
   committed mark and adds none; the job deletes that mark and recomputes before the writer
   commits), and one added with ``DO UPDATE`` would make every writer of the current hour wait for
   the others' commits.
2. Steps are insert-only, so their usage is added up, not recomputed: the statement that inserts
   them appends their usage per (hour, agent, model) to ``reasoning_step_rollup_pending``
   (``OWE_USAGE``): no index on the steps' ``created_at`` is needed, none is paid for by every step
   written. Dropping a month of steps (``reasoning.jobs``) appends its negation (``forget_steps``).
3. The job (``refresh``, every minute; ``manage.py refresh_rollups``) takes an advisory lock, deletes
   a batch of marks (``DELETE ... RETURNING``: the marks committed so far), recomputes those hours'
   rows from ``reasoning_flow`` (later statements: they see at least those changes), and moves the
   pending usage into ``reasoning_step_rollup``, in one transaction: a crash undoes all of it and
   leaves the marks and the pending usage for the next run. A change that commits meanwhile left
   its own mark, which the delete did not see: its hour is recomputed again by the next run.
4. A reader takes, in one statement (one snapshot), the rollup rows of the hours without a mark
   and the same aggregates computed from ``reasoning_flow`` for the hours with one (usually the
   current hour alone), and the usage rollup plus the pending usage: counts are exact, never stale.

So a write to ``reasoning_flow`` or ``reasoning_step`` that does not go through the write path (a
data fix in SQL, a test's ``objects.create``) owes the same (``MARK_HOURS``, ``OWE_USAGE``), or is
followed by ``manage.py refresh_rollups --rebuild``.

Durations are a mergeable sketch: log-spaced buckets, bucket ``i >= 1`` holding durations in
``[GAMMA^(i-1), GAMMA^i)`` ms (``GAMMA = 1.02 / 0.98``) and read as ``2 GAMMA^i / (1 + GAMMA)``,
within ``DURATION_ERROR`` (2 %) of every duration in it; bucket 0 holds those under 1 ms, read as
0. A percentile is read from the merged histogram as ``percentile_cont`` reads sorted values (the
values at the two ranks around ``fraction x (n - 1)``, interpolated), so it is within 2 % (or 1 ms)
of the exact one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from psycopg import sql

from audit.services import job_run
from reasoning.models import ReasoningFlow, ReasoningStep

logger = logging.getLogger(__name__)

ACTOR = "system:dashboard_rollups"

# Arbitrary constant that names the refresh's advisory lock: one refresh at a time.
LOCK_KEY = 0x52465452  # "RFTR"

# Hours recomputed per transaction, and how long one run of the job goes on.
BATCH_HOURS = 100
RUN_BUDGET_S = 45.0

# Lower bounds of the step-count buckets after "0" (``width_bucket`` thresholds).
STEP_BOUNDS = (1, 2, 4, 8, 16, 32, 64)

DURATION_ERROR = 0.02
GAMMA = (1 + DURATION_ERROR) / (1 - DURATION_ERROR)

State = ReasoningFlow.State


def hour_of(moment: datetime) -> datetime:
    """The UTC hour ``moment`` falls in (its start)."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


# --- The duration sketch ---------------------------------------------------------------------------

# The bucket of a closed flow's duration (SQL over ``f``, a reasoning_flow row); null while it is open.
DURATION_BUCKET = (
    "CASE WHEN f.closed_at IS NULL THEN NULL"
    " WHEN f.closed_at - f.created_at < interval '1 millisecond' THEN 0"
    " ELSE least(1 + floor(ln(extract(epoch FROM f.closed_at - f.created_at)::float8 * 1000)"
    f" / {math.log(GAMMA)!r}), 32767)::int END"
)


def bucket_seconds(bucket: int) -> float:
    """The duration a bucket stands for, in seconds (within DURATION_ERROR of any in it)."""
    return 0.0 if bucket <= 0 else 2 * GAMMA**bucket / (1 + GAMMA) / 1000


def percentile(buckets: Sequence[int], counts: Sequence[int], fraction: float) -> float | None:
    """``percentile_cont(fraction)`` of the durations of a histogram (``buckets`` ascending, the
    flows in each), in seconds; None when it holds none. See the module docstring for its error."""
    total = sum(counts)
    if not total:
        return None
    position = fraction * (total - 1)
    low, high = math.floor(position), math.ceil(position)
    values: dict[int, float] = {}
    seen = 0
    for bucket, count in zip(buckets, counts, strict=True):
        seen += count
        for rank in (low, high):
            if rank not in values and rank < seen:
                values[rank] = bucket_seconds(bucket)
        if high in values:
            break
    return values[low] + (position - low) * (values[high] - values[low])


# --- The write path's share -----------------------------------------------------------------------

# A step that counts in the usage rollup (SQL over a reasoning_step row; reports_tokens in Python).
REPORTS_TOKENS = "(input_tokens IS NOT NULL OR output_tokens IS NOT NULL OR reasoning_tokens IS NOT NULL)"


def reports_tokens(step: ReasoningStep) -> bool:
    return step.input_tokens is not None or step.output_tokens is not None or step.reasoning_tokens is not None


# What the write path's own statements add (reasoning.recording.ingest, through core.bulk.insert_rows
# ``then``), over the rows they wrote, named ``inserted``: no statement of its own, no round trip.
# The hours of the flows opened, closed or given a cost (``inserted``: their created_at).
MARK_HOURS = (
    "INSERT INTO reasoning_flow_rollup_dirty (hour) SELECT DISTINCT date_trunc('hour', created_at, 'UTC') FROM inserted"
)
# The usage of the new steps that reported tokens, per (hour, agent, model) (``inserted``: these columns).
USAGE_OF_STEPS = "created_at, agent, model, input_tokens, output_tokens, reasoning_tokens, cost_usd"
OWE_USAGE = f"""
INSERT INTO reasoning_step_rollup_pending
    (hour, agent, model, steps, input_tokens, output_tokens, reasoning_tokens, cost, priced)
SELECT date_trunc('hour', created_at, 'UTC'), agent, model, count(*), coalesce(sum(input_tokens), 0),
       coalesce(sum(output_tokens), 0), coalesce(sum(reasoning_tokens), 0), coalesce(sum(cost_usd), 0), count(cost_usd)
FROM inserted WHERE {REPORTS_TOKENS} GROUP BY 1, 2, 3
"""  # noqa: S608 (constants of this code base)


def forget_steps(cursor: CursorWrapper, partition: str) -> None:
    """Owe the negation of the usage of a partition of ``reasoning_step`` about to be dropped (in
    the caller's transaction, the one that drops it)."""
    cursor.execute(
        sql.SQL(
            "INSERT INTO reasoning_step_rollup_pending"
            " (hour, agent, model, steps, input_tokens, output_tokens, reasoning_tokens, cost, priced)"
            " SELECT date_trunc('hour', created_at, 'UTC'), agent, model, -count(*),"
            " -coalesce(sum(input_tokens), 0), -coalesce(sum(output_tokens), 0), -coalesce(sum(reasoning_tokens), 0),"
            " -coalesce(sum(cost_usd), 0), -count(cost_usd)"
            " FROM {} WHERE {} GROUP BY 1, 2, 3"
        ).format(sql.Identifier(partition), sql.SQL(REPORTS_TOKENS))
    )


# --- The aggregates, from reasoning_flow ------------------------------------------------------------------

_STEP_BOUNDS_SQL = "'{" + ",".join(map(str, STEP_BOUNDS)) + "}'::int[]"

# The flows opened in the hour ``h.hour``: an index range scan per hour, whatever the planner guesses
# of the hours (OFFSET 0 keeps the subquery from being flattened into a join that may read every flow).
_FLOWS_OF_HOUR = """
    CROSS JOIN LATERAL (
        SELECT agent, flow_state, patient_safe_summary, cost_usd, step_count, created_at, closed_at
        FROM reasoning_flow WHERE created_at >= h.hour AND created_at < h.hour + interval '1 hour' OFFSET 0
    ) f"""


def flow_hours(source: str) -> str:
    """A SELECT of ``FlowRollup``'s columns (in order) computed from ``reasoning_flow`` for the
    hours of ``source`` (a relation of distinct UTC hours in a column ``hour``): what the job
    stores and what a reader computes for an hour still dirty. An hour without flows has no row."""
    closed_steps = ", ".join(
        f"count(*) FILTER (WHERE closed AND step_bucket = {index})" for index in range(len(STEP_BOUNDS) + 1)
    )
    return f"""
        WITH opened AS (
            SELECT h.hour, f.flow_state AS state, f.patient_safe_summary IS FALSE AS blocked, f.cost_usd AS cost,
                   f.flow_state <> '{State.ACTIVE.value}' AS closed,
                   width_bucket(f.step_count, {_STEP_BOUNDS_SQL}) AS step_bucket,
                   {DURATION_BUCKET} AS duration
            FROM {source} h {_FLOWS_OF_HOUR}
        ), counted AS (
            SELECT hour,
                   count(*) FILTER (WHERE state = '{State.COMPLETED.value}')::int AS completed,
                   count(*) FILTER (WHERE state = '{State.ABORTED.value}')::int AS aborted,
                   count(*) FILTER (WHERE state = '{State.ACTIVE.value}')::int AS active,
                   count(*) FILTER (WHERE blocked)::int AS blocked,
                   sum(cost) AS cost,
                   ARRAY[{closed_steps}]::int[] AS step_buckets
            FROM opened GROUP BY hour
        ), timed AS (
            SELECT hour, array_agg(duration ORDER BY duration)::smallint[] AS buckets,
                   array_agg(flows ORDER BY duration) AS counts
            FROM (SELECT hour, duration, count(*)::int AS flows FROM opened WHERE duration IS NOT NULL
                  GROUP BY hour, duration) durations
            GROUP BY hour
        )
        SELECT counted.hour, completed, aborted, active, blocked, cost, step_buckets,
               coalesce(timed.buckets, '{{}}'), coalesce(timed.counts, '{{}}')
        FROM counted LEFT JOIN timed USING (hour)
    """  # noqa: S608 (constants of this code base)


def agent_hours(source: str) -> str:
    """``flow_hours`` for ``FlowAgentRollup``: (hour, agent, completed, aborted, active, blocked)."""
    return f"""
        SELECT h.hour, f.agent,
               count(*) FILTER (WHERE f.flow_state = '{State.COMPLETED.value}')::int AS completed,
               count(*) FILTER (WHERE f.flow_state = '{State.ABORTED.value}')::int AS aborted,
               count(*) FILTER (WHERE f.flow_state = '{State.ACTIVE.value}')::int AS active,
               count(*) FILTER (WHERE f.patient_safe_summary IS FALSE)::int AS blocked
        FROM {source} h {_FLOWS_OF_HOUR}
        GROUP BY h.hour, f.agent
    """  # noqa: S608 (constants of this code base)


FLOW_COLUMNS = "hour, completed, aborted, active, blocked, cost, step_buckets, duration_buckets, duration_counts"
AGENT_COLUMNS = "hour, agent, completed, aborted, active, blocked"
USAGE_COLUMNS = "hour, agent, model, steps, input_tokens, output_tokens, reasoning_tokens, cost, priced"


# --- The job ---------------------------------------------------------------------------------------------

# The newest dirty hours (the dashboard's first), at most %s, their marks deleted.
_TAKE_MARKS = """
DELETE FROM reasoning_flow_rollup_dirty d
USING (SELECT DISTINCT hour FROM reasoning_flow_rollup_dirty ORDER BY hour DESC LIMIT %s) taken
WHERE d.hour = taken.hour
RETURNING d.hour
"""

# The pending usage added into the rollup; RETURNING the rows it changed, to drop those left with no step.
_FOLD_USAGE = f"""
WITH moved AS (
    DELETE FROM reasoning_step_rollup_pending RETURNING {USAGE_COLUMNS}
)
INSERT INTO reasoning_step_rollup AS r ({USAGE_COLUMNS})
SELECT hour, agent, model, sum(steps), sum(input_tokens), sum(output_tokens), sum(reasoning_tokens), sum(cost),
       sum(priced)
FROM moved GROUP BY hour, agent, model
ON CONFLICT (hour, agent, model) DO UPDATE SET
    steps = r.steps + excluded.steps,
    input_tokens = r.input_tokens + excluded.input_tokens,
    output_tokens = r.output_tokens + excluded.output_tokens,
    reasoning_tokens = r.reasoning_tokens + excluded.reasoning_tokens,
    cost = r.cost + excluded.cost,
    priced = r.priced + excluded.priced
RETURNING r.id, r.steps
"""  # noqa: S608 (constants of this code base)


@dataclass(frozen=True)
class Status:
    dirty_hours: int
    pending_usage: int  # rows

    @property
    def owed(self) -> bool:
        return bool(self.dirty_hours or self.pending_usage)


def status() -> Status:
    """What the job has still to do, in one query."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(DISTINCT hour) FROM reasoning_flow_rollup_dirty),"
            " (SELECT count(*) FROM reasoning_step_rollup_pending)"
        )
        row = cursor.fetchone()
    assert row is not None
    return Status(int(row[0]), int(row[1]))


def refresh(*, batch_hours: int = BATCH_HOURS, budget_s: float = RUN_BUDGET_S) -> dict[str, int]:
    """The job: recompute the dirty hours, newest first, ``batch_hours`` a transaction
    (``refresh_batch``), for at most ``budget_s``, and add the pending usage in. A run with nothing
    owed audits nothing; else ``memory.job.dashboard_rollups.*`` with the counts (no event per
    hour: the rollups are derived data, recomputable from the flows and steps at any time).
    Returns the counts; ``busy`` when another refresh held the lock."""
    if not status().owed:
        return {}
    started = time.monotonic()
    with job_run("dashboard_rollups", actor=ACTOR) as counts:
        counts.update(hours=0, usage_rows=0, batches=0)
        while True:
            done = refresh_batch(batch_hours)
            if done is None:
                counts["busy"] = 1
                break
            hours, usage = done
            counts["hours"] += hours
            counts["usage_rows"] += usage
            counts["batches"] += 1
            if hours < batch_hours or time.monotonic() - started > budget_s:
                break
    logger.info(
        "dashboard rollups: %d hour(s) recomputed, %d usage row(s) added", counts["hours"], counts["usage_rows"]
    )
    return dict(counts)


@transaction.atomic(durable=True)
def refresh_batch(max_hours: int = BATCH_HOURS) -> tuple[int, int] | None:
    """One transaction of the job: take up to ``max_hours`` dirty hours' marks, recompute their
    rows, add the pending usage in. Returns (hours, usage rows changed), or None when another
    refresh holds the lock (it is doing the same)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
        locked = cursor.fetchone()
        if not (locked and locked[0]):
            return None
        cursor.execute(_TAKE_MARKS, [max_hours])
        hours = sorted({row[0] for row in cursor.fetchall()})
        if hours:
            recompute(cursor, hours)
        return len(hours), fold_usage(cursor)


def recompute(cursor: CursorWrapper, hours: Sequence[datetime]) -> None:
    """Replace the flow rollups of ``hours`` by their aggregates over ``reasoning_flow`` now."""
    source = "(SELECT unnest(%s::timestamptz[]) AS hour)"
    cursor.execute("DELETE FROM reasoning_flow_rollup WHERE hour = ANY(%s)", [list(hours)])
    cursor.execute(
        f"INSERT INTO reasoning_flow_rollup ({FLOW_COLUMNS}) SELECT * FROM ({flow_hours(source)}) rows",  # noqa: S608
        [list(hours)],
    )
    cursor.execute("DELETE FROM reasoning_flow_agent_rollup WHERE hour = ANY(%s)", [list(hours)])
    cursor.execute(
        f"INSERT INTO reasoning_flow_agent_rollup ({AGENT_COLUMNS}) {agent_hours(source)}",
        [list(hours)],
    )


def fold_usage(cursor: CursorWrapper) -> int:
    """Add the pending usage into ``reasoning_step_rollup``; returns the rollup rows changed."""
    cursor.execute(_FOLD_USAGE)
    changed = cursor.fetchall()
    emptied = [pk for pk, steps in changed if steps <= 0]  # every step of the pair dropped
    if emptied:
        cursor.execute("DELETE FROM reasoning_step_rollup WHERE id = ANY(%s)", [emptied])
    return len(changed)


@transaction.atomic(durable=True)
def owe_everything() -> Status:
    """Start the rollups again from the stored flows and steps (``manage.py refresh_rollups
    --rebuild``; the benchmark after loading rows by SQL): every hour that holds a flow (or has a
    rollup) marked dirty, the usage rollup emptied and every token-reporting step owed. The job
    then builds them; the dashboard stays exact meanwhile (it reads dirty hours from the flows).

    Takes the refresh's lock, and locks the pending usage against writers until it commits
    (``EXCLUSIVE``: a writer of token-reporting steps waits), so that no step is owed twice: a
    step committed before the lock is counted from ``reasoning_step``, its pending row deleted; a
    later one is not visible here, and its pending row comes after."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        cursor.execute("LOCK TABLE reasoning_step_rollup_pending IN EXCLUSIVE MODE")
        cursor.execute(
            "INSERT INTO reasoning_flow_rollup_dirty (hour)"
            " SELECT date_trunc('hour', created_at, 'UTC') FROM reasoning_flow"
            " UNION SELECT hour FROM reasoning_flow_rollup"
        )
        cursor.execute("DELETE FROM reasoning_step_rollup_pending")
        cursor.execute("DELETE FROM reasoning_step_rollup")
        cursor.execute(
            f"INSERT INTO reasoning_step_rollup_pending ({USAGE_COLUMNS})"  # noqa: S608
            " SELECT date_trunc('hour', created_at, 'UTC'), agent, model, count(*),"
            " coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0), coalesce(sum(reasoning_tokens), 0),"
            f" coalesce(sum(cost_usd), 0), count(cost_usd) FROM reasoning_step WHERE {REPORTS_TOKENS}"
            " GROUP BY 1, 2, 3"
        )
    return status()
