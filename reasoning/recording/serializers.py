"""What the write routes accept and answer: flows, steps, batches, closes, ingest items, OTLP answers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from rest_framework import serializers

from core.serializers import (
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
    label_field,
    multiline_text_validator,
    plain_text_validator,
)
from reasoning.flows.serializers import StepSerializer
from reasoning.models import ReasoningFlow, ReasoningStep


class FlowCreateSerializer(StrictSerializer):
    id = StrictUUIDField(required=False, help_text="Client-chosen id; makes retries idempotent.")
    trigger_type = label_field(help_text="What opened the flow, e.g. `user_question`.")
    trigger_ref = StrictCharField(max_length=500, required=False, allow_blank=True)
    trigger_summary = StrictCharField(
        max_length=280,
        required=False,
        allow_blank=True,
        validators=[plain_text_validator],
        help_text="Plain-English, PHI-free description.",
    )
    trace_id = StrictCharField(
        max_length=100, required=False, help_text="Correlation id of the agent turn; generated when omitted."
    )
    session_id = StrictCharField(max_length=100, required=False, allow_blank=True)
    agent = label_field(required=False, allow_blank=True)
    patient_id = StrictUUIDField(required=False, allow_null=True, help_text="Opaque patient id.")
    user_id = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text="The end user the agent served (a trace's `user.id`). Only a keyed pseudonym of it is stored "
        "(the flow's `user_ref`); the flow list finds a user's flows by the id (`?user_id=`).",
    )
    dispatched_from_backlog = StrictBooleanField(
        required=False,
        help_text="Set by a research dispatcher running a backlog request: the flow's close never enqueues "
        "follow-up research (the loop-break marker).",
    )


class StepCreateSerializer(StrictSerializer):
    id = StrictUUIDField(required=False, help_text="Client-chosen id; makes retries idempotent.")
    kind = label_field(
        max_length=64, help_text="retrieval, llm_prompt, verdict, graph_walk, aggregation, … (any label)."
    )
    agent = label_field()
    summary_text = StrictCharField(
        max_length=280,
        validators=[plain_text_validator],
        help_text="≤ 280 chars: describes the step, not the patient's data.",
    )
    rationale = StrictCharField(max_length=20_000, required=False, allow_blank=True)
    inputs = JSONObjectField(required=False)
    outputs = JSONObjectField(required=False)
    pii_fields = serializers.ListField(
        child=StrictCharField(max_length=100),
        max_length=100,
        required=False,
        help_text="Top-level keys of inputs/outputs whose values are PII: stored encrypted, never as JSON.",
    )
    parent_step_id = StrictUUIDField(required=False, allow_null=True)
    extra_parent_ids = serializers.ListField(
        child=StrictUUIDField(), max_length=50, required=False, help_text="Further parents (merges)."
    )
    confidence = StrictFloatField(min_value=0.0, max_value=1.0, required=False, allow_null=True)
    latency_ms = StrictIntegerField(min_value=0, max_value=2_147_483_647, required=False, allow_null=True)
    llm_call_log_ref = StrictCharField(max_length=200, required=False, allow_blank=True)
    experiment_trace_ref = StrictCharField(max_length=200, required=False, allow_blank=True)
    decision_graph_node_ref = StrictCharField(max_length=200, required=False, allow_blank=True)
    memory_claim_ref = StrictCharField(max_length=200, required=False, allow_blank=True)
    span_id = StrictCharField(max_length=64, required=False, allow_blank=True)
    model = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=True,
        validators=[multiline_text_validator],
        help_text="The model that answered (`gen_ai.response.model`), e.g. `gpt-4o-2024-08-06`.",
    )
    input_tokens = StrictIntegerField(min_value=0, max_value=2_147_483_647, required=False, allow_null=True)
    output_tokens = StrictIntegerField(min_value=0, max_value=2_147_483_647, required=False, allow_null=True)
    reasoning_tokens = StrictIntegerField(
        min_value=0,
        max_value=2_147_483_647,
        required=False,
        allow_null=True,
        help_text="Reasoning (thinking) tokens, where the provider reports them.",
    )
    cached_tokens = StrictIntegerField(
        min_value=0,
        max_value=2_147_483_647,
        required=False,
        allow_null=True,
        help_text="Input tokens served from the provider's prompt cache (part of input_tokens).",
    )
    tool = StrictCharField(
        max_length=200,
        required=False,
        allow_blank=True,
        validators=[plain_text_validator],
        help_text="The tool a tool_call step ran, e.g. `lookup_guideline`.",
    )
    outcome = serializers.ChoiceField(
        choices=ReasoningStep.Outcome.choices,
        required=False,
        help_text="`error` when the step's work failed (default `ok`).",
    )
    error_type = label_field(
        max_length=100,
        required=False,
        allow_blank=True,
        help_text="How it failed, as a label (an exception class, an HTTP status): never a message.",
    )
    started_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="When the step began; a flow's steps are read in this order."
    )
    reasoning_content = StrictCharField(
        max_length=200_000,
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="Raw model chain-of-thought: stored encrypted, never shown to patients, read only with "
        "reasoning.cot.read.",
    )


MAX_BATCH_STEPS = 100


class StepBatchSerializer(StrictSerializer):
    steps: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=StepCreateSerializer(), min_length=1, max_length=MAX_BATCH_STEPS
    )


class OutcomeMetricsSerializer(StrictSerializer):
    """What the agent measured about its result; the research-backlog producers read these."""

    composite_k = StrictFloatField(
        min_value=0.0, max_value=1.0, required=False, allow_null=True, help_text="Researcher evidence strength."
    )
    evidence_hits = StrictIntegerField(
        min_value=0, max_value=1_000_000, required=False, allow_null=True, help_text="Researcher evidence count."
    )
    verdict = label_field(max_length=64, required=False, help_text="Critic verdict, e.g. `promote` or `reject`.")
    claim_id = StrictCharField(
        max_length=200,
        required=False,
        validators=[multiline_text_validator],
        help_text="Opaque id of the claim judged.",
    )
    rejection_reason = label_field(
        max_length=100, required=False, help_text="Why the Critic rejected, as a label (`contradicted_by_source`)."
    )


# The states a close may set (OpenAPI names the enum FlowCloseStateEnum).
CLOSE_STATES = [ReasoningFlow.State.COMPLETED.value, ReasoningFlow.State.ABORTED.value]


class FlowCloseSerializer(StrictSerializer):
    flow_state = serializers.ChoiceField(choices=CLOSE_STATES)
    outcome_type = label_field(required=False, allow_blank=True)
    outcome_summary = StrictCharField(
        max_length=280, required=False, allow_blank=True, validators=[plain_text_validator]
    )
    abort_reason = StrictCharField(max_length=200, required=False, allow_blank=True)
    outcome_metrics = OutcomeMetricsSerializer(required=False)

    # What ``validate`` requires, as the OpenAPI document states it (core.api_views.AutoSchema). Patterns, not
    # enums: drf-spectacular would make each enum a component of its own.
    openapi_one_of = [
        {
            "description": "Completed: a non-blank `outcome_type` is required; no `abort_reason`.",
            "properties": {
                "flow_state": {"pattern": "^completed$"},
                "outcome_type": {"minLength": 1},
                "abort_reason": {"pattern": r"^\s*$"},
            },
            "required": ["outcome_type"],
        },
        {"description": "Aborted.", "properties": {"flow_state": {"pattern": "^aborted$"}}},
    ]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["flow_state"] == ReasoningFlow.State.COMPLETED:
            if not attrs.get("outcome_type"):
                raise serializers.ValidationError({"outcome_type": ["Required when flow_state is 'completed'."]})
            if attrs.get("abort_reason"):
                raise serializers.ValidationError({"abort_reason": ["Only allowed when flow_state is 'aborted'."]})
        return attrs


# --- POST /api/reasoning/ingest ---------------------------------------------------------
MAX_INGEST_FLOWS = 100


MAX_INGEST_STEPS = 1000


# How far ahead of the server's clock an agent's clock may run.
CLOCK_SKEW = timedelta(minutes=5)


# The earliest time a flow may say it began or ended (and an OTLP span, reasoning.recording.otlp): no agent
# ran before it, and a year 1 or 1970 is a client's default, not a time.
EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=UTC)


def _within_reason(value: datetime) -> None:
    if value > timezone.now() + CLOCK_SKEW:
        raise serializers.ValidationError("Must not be in the future.")
    if value < EARLIEST_TIME:
        raise serializers.ValidationError(f"Must not be before {EARLIEST_TIME.isoformat().replace('+00:00', 'Z')}.")


class IngestCloseSerializer(FlowCloseSerializer):
    ended_at = serializers.DateTimeField(
        required=False,
        validators=[_within_reason],
        help_text="When the flow ended by the agent's clock (an SDK that batches sends it); default: on arrival. "
        "Not in the future, nor before 2000-01-01.",
    )


class IngestItemSerializer(FlowCreateSerializer):
    """One flow of an ingest request: open it (its fields as ``POST /api/reasoning/flows`` takes
    them), append ``steps`` and ``close`` it; or, with only ``id``, ``steps`` and ``close``,
    append to and close a stored active flow."""

    trigger_type = label_field(
        required=False, help_text="What opened the flow. Required to open one; leave out to name a stored flow."
    )
    steps: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=StepCreateSerializer(), max_length=MAX_INGEST_STEPS, required=False, help_text="In order."
    )
    started_at = serializers.DateTimeField(
        required=False,
        validators=[_within_reason],
        help_text="When the flow began by the agent's clock (an SDK that batches sends it); default: on arrival. "
        "Only when the item opens the flow. Not in the future, nor before 2000-01-01.",
    )
    close = IngestCloseSerializer(
        required=False, help_text="Close the flow after its steps (as the PATCH takes it, plus `ended_at`)."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        started, ended = attrs.get("started_at"), (attrs.get("close") or {}).get("ended_at")
        if started is not None and ended is not None and ended < started:
            raise serializers.ValidationError({"close": {"ended_at": ["Must not be before started_at."]}})
        if "trigger_type" not in attrs:
            opening = sorted(set(attrs) - {"id", "steps", "close"})
            if opening:
                raise serializers.ValidationError(
                    {"trigger_type": ["Required to open a flow (this item sets " + ", ".join(opening) + ")."]}
                )
            if "id" not in attrs:
                raise serializers.ValidationError(
                    {"id": ["Required: the id of a stored flow to append to, or give trigger_type to open one."]}
                )
        return attrs


class IngestSerializer(StrictSerializer):
    flows: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=IngestItemSerializer(), min_length=1, max_length=MAX_INGEST_FLOWS
    )


class IngestItemResultSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(help_text="The item's position in `flows`.")
    id = serializers.UUIDField(allow_null=True, help_text="The flow's id (null when a rejected item had none).")
    status = serializers.ChoiceField(
        choices=["created", "replayed", "rejected"],
        help_text="`created`: something was written; `replayed`: everything was already stored exactly as "
        "sent; `rejected`: nothing of this item was written (see `errors`).",
    )
    flow_state = serializers.ChoiceField(choices=ReasoningFlow.State.choices, allow_null=True)
    step_count = serializers.IntegerField(allow_null=True, help_text="The flow's steps after this request.")
    # "errors" shadows Serializer.errors in the stubs only: DRF's metaclass takes declared fields off the class.
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text='Field errors named from the body\'s root: `{"flows[3].steps[2].summary_text": [...]}`.',
    )


class IngestResultSerializer(serializers.Serializer[Any]):
    flows = IngestItemResultSerializer(many=True)
    created = serializers.IntegerField()
    replayed = serializers.IntegerField()
    rejected = serializers.IntegerField()


class OtlpPartialSuccessSerializer(serializers.Serializer[Any]):
    rejectedSpans = serializers.CharField(help_text="The count, as OTLP JSON writes int64: a string.")
    errorMessage = serializers.CharField(help_text="Why, span by span (the first five).")


class OtlpExportResponseSerializer(serializers.Serializer[Any]):
    partialSuccess = OtlpPartialSuccessSerializer(required=False, help_text="Only when some spans were rejected.")


class OtlpStatusSerializer(serializers.Serializer[Any]):
    """A ``google.rpc.Status``: the OTLP/HTTP error body."""

    code = serializers.IntegerField(help_text="google.rpc.Code (3 INVALID_ARGUMENT, 16 UNAUTHENTICATED, …).")
    message = serializers.CharField()


class StepBatchResponseSerializer(serializers.Serializer[Any]):
    steps = StepSerializer(many=True)
