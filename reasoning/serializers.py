"""Request validation and response shapes for the reasoning API."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
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


# --- POST /v1/traces (documentation of the OTLP JSON answers) -------------------------------


class OtlpPartialSuccessSerializer(serializers.Serializer[Any]):
    rejectedSpans = serializers.CharField(help_text="The count, as OTLP JSON writes int64: a string.")
    errorMessage = serializers.CharField(help_text="Why, span by span (the first five).")


class OtlpExportResponseSerializer(serializers.Serializer[Any]):
    partialSuccess = OtlpPartialSuccessSerializer(required=False, help_text="Only when some spans were rejected.")


class OtlpStatusSerializer(serializers.Serializer[Any]):
    """A ``google.rpc.Status``: the OTLP/HTTP error body."""

    code = serializers.IntegerField(help_text="google.rpc.Code (3 INVALID_ARGUMENT, 16 UNAUTHENTICATED, …).")
    message = serializers.CharField()


# Responses are built by the *_representation functions below (plain attribute reads;
# DRF's JSON encoder formats UUIDs and datetimes exactly as its serializer fields do).
# Building a ModelSerializer per response cost ~1 ms of the ~3 ms write path; the
# ModelSerializer classes remain the documented (OpenAPI) shape, and
# tests/reasoning/test_representation.py keeps the two identical.


def flow_representation(flow: ReasoningFlow) -> dict[str, Any]:
    return {name: getattr(flow, name) for name in FLOW_FIELDS}


def step_representation(step: ReasoningStep) -> dict[str, Any]:
    return {name: getattr(step, name) for name in STEP_FIELDS}


def admin_flow_representation(
    flow: ReasoningFlow, steps: list[ReasoningStep], *, include_reasoning: bool = False
) -> dict[str, Any]:
    """The operator's view. ``reasoning_content`` appears only when asked for and allowed."""
    fields = [*ADMIN_STEP_FIELDS, "reasoning_content"] if include_reasoning else ADMIN_STEP_FIELDS
    data = flow_representation(flow)
    data["tokens"] = flow_tokens(steps)
    data["steps"] = [{name: getattr(step, name) for name in fields} for step in steps]
    return data


def flow_tokens(steps: Sequence[ReasoningStep]) -> dict[str, Any]:
    """The flow's model usage from its steps: each count summed over the steps that reported
    it (null when none did: unknown is not zero), and the models named."""

    counts = {name: [n for step in steps if (n := getattr(step, name)) is not None] for name in _TOKEN_COUNTS}
    return {
        "steps": sum(1 for step in steps if any(getattr(step, name) is not None for name in _TOKEN_COUNTS)),
        **{name: sum(values) if values else None for name, values in counts.items()},
        "models": sorted({step.model for step in steps if step.model}),
    }


_TOKEN_COUNTS = ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")


FLOW_FIELDS = [
    "id",
    "trigger_type",
    "trigger_ref",
    "trigger_summary",
    "trace_id",
    "session_id",
    "agent",
    "patient_id",
    "flow_state",
    "step_count",
    "outcome_type",
    "outcome_summary",
    "outcome_confidence",
    "abort_reason",
    "user_ref",
    "parent_span_id",
    "outcome_metrics",
    "outcome",
    "outcome_correct",
    "outcome_recorded_at",
    "dispatched_from_backlog",
    "dimensions_snapshot",
    "patient_safe_summary",
    "summary_guard_rule",
    "created_at",
    "closed_at",
]


class FlowSerializer(serializers.ModelSerializer[ReasoningFlow]):
    patient_id = serializers.UUIDField(read_only=True, allow_null=True)

    class Meta:
        model = ReasoningFlow
        fields = FLOW_FIELDS
        read_only_fields = fields


STEP_FIELDS = [
    "id",
    "flow_id",
    "position",
    "parent_step_id",
    "extra_parent_ids",
    "kind",
    "agent",
    "summary_text",
    "confidence",
    "latency_ms",
    "llm_call_log_ref",
    "experiment_trace_ref",
    "decision_graph_node_ref",
    "memory_claim_ref",
    "span_id",
    "model",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "tool",
    "outcome",
    "error_type",
    "started_at",
    "pii_fields",
    "created_at",
]


ADMIN_STEP_FIELDS = [*STEP_FIELDS, "rationale", "inputs", "outputs", "reasoning_content_chars"]


class StepSerializer(serializers.ModelSerializer[ReasoningStep]):
    flow_id = serializers.UUIDField(read_only=True)
    parent_step_id = serializers.UUIDField(read_only=True, allow_null=True)

    class Meta:
        model = ReasoningStep
        fields = STEP_FIELDS
        read_only_fields = fields


class ReasoningContentStatsSerializer(serializers.Serializer[Any]):
    steps_with_reasoning = serializers.IntegerField(help_text="Steps that hold raw reasoning now.")
    purged = serializers.IntegerField(help_text="Steps whose raw reasoning the retention job deleted.")
    chars_sum = serializers.IntegerField()
    chars_p50 = serializers.IntegerField(allow_null=True)
    chars_p95 = serializers.IntegerField(allow_null=True)


class FlowCountsSerializer(serializers.Serializer[Any]):
    active = serializers.IntegerField()
    completed = serializers.IntegerField()
    aborted = serializers.IntegerField()


class AgentTokensSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField()
    steps = serializers.IntegerField(help_text="Steps that reported model usage.")
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    reasoning_tokens = serializers.IntegerField()


class TokenStatsSerializer(serializers.Serializer[Any]):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    reasoning_tokens = serializers.IntegerField()
    by_agent = AgentTokensSerializer(many=True, help_text="The 20 agents that used the most tokens, most first.")


class ReasoningStatsSerializer(serializers.Serializer[Any]):
    """``reasoning.stats.ReasoningStats``: counts only, never text."""

    flows = FlowCountsSerializer(help_text="Flows by state.")
    steps = serializers.IntegerField()
    reasoning_content = ReasoningContentStatsSerializer()
    tokens = TokenStatsSerializer(help_text="Model usage (gen_ai.usage.*) in all, and by agent.")


class StepBatchResponseSerializer(serializers.Serializer[Any]):
    steps = StepSerializer(many=True)


class AdminStepSerializer(StepSerializer):
    """The operator's view of a step: adds rationale and the non-PII inputs/outputs."""

    class Meta(StepSerializer.Meta):
        fields = ADMIN_STEP_FIELDS
        read_only_fields = fields


class FlowTokensSerializer(serializers.Serializer[Any]):
    """``flow_tokens``: the flow's model usage, from its steps."""

    steps = serializers.IntegerField(help_text="Steps that reported model usage.")
    input_tokens = serializers.IntegerField(allow_null=True, help_text="Summed; null when no step reported it.")
    output_tokens = serializers.IntegerField(allow_null=True, help_text="Summed; null when no step reported it.")
    reasoning_tokens = serializers.IntegerField(allow_null=True, help_text="Summed; null when no step reported it.")
    cached_tokens = serializers.IntegerField(
        allow_null=True, help_text="Input tokens served from the prompt cache, summed; null when no step reported it."
    )
    models = serializers.ListField(child=serializers.CharField(), help_text="The models the steps named, sorted.")


class AdminFlowSerializer(FlowSerializer):
    tokens = serializers.SerializerMethodField()
    steps = serializers.SerializerMethodField()

    class Meta(FlowSerializer.Meta):
        fields = [*FlowSerializer.Meta.fields, "tokens", "steps"]
        read_only_fields = fields

    @extend_schema_field(FlowTokensSerializer)
    def get_tokens(self, flow: ReasoningFlow) -> dict[str, Any]:
        return flow_tokens(self.context.get("steps", []))

    @extend_schema_field(AdminStepSerializer(many=True))
    def get_steps(self, flow: ReasoningFlow) -> list[dict[str, Any]]:
        steps = self.context.get("steps", [])
        return AdminStepSerializer(steps, many=True).data  # type: ignore[return-value]


# --- The patient narrative (GET /api/reasoning/flows/{id}) ------------------------------
# Documentation only: reasoning.narrative builds the body; tests/reasoning/test_narrative_api.py
# checks that every answer has exactly these fields.
# The closed states with the model's labels: a choice set of its own (NarrativeFlowStateEnum), not
# FlowClose's request enum, which spectacular could not name for two components at once.
_CLOSED_STATES = [(state.value, state.label) for state in (ReasoningFlow.State.COMPLETED, ReasoningFlow.State.ABORTED)]


class NarrativeStepSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField(help_text="The agent's plain label (`Research assistant`).")
    summary = serializers.CharField(help_text="The step's summary (it passed the summary guard).")
    created_at = serializers.DateTimeField()


class NarrativeAxisSerializer(serializers.Serializer[Any]):
    axis = serializers.ChoiceField(choices=["confidence", "coverage", "maturity", "recency", "consensus", "risk"])
    # "label" and "source" shadow Field attributes in the stubs only: DRF's metaclass takes declared
    # fields off the class.
    label = serializers.CharField(help_text="The patient's label (`How sure`).")  # type: ignore[assignment]
    score = serializers.IntegerField(min_value=0, max_value=7)
    bucket = serializers.ChoiceField(choices=["low", "medium", "high"])


class NarrativeDimensionsSerializer(serializers.Serializer[Any]):
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=["snapshot", "computed"], help_text="`snapshot`: as it stood at close."
    )
    axes = NarrativeAxisSerializer(many=True)


class NarrativeStoppedSerializer(serializers.Serializer[Any]):
    message = serializers.CharField(
        help_text="Says that the process stopped before reaching a decision and that nothing was recommended."
    )
    reason = serializers.ChoiceField(
        choices=["timeout", "tool_error", "other"],
        help_text="The abort label when it is a known one, else `other` (the raw label is never shown).",
    )
    reason_text = serializers.CharField(help_text="The reason as a plain sentence for the patient.")


class NarrativeSerializer(serializers.Serializer[Any]):
    """200: a closed flow whose summaries all passed the guard."""

    decision_id = serializers.UUIDField()
    flow_state = serializers.ChoiceField(choices=_CLOSED_STATES)
    reached_decision = serializers.BooleanField(help_text="False for an aborted flow: nothing was decided.")
    stopped = NarrativeStoppedSerializer(
        allow_null=True, help_text="Only for an aborted flow (else null): why it stopped, in plain words."
    )
    trigger_summary = serializers.CharField(allow_blank=True)
    steps = NarrativeStepSerializer(many=True)
    outcome_summary = serializers.CharField(
        allow_blank=True, allow_null=True, help_text="Null for an aborted flow: it reached no outcome."
    )
    closed_at = serializers.DateTimeField(help_text="When the flow finished, or stopped.")
    dimensions = NarrativeDimensionsSerializer(
        allow_null=True, help_text="The Decision Dimensions radar; null for an aborted flow (no decision to rate)."
    )
    disclaimer = serializers.CharField()


class NarrativePendingSerializer(serializers.Serializer[Any]):
    """202: the flow is still running."""

    decision_id = serializers.UUIDField()
    flow_state = serializers.ChoiceField(choices=["active"])
    step_count = serializers.IntegerField(min_value=0)
    detail = serializers.CharField()
