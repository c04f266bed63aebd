"""How the self-improvement loop is doing: the backlog's shape and the loop-health verdict.

The verdict is the one source of truth for the API, the Research Console and monitoring:

- ``critical``: the oldest dispatched request has waited >= 25 min (the stale sweep
  takes it back at 30), or the oldest pending request >= 1 h (nobody is pulling);
- ``warn``: the oldest dispatched >= 15 min, or >= 5 failures in the last 24 h;
- ``healthy`` otherwise.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypedDict

from django.db import models
from django.db.models import Count, Min
from django.utils import timezone

from research_backlog.models import ClaimReview, ResearchRequest

CRITICAL_DISPATCHED_AGE = timedelta(minutes=25)
CRITICAL_PENDING_AGE = timedelta(hours=1)
WARN_DISPATCHED_AGE = timedelta(minutes=15)
WARN_RECENT_FAILURES = 5
RECENT_WINDOW = timedelta(hours=24)
RECENT_LIMIT = 10


class Verdict(models.TextChoices):
    HEALTHY = "healthy"
    WARN = "warn"
    CRITICAL = "critical"


@dataclass(frozen=True)
class LoopHealth:
    verdict: Verdict
    reasons: list[str]


def loop_health(
    *, oldest_pending_age: timedelta | None, oldest_dispatched_age: timedelta | None, recent_failures: int
) -> LoopHealth:
    """The verdict and every threshold that produced it (none when healthy)."""
    critical: list[str] = []
    warn: list[str] = []
    if oldest_dispatched_age is not None and oldest_dispatched_age >= CRITICAL_DISPATCHED_AGE:
        critical.append("oldest_dispatched_over_25m")
    elif oldest_dispatched_age is not None and oldest_dispatched_age >= WARN_DISPATCHED_AGE:
        warn.append("oldest_dispatched_over_15m")
    if oldest_pending_age is not None and oldest_pending_age >= CRITICAL_PENDING_AGE:
        critical.append("oldest_pending_over_1h")
    if recent_failures >= WARN_RECENT_FAILURES:
        warn.append("recent_failures_at_least_5")
    if critical:
        return LoopHealth(Verdict.CRITICAL, critical + warn)
    if warn:
        return LoopHealth(Verdict.WARN, warn)
    return LoopHealth(Verdict.HEALTHY, [])


def _seconds(age: timedelta | None) -> float | None:
    return None if age is None else round(age.total_seconds(), 1)


class RecentFailure(TypedDict):
    id: uuid.UUID
    trigger_type: str
    reason: str
    status: str
    failure_reason: str
    retry_count: int
    completed_at: datetime | None


class RecentFailures(TypedDict):
    window_hours: int
    count: int
    items: list[RecentFailure]


class LoopHealthReport(TypedDict):
    verdict: Verdict
    reasons: list[str]


class BacklogStatus(TypedDict):
    """The backlog route's published shape (``BacklogStatusSerializer``); the console reads it too."""

    status_distribution: dict[str, int]
    total: int
    oldest_pending_age_seconds: float | None
    oldest_dispatched_age_seconds: float | None
    retry_distribution: dict[str, int]
    recent_failures: RecentFailures
    loop_health: LoopHealthReport


class ReviewQueue(TypedDict):
    pending: list[ClaimReview]
    pending_count: int
    recent_resolutions: list[ClaimReview]


def backlog_status(now: datetime | None = None) -> BacklogStatus:
    """Counts by status and retry count, the oldest waits, recent failures and the verdict."""
    now = now or timezone.now()
    rows = ResearchRequest.objects
    by_status = dict(rows.order_by().values_list("status").annotate(n=Count("pk")).values_list("status", "n"))
    by_retry = dict(rows.order_by().values_list("retry_count").annotate(n=Count("pk")).values_list("retry_count", "n"))
    oldest_pending = rows.pending().aggregate(at=Min("created_at"))["at"]
    oldest_dispatched = rows.dispatched().aggregate(at=Min("dispatched_at"))["at"]
    failures = rows.failed().filter(completed_at__gte=now - RECENT_WINDOW)
    pending_age = None if oldest_pending is None else max(now - oldest_pending, timedelta(0))
    dispatched_age = None if oldest_dispatched is None else max(now - oldest_dispatched, timedelta(0))
    failure_count = failures.count()
    health = loop_health(
        oldest_pending_age=pending_age, oldest_dispatched_age=dispatched_age, recent_failures=failure_count
    )
    return {
        "status_distribution": {status: by_status.get(status, 0) for status in ResearchRequest.Status.values},
        "total": sum(by_status.values()),
        "oldest_pending_age_seconds": _seconds(pending_age),
        "oldest_dispatched_age_seconds": _seconds(dispatched_age),
        "retry_distribution": {str(retries): n for retries, n in sorted(by_retry.items())},
        "recent_failures": {
            "window_hours": int(RECENT_WINDOW.total_seconds() // 3600),
            "count": failure_count,
            "items": [
                {
                    "id": row.pk,
                    "trigger_type": row.trigger_type,
                    "reason": row.reason,
                    "status": row.status,
                    "failure_reason": row.failure_reason,
                    "retry_count": row.retry_count,
                    "completed_at": row.completed_at,
                }
                for row in failures.order_by("-completed_at")[:RECENT_LIMIT]
            ],
        },
        "loop_health": {"verdict": health.verdict, "reasons": health.reasons},
    }


def claims_pending_review(now: datetime | None = None, *, limit: int = 100) -> ReviewQueue:
    """The ``limit`` oldest pending entries, their total, and the last 10 resolutions of the past 24 h."""
    now = now or timezone.now()
    pending = ClaimReview.objects.filter(status=ClaimReview.Status.PENDING).order_by("created_at", "id")
    recent = (
        ClaimReview.objects.exclude(status=ClaimReview.Status.PENDING)
        .filter(resolved_at__gte=now - RECENT_WINDOW)
        .order_by("-resolved_at")[:RECENT_LIMIT]
    )
    # The source flow comes in the same query: a curator reads its guard-checked summaries.
    return {
        "pending": list(pending.select_related("source_flow")[:limit]),
        "pending_count": pending.count(),
        "recent_resolutions": list(recent.select_related("source_flow")),
    }
