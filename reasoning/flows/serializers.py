"""How a flow reads: its representation for its agent and for operators, token totals, the counts,
the patient narrative.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from reasoning.models import ReasoningFlow, ReasoningStep


def flow_representation(flow: ReasoningFlow) -> dict[str, Any]:
    data = {name: getattr(flow, name) for name in FLOW_FIELDS}
    data["cost_usd"] = _dollars(flow.cost_usd)
    return data


def step_representation(step: ReasoningStep) -> dict[str, Any]:
    data = {name: getattr(step, name) for name in STEP_FIELDS}
    data["cost_usd"] = _dollars(step.cost_usd)
    return data


def _dollars(cost: Decimal | None) -> float | None:
    """A stored cost as JSON writes it: a number, whatever the encoder (DRF's, Django's)."""
    return None if cost is None else float(cost)


def admin_flow_representation(
    flow: ReasoningFlow, steps: list[ReasoningStep], *, include_reasoning: bool = False, include_content: bool = False
) -> dict[str, Any]:
    """The operator's view. ``reasoning_content`` and ``content`` (the inputs and outputs in full,
    decrypted) appear only when asked for and allowed."""
    fields = [*ADMIN_STEP_FIELDS, "reasoning_content"] if include_reasoning else ADMIN_STEP_FIELDS
    data = flow_representation(flow)
    data["tokens"] = flow_tokens(steps)
    data["steps"] = [
        {name: getattr(step, name) for name in fields}
        | {"cost_usd": _dollars(step.cost_usd)}
        | (
            {"content": step_content(step.inputs, step.outputs, step.inputs_pii, step.outputs_pii)}
            if include_content
            else {}
        )
        for step in steps
    ]
    return data


def _content_of(step: ReasoningStep) -> dict[str, dict[str, Any]]:
    return step_content(step.inputs, step.outputs, step.inputs_pii, step.outputs_pii)


def step_content(
    inputs: dict[str, Any] | None, outputs: dict[str, Any] | None, inputs_pii: str | None, outputs_pii: str | None
) -> dict[str, dict[str, Any]]:
    """A step's inputs and outputs in full: the clear keys with the encrypted ones, decrypted."""
    return {
        "inputs": {**(inputs or {}), **(json.loads(inputs_pii) if inputs_pii else {})},
        "outputs": {**(outputs or {}), **(json.loads(outputs_pii) if outputs_pii else {})},
    }


def flow_tokens(steps: Sequence[ReasoningStep]) -> dict[str, Any]:
    """The flow's model usage from its steps: each count summed over the steps that reported
    it (null when none did: unknown is not zero), and the models named."""

    counts = {name: [n for step in steps if (n := getattr(step, name)) is not None] for name in _TOKEN_COUNTS}
    costs = [step.cost_usd for step in steps if step.cost_usd is not None]
    return {
        "steps": sum(1 for step in steps if any(getattr(step, name) is not None for name in _TOKEN_COUNTS)),
        **{name: sum(values) if values else None for name, values in counts.items()},
        "models": sorted({step.model for step in steps if step.model}),
        "cost_usd": _dollars(sum(costs, Decimal(0))) if costs else None,
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
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "model_names",
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
    input_tokens = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Summed over the steps that reported it; null when none did."
    )
    output_tokens = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="Summed over the steps that reported it; null when none did."
    )
    cost_usd = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="US dollars: the steps' costs, each at its model's price on the day it was written; "
        "null when no step's model has a known price.",
    )
    model_names = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The models the steps named, sorted."
    )

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
    "cost_usd",
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
    cost_usd = serializers.FloatField(
        read_only=True,
        allow_null=True,
        help_text="US dollars, at the model's price on the day the step was written (kept: a later price "
        "change rewrites nothing); null when the model has no known price or no tokens were reported.",
    )

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
    """``reasoning.flows.stats.ReasoningStats``: counts only, never text."""

    flows = FlowCountsSerializer(help_text="Flows by state.")
    steps = serializers.IntegerField()
    reasoning_content = ReasoningContentStatsSerializer()
    tokens = TokenStatsSerializer(help_text="Model usage (gen_ai.usage.*) in all, and by agent.")


class AdminStepSerializer(StepSerializer):
    """The operator's view of a step: adds rationale and the non-PII inputs/outputs."""

    class Meta(StepSerializer.Meta):
        fields = ADMIN_STEP_FIELDS
        read_only_fields = fields


class StepContentSerializer(serializers.Serializer[Any]):
    inputs = serializers.DictField(help_text="Every input key with its value, the encrypted ones decrypted.")
    outputs = serializers.DictField(help_text="Every output key with its value, the encrypted ones decrypted.")


class AdminStepReadSerializer(AdminStepSerializer):
    """What the flow route answers per step: ``AdminStepSerializer`` and, when asked for and
    allowed, the raw reasoning and the content."""

    reasoning_content = serializers.CharField(
        required=False, allow_null=True, help_text="Only with `include_reasoning=true` (`reasoning.cot.read`)."
    )
    content = StepContentSerializer(
        required=False, help_text="Only with `include_content=true` (`reasoning.content.read`)."
    )

    class Meta(AdminStepSerializer.Meta):
        fields = [*ADMIN_STEP_FIELDS, "reasoning_content", "content"]
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
    cost_usd = serializers.FloatField(
        allow_null=True, help_text="US dollars, summed over the steps that have a cost; null when none has."
    )


class AdminFlowSerializer(FlowSerializer):
    tokens = serializers.SerializerMethodField()
    steps = serializers.SerializerMethodField()

    class Meta(FlowSerializer.Meta):
        fields = [*FlowSerializer.Meta.fields, "tokens", "steps"]
        read_only_fields = fields

    @extend_schema_field(FlowTokensSerializer)
    def get_tokens(self, flow: ReasoningFlow) -> dict[str, Any]:
        return flow_tokens(self.context.get("steps", []))

    @extend_schema_field(AdminStepReadSerializer(many=True))
    def get_steps(self, flow: ReasoningFlow) -> list[dict[str, Any]]:
        steps = self.context.get("steps", [])
        return AdminStepSerializer(steps, many=True).data  # type: ignore[return-value]


# --- The patient narrative (GET /api/reasoning/flows/{id}) ------------------------------
# Documentation only: reasoning.flows.narrative builds the body; tests/reasoning/flows/test_narrative_api.py
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
