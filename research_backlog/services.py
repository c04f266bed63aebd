"""State changes of the research backlog and the claim-review queue, and their audited reads.

Each function runs in one transaction with its audit event. Audit payloads carry ids,
labels and counts: never the question or a curator's note.

The backlog's life cycle::

    pending --pull_next--> dispatched --complete--> completed
                              |    \\--complete(error)--> failed_voluntary
                              \\--sweep (stale)--> pending (retry_count + 1)
                                                  or failed_after_retries at the cap
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.actions import Action
from audit.services import record
from core.errors import Conflict, InvalidInput, NotFound
from reasoning.models import ReasoningFlow
from research_backlog import health
from research_backlog.models import ClaimReview, ResearchRequest

logger = logging.getLogger(__name__)

Status = ResearchRequest.Status
CONSOLE_SOURCE = "research_console"


def _request_payload(row: ResearchRequest, **extra: Any) -> dict[str, Any]:
    return {
        "request_id": str(row.pk),
        "trigger_type": row.trigger_type,
        "reason": row.reason,
        "source": row.source,
        "retry_count": row.retry_count,
        **extra,
    }


def enqueue(
    *,
    trigger_type: str,
    question: str,
    reason: str,
    source: str,
    actor: str,
    trigger_ref: str = "",
    dispatched_from_backlog: bool = True,
    source_flow_id: uuid.UUID | None = None,
) -> tuple[ResearchRequest, bool]:
    """Add a research request to the backlog. Returns ``(request, created)``.

    A producer passes the flow that prompted it as ``source_flow_id``: one request per
    flow, so a repeated close signal cannot enqueue twice (``created`` is then False).
    Audits ``reasoning.research.deeper_request_created``.
    """
    if reason not in ResearchRequest.Reason.values:
        raise InvalidInput(f"must be one of {', '.join(ResearchRequest.Reason.values)}", field="reason")
    # Checked here as well as by the routes' serializers: a request with nothing to research is
    # never queued, whoever calls (a page, a command, a producer).
    if not question.strip():
        raise InvalidInput("This field may not be blank.", field="question")
    fields = {
        "trigger_type": trigger_type,
        "trigger_ref": trigger_ref,
        "question": question,
        "reason": reason,
        "source": source,
        "requested_by": actor,
        "dispatched_from_backlog": dispatched_from_backlog,
    }
    with transaction.atomic():
        if source_flow_id is None:
            row = ResearchRequest.objects.create(**fields)
        else:
            # get_or_create retries the read when a concurrent producer for the same flow wins.
            row, created = ResearchRequest.objects.get_or_create(source_flow_id=source_flow_id, defaults=fields)
            if not created:
                return row, False
        record(
            Action.RESEARCH_DEEPER_REQUEST_CREATED,
            actor=actor,
            target=row,
            payload=_request_payload(
                row,
                question_chars=len(question),
                source_flow_id=str(source_flow_id) if source_flow_id else None,
            ),
        )
    return row, True


@transaction.atomic
def request_deeper_research(*, trigger_type: str, trigger_ref: str, question: str, actor: str) -> ResearchRequest:
    """An operator asks for deeper research from the Research Console: the request joins
    the backlog (``reasoning.research.deeper_request_created``) and the operator's ask is
    pinned to them (``admin.reasoning.research.deeper_requested``), in one transaction."""
    row, _ = enqueue(
        trigger_type=trigger_type,
        trigger_ref=trigger_ref,
        question=question,
        reason=ResearchRequest.Reason.OPERATOR_REQUESTED,
        source=CONSOLE_SOURCE,
        actor=actor,
    )
    record(Action.RESEARCH_DEEPER_REQUESTED, actor=actor, target=row, payload=_request_payload(row))
    return row


@transaction.atomic
def pull_next(*, actor: str, trigger_type: str | None = None) -> ResearchRequest | None:
    """Claim the oldest pending request (optionally of one trigger type), or None.

    ``FOR UPDATE SKIP LOCKED``: concurrent pullers each lock a different row and never
    wait on each other, so no row is handed out twice and none is skipped for good.
    Audits ``reasoning.research.backlog.dispatched``.
    """
    pending = ResearchRequest.objects.pending()
    if trigger_type:
        pending = pending.filter(trigger_type=trigger_type)
    row = pending.order_by("created_at", "id").select_for_update(skip_locked=True).first()
    if row is None:
        return None
    row.status = Status.DISPATCHED
    row.dispatched_at = timezone.now()
    row.save(update_fields=["status", "dispatched_at"])
    record(Action.RESEARCH_BACKLOG_DISPATCHED, actor=actor, target=row, payload=_request_payload(row))
    return row


@transaction.atomic
def complete(
    request_id: uuid.UUID, *, actor: str, flow_id: uuid.UUID | None = None, error: str | None = None
) -> ResearchRequest:
    """Close out a dispatched request: ``completed``, or ``failed_voluntary`` with ``error``.

    404 unknown; 409 unless the row is ``dispatched`` (no double completion, no completion
    without a pull, none after the sweep took the row back). ``flow_id`` must name a
    recorded flow. Audits ``reasoning.research.backlog.completed`` or ``.failed_voluntary``.
    """
    row = ResearchRequest.objects.select_for_update().filter(pk=request_id).first()
    if row is None:
        raise NotFound(f"research request {request_id} does not exist")
    if row.status != Status.DISPATCHED:
        raise Conflict(f"research request is {row.status}, not dispatched")
    if flow_id is not None and not ReasoningFlow.objects.filter(pk=flow_id).exists():
        raise InvalidInput("no flow with this id", field="flow_id")
    now = timezone.now()
    row.status = Status.FAILED_VOLUNTARY if error else Status.COMPLETED
    row.completed_at = now
    row.completed_flow_id = flow_id
    row.failure_reason = error or ""
    row.save(update_fields=["status", "completed_at", "completed_flow", "failure_reason"])
    assert row.dispatched_at is not None  # a dispatched row has one (check constraint)
    payload = _request_payload(
        row,
        flow_id=str(flow_id) if flow_id else None,
        run_seconds=round((now - row.dispatched_at).total_seconds(), 3),
    )
    if error:
        record(Action.RESEARCH_BACKLOG_FAILED_VOLUNTARY, actor=actor, target=row, payload={**payload, "error": error})
    else:
        record(Action.RESEARCH_BACKLOG_COMPLETED, actor=actor, target=row, payload=payload)
    return row


@transaction.atomic
def sweep_batch(ids: list[uuid.UUID], cutoff: datetime, now: datetime, *, actor: str) -> tuple[int, int]:
    """Take back the stale rows among ``ids`` (dispatched before ``cutoff``); return
    ``(recovered, failed_after_retries)``.

    Below BACKLOG_MAX_RETRIES a row goes back to ``pending`` with ``retry_count + 1``
    (``.recovered``); at the cap it becomes ``failed_after_retries``
    (``.failed_after_retries``). The rows are locked and re-checked: one completed since
    it was picked no longer matches, one locked by a concurrent completion is left to it.
    """
    rows = list(ResearchRequest.objects.stale(cutoff).filter(pk__in=ids).select_for_update(skip_locked=True))
    recovered = failed = 0
    for row in rows:
        assert row.dispatched_at is not None
        stuck_minutes = round((now - row.dispatched_at).total_seconds() / 60, 1)
        if row.retry_count >= settings.BACKLOG_MAX_RETRIES:
            row.status = Status.FAILED_AFTER_RETRIES
            row.completed_at = now
            row.failure_reason = "stale_after_retries"
            row.save(update_fields=["status", "completed_at", "failure_reason"])
            record(
                Action.RESEARCH_BACKLOG_FAILED_AFTER_RETRIES,
                actor=actor,
                target=row,
                payload=_request_payload(row, stuck_minutes=stuck_minutes),
            )
            failed += 1
        else:
            row.status = Status.PENDING
            row.retry_count += 1
            row.dispatched_at = None
            row.save(update_fields=["status", "retry_count", "dispatched_at"])
            record(
                Action.RESEARCH_BACKLOG_RECOVERED,
                actor=actor,
                target=row,
                payload=_request_payload(row, stuck_minutes=stuck_minutes),
            )
            recovered += 1
    return recovered, failed


@transaction.atomic
def purge_batch(ids: list[uuid.UUID], cutoff: datetime) -> int:
    """Delete the rows among ``ids`` that are terminal and completed before ``cutoff``
    (re-checked, so a row is never deleted outside the rule). The audit trail keeps every
    request's history; the job's run event carries the count. Returns the number deleted."""
    deleted, _ = ResearchRequest.objects.expired(cutoff).filter(pk__in=ids).delete()
    return deleted


# --- Audited reads -------------------------------------------------------------------


def read_backlog_status(*, actor: str, action: Action = Action.ADMIN_RESEARCH_BACKLOG_READ) -> health.BacklogStatus:
    """``health.backlog_status`` for an operator, audited (the total and the verdict only). The
    API audits ``admin.reasoning.research.backlog_read``; the console its ``.proxy``."""
    report = health.backlog_status()
    with transaction.atomic():
        record(action, actor=actor, payload={"total": report["total"], "loop_health": report["loop_health"]["verdict"]})
    return report


def read_review_queue(*, actor: str, limit: int = 100) -> health.ReviewQueue:
    """``health.claims_pending_review`` for a curator, audited as
    ``admin.reasoning.claims_pending_review.listed`` (counts only)."""
    queue = health.claims_pending_review(limit=limit)
    with transaction.atomic():
        record(
            Action.ADMIN_CLAIM_REVIEW_LISTED,
            actor=actor,
            payload={"pending_count": queue["pending_count"], "recent_count": len(queue["recent_resolutions"])},
        )
    return queue


def mark_claim_for_review(
    *,
    claim_id: str,
    actor: str,
    source: str,
    reason: str = "claim_rejected",
    trigger_type: str = "",
    source_flow_id: uuid.UUID | None = None,
) -> tuple[ClaimReview, bool]:
    """Put a claim in the human triage queue. Returns ``(entry, created)``.

    Idempotent on ``claim_id``: marking a claim that already has an entry (pending or
    terminal) returns that entry unchanged. Audits ``reasoning.claims_pending_review.marked``.
    """
    with transaction.atomic():
        # get_or_create retries the read when a concurrent mark of the same claim wins.
        entry, created = ClaimReview.objects.get_or_create(
            claim_id=claim_id,
            defaults={
                "trigger_type": trigger_type,
                "reason": reason,
                "source": source,
                "source_flow_id": source_flow_id,
                "marked_by": actor,
            },
        )
        if not created:
            return entry, False
        record(
            Action.CLAIM_REVIEW_MARKED,
            actor=actor,
            target=entry,
            payload={
                "review_id": str(entry.pk),
                "claim_id": claim_id,
                "reason": reason,
                "source": source,
                "source_flow_id": str(source_flow_id) if source_flow_id else None,
            },
        )
    return entry, True


@transaction.atomic
def resolve_claim_review(review_id: uuid.UUID, *, status: str, note: str, actor: str) -> ClaimReview:
    """Resolve or dismiss a pending entry; 404 unknown, 409 when already terminal.

    Audits ``reasoning.claims_pending_review.resolved`` with the status (the note's
    length only: the note itself is encrypted and stays out of the trail).
    """
    if status not in ClaimReview.TERMINAL:
        raise InvalidInput("must be 'resolved' or 'dismissed'", field="status")
    entry = ClaimReview.objects.select_for_update().filter(pk=review_id).first()
    if entry is None:
        raise NotFound(f"claim review {review_id} does not exist")
    if entry.status != ClaimReview.Status.PENDING:
        raise Conflict(f"claim review is already {entry.status}")
    entry.status = status
    entry.resolution_note = note
    entry.resolved_by = actor
    entry.resolved_at = timezone.now()
    entry.save(update_fields=["status", "resolution_note", "resolved_by", "resolved_at"])
    record(
        Action.CLAIM_REVIEW_RESOLVED,
        actor=actor,
        target=entry,
        payload={
            "review_id": str(entry.pk),
            "claim_id": entry.claim_id,
            "status": status,
            "note_chars": len(note),
            "pending_seconds": round((entry.resolved_at - entry.created_at).total_seconds(), 3),
        },
    )
    return entry
