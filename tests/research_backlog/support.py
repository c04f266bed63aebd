"""Constants and readers shared by the research-backlog route tests (fixtures in conftest, builders in
tests/factories, re-exported here)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection

from audit.models import AuditEvent
from research_backlog.models import ClaimReview, ResearchRequest

DEEPER_URL = "/admin/v1/reasoning/research/deeper-request"
BACKLOG_URL = "/admin/v1/reasoning/research/backlog"
NEXT_URL = "/admin/v1/reasoning/research/backlog/next"
REVIEWS_URL = "/admin/v1/reasoning/claims-pending-review"
NOW_JSON = "2026-03-02T12:00:00Z"
OPERATOR = "token:operator"
# Distinctive, so a leak into a table or the trail cannot be a coincidence.
NOTE = "Curator Wilhelmina checked the Quixote citation: the dose was transposed."

DISPATCHED = "reasoning.research.backlog.dispatched"
COMPLETED = "reasoning.research.backlog.completed"
FAILED_VOLUNTARY = "reasoning.research.backlog.failed_voluntary"
CREATED = "reasoning.research.deeper_request_created"
BACKLOG_READ = "admin.reasoning.research.backlog_read"
MARKED = "reasoning.claims_pending_review.marked"
RESOLVED = "reasoning.claims_pending_review.resolved"
LISTED = "admin.reasoning.claims_pending_review.listed"


def complete_url(request_id: object) -> str:
    return f"/admin/v1/reasoning/research/backlog/{request_id}/complete"


def review_url(review_id: object) -> str:
    return f"{REVIEWS_URL}/{review_id}"


def state() -> dict[str, Any]:
    """Every row of both queues and every audit event id: equal before and after means nothing was written."""
    return {
        "requests": list(ResearchRequest.objects.order_by("pk").values()),
        "reviews": list(ClaimReview.objects.order_by("pk").values()),
        "audit": list(AuditEvent.objects.order_by("id").values_list("id", flat=True)),
    }


def raw_column(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [str(row[0]) for row in cursor.fetchall()]


def audit_trail_text() -> str:
    return "\n".join(raw_column("SELECT e::text || ' ' || convert_from(e.canonical, 'UTF8') FROM audit_event AS e"))


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items]


def run_together(workers: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(n)`` in ``workers`` threads released at once; each thread closes its own connection."""
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            work(n)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return errors
