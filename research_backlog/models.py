"""The self-improvement loop's two queues.

``ResearchRequest`` is the research backlog: questions no pathway answers well enough,
waiting for an external dispatcher to pull them (FIFO, exclusive claim), run research
and report back. ``ClaimReview`` is the human triage queue for claims the Critic
rejected. Free text (the question, a curator's note) is encrypted at rest and never
copied into audit payloads.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import models
from django.db.models import Q
from django.utils import timezone
from encrypted_model_fields.fields import EncryptedTextField

from reasoning.models import ReasoningFlow


class ResearchRequestQuerySet(models.QuerySet["ResearchRequest"]):
    def pending(self) -> ResearchRequestQuerySet:
        return self.filter(status=ResearchRequest.Status.PENDING)

    def dispatched(self) -> ResearchRequestQuerySet:
        return self.filter(status=ResearchRequest.Status.DISPATCHED)

    def failed(self) -> ResearchRequestQuerySet:
        return self.filter(status__in=ResearchRequest.FAILED)

    def terminal(self) -> ResearchRequestQuerySet:
        return self.filter(status__in=ResearchRequest.TERMINAL)

    def stale(self, dispatched_before: datetime) -> ResearchRequestQuerySet:
        return self.dispatched().filter(dispatched_at__lt=dispatched_before)

    def expired(self, completed_before: datetime) -> ResearchRequestQuerySet:
        return self.terminal().filter(completed_at__lt=completed_before)


# Defined at module level so the models' Meta (index conditions) can name the members;
# reach them as ResearchRequest.Status and ClaimReview.Status.
class ResearchRequestStatus(models.TextChoices):
    PENDING = "pending"
    DISPATCHED = "dispatched"
    COMPLETED = "completed"
    FAILED_VOLUNTARY = "failed_voluntary"
    FAILED_AFTER_RETRIES = "failed_after_retries"


class ClaimReviewStatus(models.TextChoices):
    PENDING = "pending"
    RESOLVED = "resolved"
    DISMISSED = "dismissed"


class ResearchRequest(models.Model):
    class Reason(models.TextChoices):
        NO_EVIDENCE_HITS = "no_evidence_hits"
        WEAK_COMPOSITE_K = "weak_composite_k"
        CLAIM_REJECTED = "claim_rejected"
        OPERATOR_REQUESTED = "operator_requested"

    Status = ResearchRequestStatus

    FAILED = (Status.FAILED_VOLUNTARY, Status.FAILED_AFTER_RETRIES)
    TERMINAL = (Status.COMPLETED, *FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    trigger_type = models.CharField(max_length=100)
    trigger_ref = models.CharField(max_length=500, blank=True, default="")
    question = EncryptedTextField()
    reason = models.CharField(max_length=32, choices=Reason.choices)
    # Who produced it: "operator", "researcher_auto_enqueue", "critic_auto_enqueue", ...
    source = models.CharField(max_length=64)
    requested_by = models.CharField(max_length=200)
    status = models.CharField(max_length=24, choices=Status.choices, default=Status.PENDING)
    retry_count = models.PositiveSmallIntegerField(default=0)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    completed_flow = models.ForeignKey(
        ReasoningFlow, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    failure_reason = models.CharField(max_length=200, blank=True, default="")
    # The flow a dispatcher opens for this request must carry dispatched_from_backlog=true,
    # so its close cannot enqueue more work (the loop-break marker).
    dispatched_from_backlog = models.BooleanField(default=True)
    # The closed flow whose weak result produced this request: a producer enqueues once per flow.
    source_flow = models.ForeignKey(
        ReasoningFlow, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ResearchRequestQuerySet.as_manager()

    class Meta:
        db_table = "research_request"
        ordering = ["created_at"]
        indexes = [
            # The FIFO pull (pull_next without a trigger_type) and the oldest-pending age.
            models.Index(
                fields=["created_at"],
                name="research_request_pending_fifo",
                condition=Q(status=ResearchRequestStatus.PENDING),
            ),
            # The FIFO pull of one trigger type (pull_next with trigger_type).
            models.Index(
                fields=["trigger_type", "created_at"],
                name="research_request_type_fifo",
                condition=Q(status=ResearchRequestStatus.PENDING),
            ),
            # The stale sweep (dispatched before the cut-off) and the oldest-dispatched age.
            models.Index(
                fields=["dispatched_at"],
                name="research_request_dispatched",
                condition=Q(status=ResearchRequestStatus.DISPATCHED),
            ),
            # The TTL purge (terminal rows by completed_at) and the recent failures.
            models.Index(fields=["status", "completed_at"], name="research_request_completed"),
        ]
        constraints = [
            # One request per source flow: a repeated close signal cannot enqueue twice.
            models.UniqueConstraint(
                fields=["source_flow"], name="research_request_source_flow", condition=Q(source_flow__isnull=False)
            ),
            # Every row past pending has been dispatched, so it has a dispatch time.
            models.CheckConstraint(
                condition=Q(status=ResearchRequestStatus.PENDING) | Q(dispatched_at__isnull=False),
                name="research_request_dispatched_at",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trigger_type} ({self.status})"


class ClaimReview(models.Model):
    """A claim the Critic rejected, waiting for a curator to resolve or dismiss it."""

    Status = ClaimReviewStatus

    TERMINAL = (Status.RESOLVED, Status.DISMISSED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    claim_id = models.CharField(max_length=200, unique=True)
    trigger_type = models.CharField(max_length=100, blank=True, default="")
    reason = models.CharField(max_length=100, default="claim_rejected")
    source = models.CharField(max_length=64)
    source_flow = models.ForeignKey(
        ReasoningFlow, null=True, blank=True, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    marked_by = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    resolution_note = EncryptedTextField(blank=True, default="")
    resolved_by = models.CharField(max_length=200, blank=True, default="")
    resolved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "claim_review"
        ordering = ["created_at"]
        indexes = [
            # The review queue: pending entries, oldest first.
            models.Index(
                fields=["created_at"],
                name="research_claim_review_pending",
                condition=Q(status=ClaimReviewStatus.PENDING),
            ),
            # The review queue's recent resolutions: terminal entries, newest resolved first.
            models.Index(
                fields=["resolved_at"],
                name="research_claim_review_resolved",
                condition=~Q(status=ClaimReviewStatus.PENDING),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.claim_id} ({self.status})"
