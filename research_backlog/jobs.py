"""Scheduled work of the self-improvement loop (schedules created by ``setup_schedules``).

- stale sweep, every 5 minutes: ``services.sweep_stale``;
- TTL purge, daily: ``services.purge_expired``;
- consumer, every minute, scheduled only when BACKLOG_CONSUMER_ENABLED: ``consume``.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.conf import settings

from audit.services import job_run
from core.errors import Conflict, InvalidInput
from research_backlog import services
from research_backlog.dispatcher import Dispatcher, DispatchResult, build_dispatcher

logger = logging.getLogger(__name__)

CONSUMER_ACTOR = "system:backlog_consumer"

SCHEDULES: list[dict[str, Any]] = [
    {
        "name": "research_backlog.stale_sweep",
        "func": "research_backlog.services.sweep_stale",
        "schedule_type": "I",
        "minutes": 5,
    },
    {"name": "research_backlog.ttl_purge", "func": "research_backlog.services.purge_expired", "schedule_type": "D"},
    {
        "name": "research_backlog.consumer",
        "func": "research_backlog.jobs.consume_if_enabled",
        "schedule_type": "I",
        "minutes": 1,
        # setup_schedules removes a schedule whose "enabled" is false.
        "enabled": settings.BACKLOG_CONSUMER_ENABLED,
    },
]


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
