"""Scheduled work of the self-improvement loop (schedules created by ``setup_schedules``).

- stale sweep, every 5 minutes: ``sweep_stale``;
- TTL purge, daily: ``purge_expired``;
- consumer, every minute, scheduled only when BACKLOG_CONSUMER_ENABLED: ``consume``.

Each batch's writes are a service (``services.sweep_batch``, ``services.purge_batch``).
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from audit.services import job_run
from core.errors import Conflict, InvalidInput
from research_backlog import services
from research_backlog.dispatcher import Dispatcher, DispatchResult, build_dispatcher
from research_backlog.models import ResearchRequest

logger = logging.getLogger(__name__)

SWEEP_ACTOR = "system:backlog_stale_sweep"
PURGE_ACTOR = "system:backlog_ttl_purge"
CONSUMER_ACTOR = "system:backlog_consumer"
SWEEP_BATCH = 500

SCHEDULES: list[dict[str, Any]] = [
    {
        "name": "research_backlog.stale_sweep",
        "func": "research_backlog.jobs.sweep_stale",
        "schedule_type": "I",
        "minutes": 5,
    },
    {"name": "research_backlog.ttl_purge", "func": "research_backlog.jobs.purge_expired", "schedule_type": "D"},
    {
        "name": "research_backlog.consumer",
        "func": "research_backlog.jobs.consume_if_enabled",
        "schedule_type": "I",
        "minutes": 1,
        # setup_schedules removes a schedule whose "enabled" is false.
        "enabled": settings.BACKLOG_CONSUMER_ENABLED,
    },
]


def sweep_stale(now: datetime | None = None) -> dict[str, int]:
    """Take back requests dispatched more than BACKLOG_STALE_MINUTES ago.

    A row with fewer than BACKLOG_MAX_RETRIES retries goes back to ``pending`` with
    ``retry_count + 1`` (``.recovered``); a row already at the cap becomes
    ``failed_after_retries`` (``.failed_after_retries``). Rows locked by a concurrent
    completion are left to it. Batches of 500 (``services.sweep_batch``), each its own
    transaction. The run is audited as ``memory.job.backlog_stale_sweep``.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(minutes=settings.BACKLOG_STALE_MINUTES)
    thresholds = {"stale_minutes": settings.BACKLOG_STALE_MINUTES, "max_retries": settings.BACKLOG_MAX_RETRIES}
    with job_run("backlog_stale_sweep", actor=SWEEP_ACTOR, payload=thresholds) as counts:
        counts.update(recovered=0, failed_after_retries=0)
        stale_ids = list(ResearchRequest.objects.stale(cutoff).order_by("dispatched_at").values_list("pk", flat=True))
        for start in range(0, len(stale_ids), SWEEP_BATCH):
            recovered, failed = services.sweep_batch(
                stale_ids[start : start + SWEEP_BATCH], cutoff, now, actor=SWEEP_ACTOR
            )
            counts["recovered"] += recovered
            counts["failed_after_retries"] += failed
    return counts


def purge_expired(now: datetime | None = None, *, batch_size: int = 1000) -> dict[str, int]:
    """Delete completed and failed requests BACKLOG_TTL_DAYS after ``completed_at``.

    Pending and dispatched rows are never purged. The audit trail keeps every request's
    history; the run is audited as ``memory.job.backlog_ttl_purge`` with the count.
    Batches of ``batch_size`` (``services.purge_batch``), each its own transaction.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.BACKLOG_TTL_DAYS)
    with job_run("backlog_ttl_purge", actor=PURGE_ACTOR, payload={"ttl_days": settings.BACKLOG_TTL_DAYS}) as counts:
        counts["deleted"] = 0
        while ids := list(ResearchRequest.objects.expired(cutoff).values_list("pk", flat=True)[:batch_size]):
            counts["deleted"] += services.purge_batch(ids, cutoff)
    return counts


def consume_if_enabled() -> dict[str, Any] | None:
    """The scheduled consumer: does nothing unless BACKLOG_CONSUMER_ENABLED."""
    if not settings.BACKLOG_CONSUMER_ENABLED:
        return None
    return consume()


def consume(dispatcher: Dispatcher | None = None, *, limit: int | None = None) -> dict[str, Any]:
    """Pull up to ``limit`` (BACKLOG_CONSUMER_BATCH) requests and hand each to the dispatcher.

    Each pull commits before the dispatcher is called (a slow webhook holds no lock), and
    each answer is recorded with ``services.complete``. With no dispatcher configured
    every pulled row fails voluntarily with ``no_dispatcher_configured``: an honest
    signal, and the reason the consumer is off by default. Audited as
    ``memory.job.backlog_consumer``.
    """
    dispatcher = dispatcher or build_dispatcher()
    limit = settings.BACKLOG_CONSUMER_BATCH if limit is None else limit
    with job_run("backlog_consumer", actor=CONSUMER_ACTOR, payload={"dispatcher": dispatcher.name}) as counts:
        counts.update(pulled=0, completed=0, failed=0, accepted=0, lost=0)
        for _ in range(limit):
            row = services.pull_next(actor=CONSUMER_ACTOR)
            if row is None:
                break
            counts["pulled"] += 1
            result = dispatcher.dispatch(row)
            if result.accepted:
                counts["accepted"] += 1
                continue
            try:
                counts[_report(row.pk, result)] += 1
            except Conflict:
                # The sweep took the row back while the dispatcher ran; it will be pulled again.
                logger.warning("research request %s was no longer dispatched when its dispatch returned", row.pk)
                counts["lost"] += 1
    return counts


def _report(request_id: uuid.UUID, result: DispatchResult) -> str:
    """Record the dispatcher's answer; return the count it goes to. Conflict propagates."""
    try:
        services.complete(request_id, actor=CONSUMER_ACTOR, flow_id=result.flow_id, error=result.error)
    except InvalidInput:  # the dispatcher named a flow this service never recorded
        services.complete(request_id, actor=CONSUMER_ACTOR, error="dispatcher_unknown_flow")
        return "failed"
    return "failed" if result.error else "completed"
