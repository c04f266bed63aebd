"""Request validation and response shapes for the reasoning API."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from reasoning.models import ReasoningFlow, ReasoningStep

# Labels (trigger types, step kinds, agents, outcome types) are identifiers, not prose:
# restricting their alphabet keeps free text (and so PHI) out of metrics and audit payloads.
label_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$",
    "Use letters, digits and _ . : / - only (a label, not a sentence).",
)

MAX_JSON_DEPTH = 20


def label_field(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(max_length=100, validators=[label_validator], **kwargs)


class StrictSerializer(serializers.Serializer[Any]):
    """Rejects fields it does not know, naming them, instead of silently dropping them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class JSONObjectField(serializers.JSONField):
    """A JSON object (dict) whose strings Postgres can store (no NUL characters)."""

    default_error_messages = {
        "not_object": "Must be a JSON object.",
        "nul": "Must not contain NUL (\\u0000) characters.",
        "depth": f"Must not nest deeper than {MAX_JSON_DEPTH} levels.",
    }

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_object")
        self._check(value, 0)
        return value

    def _check(self, value: Any, depth: int) -> None:
        if depth > MAX_JSON_DEPTH:
            self.fail("depth")
        if isinstance(value, str):
            if "\x00" in value:
                self.fail("nul")
        elif isinstance(value, dict):
            for key, item in value.items():
                if "\x00" in key:
                    self.fail("nul")
                self._check(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                self._check(item, depth + 1)


class FlowCreateSerializer(StrictSerializer):
    id = serializers.UUIDField(required=False, help_text="Client-chosen id; makes retries idempotent.")
    trigger_type = label_field(help_text="What opened the flow, e.g. `user_question`.")
    trigger_ref = serializers.CharField(max_length=500, required=False, allow_blank=True)
    trigger_summary = serializers.CharField(
        max_length=280, required=False, allow_blank=True, help_text="Plain-English, PHI-free description."
    )
    trace_id = serializers.CharField(
        max_length=100, required=False, help_text="Correlation id of the agent turn; generated when omitted."
    )
    session_id = serializers.CharField(max_length=100, required=False, allow_blank=True)
    agent = label_field(required=False, allow_blank=True)
    patient_id = serializers.UUIDField(required=False, allow_null=True, help_text="Opaque patient id.")


class StepCreateSerializer(StrictSerializer):
    id = serializers.UUIDField(required=False, help_text="Client-chosen id; makes retries idempotent.")
    kind = label_field(help_text="retrieval, llm_prompt, verdict, graph_walk, aggregation, … (any label).")
    agent = label_field()
    summary_text = serializers.CharField(
        max_length=280, help_text="≤ 280 chars: describes the step, not the patient's data."
    )
    rationale = serializers.CharField(max_length=20_000, required=False, allow_blank=True)
    inputs = JSONObjectField(required=False)
    outputs = JSONObjectField(required=False)
    pii_fields = serializers.ListField(
        child=serializers.CharField(max_length=100),
        max_length=100,
        required=False,
        help_text="Top-level keys of inputs/outputs whose values are PII: stored encrypted, never as JSON.",
    )
    parent_step_id = serializers.UUIDField(required=False, allow_null=True)
    extra_parent_ids = serializers.ListField(
        child=serializers.UUIDField(), max_length=50, required=False, help_text="Further parents (merges)."
    )
    confidence = serializers.FloatField(min_value=0.0, max_value=1.0, required=False, allow_null=True)
    latency_ms = serializers.IntegerField(min_value=0, max_value=2_147_483_647, required=False, allow_null=True)
    llm_call_log_ref = serializers.CharField(max_length=200, required=False, allow_blank=True)
    experiment_trace_ref = serializers.CharField(max_length=200, required=False, allow_blank=True)
    decision_graph_node_ref = serializers.CharField(max_length=200, required=False, allow_blank=True)
    memory_claim_ref = serializers.CharField(max_length=200, required=False, allow_blank=True)
    span_id = serializers.CharField(max_length=64, required=False, allow_blank=True)


class FlowCloseSerializer(StrictSerializer):
    flow_state = serializers.ChoiceField(
        choices=[ReasoningFlow.State.COMPLETED.value, ReasoningFlow.State.ABORTED.value]
    )
    outcome_type = label_field(required=False, allow_blank=True)
    outcome_summary = serializers.CharField(max_length=280, required=False, allow_blank=True)
    abort_reason = serializers.CharField(max_length=200, required=False, allow_blank=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["flow_state"] == ReasoningFlow.State.COMPLETED:
            if not attrs.get("outcome_type"):
                raise serializers.ValidationError({"outcome_type": ["Required when flow_state is 'completed'."]})
            if attrs.get("abort_reason"):
                raise serializers.ValidationError({"abort_reason": ["Only allowed when flow_state is 'aborted'."]})
        return attrs


class FlowSerializer(serializers.ModelSerializer[ReasoningFlow]):
    patient_id = serializers.UUIDField(read_only=True, allow_null=True)

    class Meta:
        model = ReasoningFlow
        fields = [
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
            "patient_safe_summary",
            "created_at",
            "closed_at",
        ]
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
    "pii_fields",
    "created_at",
]


class StepSerializer(serializers.ModelSerializer[ReasoningStep]):
    flow_id = serializers.UUIDField(read_only=True)
    parent_step_id = serializers.UUIDField(read_only=True, allow_null=True)

    class Meta:
        model = ReasoningStep
        fields = STEP_FIELDS
        read_only_fields = fields


class AdminStepSerializer(StepSerializer):
    """The operator's view of a step: adds rationale and the non-PII inputs/outputs."""

    class Meta(StepSerializer.Meta):
        fields = [*STEP_FIELDS, "rationale", "inputs", "outputs"]
        read_only_fields = fields


class AdminFlowSerializer(FlowSerializer):
    steps = serializers.SerializerMethodField()

    class Meta(FlowSerializer.Meta):
        fields = [*FlowSerializer.Meta.fields, "steps"]
        read_only_fields = fields

    @extend_schema_field(AdminStepSerializer(many=True))
    def get_steps(self, flow: ReasoningFlow) -> list[dict[str, Any]]:
        steps = self.context["steps"]
        return AdminStepSerializer(steps, many=True).data  # type: ignore[return-value]
