"""Scheduled work of the reasoning app.

``SCHEDULES`` entries are picked up by ``manage.py setup_schedules`` (django-q2).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit import retention
from audit.actions import Action
from audit.privileges import as_owner
from audit.services import job_run, record
from core.errors import Conflict
from core.partitions import MONTHS_AHEAD, add_months, drop, ensure_ahead, expired
from reasoning import rollups
from reasoning.agents.drift import judge_agent
from reasoning.agents.drift_queries import completed_sessions, reported_sessions
from reasoning.agents.services import store_drift_reports
from reasoning.flows.services import purge_reasoning_batch
from reasoning.models import DriftReport, ReasoningFlow, ReasoningStep
from reasoning.recording.services import close_flow
from reasoning.recording.traces import adopt_orphans

logger = logging.getLogger(__name__)

FLOW_DECAY_ACTOR = "system:reasoning_flow_decay"

RETENTION_ACTOR = "system:reasoning_content_retention"

SCHEDULES = [
    # Work owed after closes (pathway extraction, backlog producers) that is still not done.
    {
        "name": "reasoning.close_work",
        "func": "reasoning.recording.close_work.perform_due",
        "schedule_type": "I",
        "minutes": 1,
    },
    # The dashboard's rollups: the hours whose flows changed recomputed, the new steps' usage added.
    {"name": "reasoning.dashboard_rollups", "func": "reasoning.rollups.refresh", "schedule_type": "I", "minutes": 1},
    {"name": "reasoning.flow_decay", "func": "reasoning.jobs.decay_stale_flows", "schedule_type": "H"},
    {
        "name": "reasoning.content_retention",
        "func": "reasoning.jobs.purge_reasoning_content",
        "schedule_type": "D",
    },
    {"name": "reasoning.drift", "func": "reasoning.jobs.compute_drift_reports", "schedule_type": "D"},
    # Monthly partitions of reasoning_step and audit_event, MONTHS_AHEAD months ahead (core.partitions).
    {"name": "partitions.ahead", "func": "reasoning.jobs.create_partitions_ahead", "schedule_type": "D"},
    # Whole months dropped past REASONING_STEP_RETENTION_DAYS / AUDIT_RETENTION_DAYS (when set).
    {"name": "partitions.retention", "func": "reasoning.jobs.drop_expired_partitions", "schedule_type": "D"},
]

PARTITIONS_ACTOR = "system:partitions"


def decay_stale_flows(now: datetime | None = None, *, batch_size: int = 500) -> int:
    """Abort flows left active longer than FLOW_DECAY_HOURS, with reason ``timeout``.

    Agents that crash leave zombie flows; this closes them so they stop accepting steps
    and show up as aborted. OpenTelemetry spans still waiting for their root span after
    as long become an aborted flow of their trace (``reasoning.recording.traces.adopt_orphans``).
    Each flow is closed by the normal close service (its own transaction and audit
    event); a flow closed concurrently by its agent is skipped.
    Returns the number of flows aborted.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.FLOW_DECAY_HOURS)
    with job_run(
        "reasoning_flow_decay", actor=FLOW_DECAY_ACTOR, payload={"threshold_hours": settings.FLOW_DECAY_HOURS}
    ) as counts:
        counts.update(aborted=0, skipped=0)
        while ids := list(
            ReasoningFlow.objects.stale(cutoff).order_by("created_at").values_list("pk", flat=True)[:batch_size]
        ):
            for flow_id in ids:
                try:
                    close_flow(
                        flow_id, state=ReasoningFlow.State.ABORTED, actor=FLOW_DECAY_ACTOR, abort_reason="timeout"
                    )
                    counts["aborted"] += 1
                except Conflict:
                    counts["skipped"] += 1  # closed by its agent meanwhile
        # OpenTelemetry spans whose flow (root span) never came: an aborted flow per trace.
        counts["orphan_spans"] = 0
        while adopted := adopt_orphans(received_before=cutoff, actor=FLOW_DECAY_ACTOR, limit=batch_size):
            counts["orphan_spans"] += adopted
    aborted, skipped = counts["aborted"], counts["skipped"]
    logger.info(
        "flow decay: aborted %d stale flows (%d closed concurrently), adopted %d orphan spans",
        aborted,
        skipped,
        counts["orphan_spans"],
    )
    return int(aborted)


def purge_reasoning_content(now: datetime | None = None, *, batch_size: int = 1000) -> int:
    """Delete raw chain-of-thought older than REASONING_CONTENT_RETENTION_DAYS.

    The character count stays (stats keep working) and ``reasoning_content_purged_at``
    records when the text went. Batches of ``batch_size`` rows, each its own transaction
    with its own audit event (``services.purge_reasoning_batch``), so a large backlog
    never holds locks for long.
    Returns the number of steps purged.
    """
    now = now or timezone.now()
    days = settings.REASONING_CONTENT_RETENTION_DAYS
    cutoff = now - timedelta(days=days)
    with job_run("reasoning_content_retention", actor=RETENTION_ACTOR, payload={"retention_days": days}) as counts:
        counts["purged"] = 0
        candidates = ReasoningStep.objects.holding_reasoning(cutoff).order_by("created_at")
        while ids := list(candidates.values_list("pk", flat=True)[:batch_size]):
            counts["purged"] += purge_reasoning_batch(
                ids, created_before=cutoff, now=now, actor=RETENTION_ACTOR, retention_days=days
            )
    purged = counts["purged"]
    logger.info("reasoning content retention: purged %d step(s) older than %d days", purged, days)
    return int(purged)


DRIFT_ACTOR = "system:reasoning_drift"


def compute_drift_reports(*, agent: str | None = None, now: datetime | None = None) -> list[DriftReport]:
    """Judge completed sessions against each agent's baseline and store a drift report per
    session (``reasoning.drift``; docs/outcomes-and-drift.md "Drift per agent").

    Without ``agent``: every agent's sessions that have no report yet (the daily run). With
    ``agent``: every completed session of that agent, again (its reports are replaced).
    Reads in two queries whatever the number of sessions (the session aggregates of every
    agent in one SQL pass, then the sessions already reported); writes one transaction per
    agent (``services.store_drift_reports``). Returns the stored reports, by agent and session order.
    """
    window, minimum = settings.DRIFT_BASELINE_SESSIONS, settings.DRIFT_MIN_BASELINE_SESSIONS
    stored: list[DriftReport] = []
    with job_run(
        "reasoning_drift",
        actor=DRIFT_ACTOR,
        payload={"baseline_sessions": window, "min_baseline_sessions": minimum, "one_agent": agent is not None},
    ) as counts:
        sessions = completed_sessions(agent)
        reported = {} if agent is not None else reported_sessions()
        counts.update(agents=0, sessions=0)
        for name in sorted(sessions):
            judgements = judge_agent(
                sessions[name],
                only=None if agent is not None else {s.session_id for s in sessions[name]} - reported.get(name, set()),
                window=window,
                min_baseline=minimum,
                thresholds=settings.DRIFT_THRESHOLDS,
            )
            if judgements:
                stored.extend(store_drift_reports(name, judgements, actor=DRIFT_ACTOR, now=now))
                counts["agents"] += 1
                counts["sessions"] += len(judgements)
        for level in DriftReport.Level.values:
            counts[level] = sum(1 for report in stored if report.level == level)
    logger.info("drift: judged %d session(s) of %d agent(s)", counts["sessions"], counts["agents"])
    return stored


def create_partitions_ahead(now: datetime | None = None) -> list[str]:
    """Make the monthly partitions of this month and the next MONTHS_AHEAD, and one for each
    month with rows waiting in a default partition; one audit event per partition made, in
    the transaction that makes it. Runs as the owner role (DDL), when there is one."""
    now = now or timezone.now()
    with job_run("partitions_ahead", actor=PARTITIONS_ACTOR, payload={"months_ahead": MONTHS_AHEAD}) as counts:
        with as_owner(), transaction.atomic(), connection.cursor() as cursor:
            created = ensure_ahead(cursor, now)
            for name in created:
                record(Action.PARTITION_CREATED, actor=PARTITIONS_ACTOR, target=("partition", name))
        counts["created"] = len(created)
    if created:
        logger.info("partitions: created %s", ", ".join(created))
    return created


def drop_expired_partitions(now: datetime | None = None) -> list[str]:
    """Retention by partition: drop each month of steps (by their flow's month) older than
    REASONING_STEP_RETENTION_DAYS, unless it holds a flow of a patient under legal hold, and
    each month of audit events older than AUDIT_RETENTION_DAYS once a signed checkpoint
    covers every event in it. Detach and drop, never a bulk DELETE; one audit event per
    partition dropped or kept back, in the transaction that drops it. Unset settings drop
    nothing. Runs as the owner role (DDL). Returns the partitions dropped, oldest first."""
    now = now or timezone.now()
    step_days, audit_days = settings.REASONING_STEP_RETENTION_DAYS, settings.AUDIT_RETENTION_DAYS
    dropped: list[str] = []
    with job_run(
        "partitions_retention",
        actor=PARTITIONS_ACTOR,
        payload={"reasoning_step_days": step_days or 0, "audit_days": audit_days or 0},
    ) as counts:
        counts.update(dropped=0, held=0, awaiting_checkpoint=0)
        with as_owner():
            if step_days:
                for name, month in _expired("reasoning_step", now - timedelta(days=step_days)):
                    if _drop_steps(name, month, counts):
                        dropped.append(name)
            if audit_days:
                for name, month in _expired("audit_event", now - timedelta(days=audit_days)):
                    if not _drop_events(name, month, counts):
                        break  # months are dropped in order: the positions dropped stay one prefix
                    dropped.append(name)
    if dropped:
        logger.info("partitions: dropped %s", ", ".join(dropped))
    return dropped


def _expired(table: str, cutoff: datetime) -> list[tuple[str, datetime]]:
    with connection.cursor() as cursor:
        return expired(cursor, table, cutoff)


def _drop_steps(name: str, month: datetime, counts: dict[str, int]) -> bool:
    target = ("partition", name)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM patients_patient p WHERE p.legal_hold AND EXISTS ("
            " SELECT 1 FROM reasoning_flow f WHERE f.patient_id = p.id AND f.created_at >= %s AND f.created_at < %s)",
            [month, add_months(month, 1)],
        )
        held = int(cursor.fetchone()[0])
        if held:
            record(Action.PARTITION_DROP_HELD, actor=PARTITIONS_ACTOR, target=target, payload={"held_patients": held})
            counts["held"] += 1
            return False
        # The ids of the dropped steps leave the registry by key (then a step id of that month
        # may be used again); every step has its registry row, so that counts the steps too.
        cursor.execute(
            f"DELETE FROM reasoning_step_registry r USING {connection.ops.quote_name(name)} s"  # noqa: S608
            " WHERE r.id = s.id"
        )
        steps = cursor.rowcount
        # The dashboard's usage rollup loses the month's steps with it (reasoning.rollups).
        rollups.forget_steps(cursor, name)
        drop(cursor, "reasoning_step", name)
        record(Action.PARTITION_DROPPED, actor=PARTITIONS_ACTOR, target=target, payload={"rows": steps})
    counts["dropped"] += 1
    return True


def _drop_events(name: str, month: datetime, counts: dict[str, int]) -> bool:
    target = ("partition", name)
    with transaction.atomic(), connection.cursor() as cursor:
        covered = retention.coverage(cursor, name)
        if not covered.covered:
            record(
                Action.PARTITION_DROP_UNCOVERED,
                actor=PARTITIONS_ACTOR,
                target=target,
                payload={"events": covered.events, "unlinked": covered.unlinked},
            )
            counts["awaiting_checkpoint"] += 1
            return False
        made = retention.drop_month(cursor, name, month, covered)
        record(
            Action.PARTITION_DROPPED,
            actor=PARTITIONS_ACTOR,
            target=target,
            payload={"rows": made.events, "last_position": made.last_position, "checkpoint_id": made.checkpoint_id},
        )
    counts["dropped"] += 1
    return True
