"""Request validation and response shapes for the research backlog and the review queue."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from core.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
    StrictUUIDField,
    label_field,
    multiline_text_validator,
)
from research_backlog.health import Verdict
from research_backlog.models import ClaimReview, ResearchRequest

# Questions and notes may span lines and hold tabs, but no other control, format or separator characters.
text_validator = multiline_text_validator


def request_representation(row: ResearchRequest) -> dict[str, Any]:
    return {
        "id": row.pk,
        "trigger_type": row.trigger_type,
        "trigger_ref": row.trigger_ref,
        "question": row.question,
        "reason": row.reason,
        "source": row.source,
        "requested_by": row.requested_by,
        "status": row.status,
        "retry_count": row.retry_count,
        "dispatched_from_backlog": row.dispatched_from_backlog,
        "source_flow_id": row.source_flow_id,
        "dispatched_at": row.dispatched_at,
        "completed_at": row.completed_at,
        "completed_flow_id": row.completed_flow_id,
        "failure_reason": row.failure_reason,
        "created_at": row.created_at,
    }


def review_representation(entry: ClaimReview) -> dict[str, Any]:
    return {
        "id": entry.pk,
        "claim_id": entry.claim_id,
        "trigger_type": entry.trigger_type,
        "reason": entry.reason,
        "source": entry.source,
        "source_flow_id": entry.source_flow_id,
        "marked_by": entry.marked_by,
        "status": entry.status,
        "resolution_note": entry.resolution_note,
        "resolved_by": entry.resolved_by,
        "resolved_at": entry.resolved_at,
        "created_at": entry.created_at,
    }


class DeeperRequestSerializer(StrictSerializer):
    trigger_type = label_field(help_text="The trigger family the research is for, e.g. `user_question`.")
    trigger_ref = StrictCharField(max_length=500, required=False, allow_blank=True, validators=[text_validator])
    question = StrictCharField(
        max_length=2000, validators=[text_validator], help_text="What to research. Stored encrypted."
    )
    reason = serializers.ChoiceField(
        choices=ResearchRequest.Reason.choices, required=False, default=ResearchRequest.Reason.OPERATOR_REQUESTED
    )
    source = label_field(max_length=64, required=False, default="operator")  # type: ignore[assignment]
    dispatched_from_backlog = StrictBooleanField(
        required=False,
        default=True,
        help_text="The flag the dispatched run's flow carries; true (default) stops that flow enqueueing more.",
    )


class PullSerializer(StrictSerializer):
    trigger_type = label_field(required=False, help_text="Only pull requests of this trigger type.")


class CompleteSerializer(StrictSerializer):
    flow_id = StrictUUIDField(required=False, allow_null=True, help_text="The flow the research produced.")
    error = label_field(
        max_length=200,
        required=False,
        allow_null=True,
        help_text="Why the research failed, as a label (`dispatcher_gave_up`, not a sentence); marks the row "
        "`failed_voluntary`.",
    )


class MarkClaimSerializer(StrictSerializer):
    claim_id = StrictCharField(max_length=200, validators=[text_validator], help_text="Opaque id of the claim.")
    reason = label_field(required=False, default="claim_rejected")
    source = label_field(max_length=64, required=False, default="operator")  # type: ignore[assignment]
    trigger_type = label_field(required=False, allow_blank=True, default="")
    flow_id = StrictUUIDField(required=False, allow_null=True, help_text="The flow that judged the claim.")


class ResolveClaimSerializer(StrictSerializer):
    status = serializers.ChoiceField(choices=[ClaimReview.Status.RESOLVED.value, ClaimReview.Status.DISMISSED.value])
    note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="", validators=[text_validator])


# --- Response shapes ---------------------------------------------------------------------


class ResearchRequestRowSerializer(serializers.Serializer[Any]):
    """``request_representation``: one backlog row (the question is decrypted for operators)."""

    id = serializers.UUIDField()
    trigger_type = serializers.CharField()
    trigger_ref = serializers.CharField()
    question = serializers.CharField()
    reason = serializers.ChoiceField(choices=ResearchRequest.Reason.choices)
    source = serializers.CharField()  # type: ignore[assignment]  # a field named like DRF's Field.source
    requested_by = serializers.CharField(help_text="The actor that enqueued it (`token:…`, `user:…`, `system:…`).")
    status = serializers.ChoiceField(choices=ResearchRequest.Status.choices)
    retry_count = serializers.IntegerField()
    dispatched_from_backlog = serializers.BooleanField()
    source_flow_id = serializers.UUIDField(allow_null=True)
    dispatched_at = serializers.DateTimeField(allow_null=True)
    completed_at = serializers.DateTimeField(allow_null=True)
    completed_flow_id = serializers.UUIDField(allow_null=True)
    failure_reason = serializers.CharField()
    created_at = serializers.DateTimeField()


class PullResponseSerializer(serializers.Serializer[Any]):
    request = ResearchRequestRowSerializer(allow_null=True, help_text="null when no pending request is left.")


class ClaimReviewSerializer(serializers.Serializer[Any]):
    """``review_representation``: one entry of the review queue (the note is decrypted)."""

    id = serializers.UUIDField()
    claim_id = serializers.CharField()
    trigger_type = serializers.CharField()
    reason = serializers.CharField()
    source = serializers.CharField()  # type: ignore[assignment]  # a field named like DRF's Field.source
    source_flow_id = serializers.UUIDField(allow_null=True)
    marked_by = serializers.CharField()
    status = serializers.ChoiceField(choices=ClaimReview.Status.choices)
    resolution_note = serializers.CharField()
    resolved_by = serializers.CharField()
    resolved_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class ReviewQueueSerializer(serializers.Serializer[Any]):
    pending = ClaimReviewSerializer(many=True, help_text="Oldest first, at most `limit`.")
    pending_count = serializers.IntegerField()
    recent_resolutions = ClaimReviewSerializer(many=True, help_text="The last 10 of the past 24 h.")


class RecentFailureSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    trigger_type = serializers.CharField()
    reason = serializers.ChoiceField(choices=ResearchRequest.Reason.choices)
    status = serializers.ChoiceField(choices=ResearchRequest.Status.choices)
    failure_reason = serializers.CharField()
    retry_count = serializers.IntegerField()
    completed_at = serializers.DateTimeField(allow_null=True)


class RecentFailuresSerializer(serializers.Serializer[Any]):
    window_hours = serializers.IntegerField()
    count = serializers.IntegerField()
    items = RecentFailureSerializer(many=True, help_text="The latest 10.")


class LoopHealthSerializer(serializers.Serializer[Any]):
    verdict = serializers.ChoiceField(choices=Verdict.choices)
    reasons = serializers.ListField(child=serializers.CharField(), help_text="Every threshold that fired.")


class BacklogStatusSerializer(serializers.Serializer[Any]):
    """``research_backlog.health.BacklogStatus``: counts, ages and the loop-health verdict."""

    status_distribution = serializers.DictField(child=serializers.IntegerField(), help_text="Every status, zeros kept.")
    total = serializers.IntegerField()
    oldest_pending_age_seconds = serializers.FloatField(allow_null=True)
    oldest_dispatched_age_seconds = serializers.FloatField(allow_null=True)
    retry_distribution = serializers.DictField(child=serializers.IntegerField(), help_text="Rows by retry count.")
    recent_failures = RecentFailuresSerializer()
    loop_health = LoopHealthSerializer()
