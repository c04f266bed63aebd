"""Request validation and response shapes for the reasoning API."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.utils.deconstruct import deconstructible
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from reasoning.models import ReasoningFlow, ReasoningStep

# Labels (trigger types, step kinds, agents, outcome types) are identifiers, not prose:
# restricting their alphabet keeps free text (and so PHI) out of metrics and audit payloads.
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$"
LABEL_RULE = (
    "A label: letters, digits and _ . : / - only ([A-Za-z0-9_.:/-]), starting with a letter or digit, "
    "e.g. `dispatcher_gave_up`."
)


class LabelValidator(RegexValidator):
    """The label rule; its message says what a label is, so a caller can fix a rejected value."""

    # Read by config.api.AutoSchema: every label field's OpenAPI description states the rule.
    openapi_description = LABEL_RULE

    def __init__(self) -> None:
        super().__init__(
            LABEL_PATTERN,
            "Must be a label matching [A-Za-z0-9_.:/-] (letters, digits and _ . : / -, starting with a letter "
            "or digit), e.g. dispatcher_gave_up: a label, not a sentence.",
        )


label_validator = LabelValidator()

# Unicode categories no plain text needs, all of which render invisibly or reorder what an
# operator or patient reads: controls (Cc), format characters (Cf: zero-width, bidi controls,
# soft hyphen, BOM, tags), line and paragraph separators (Zl, Zp), surrogates and private use.
FORBIDDEN_TEXT_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co"})


@deconstructible
class PlainTextValidator:
    """Refuse characters of ``FORBIDDEN_TEXT_CATEGORIES``; ``multiline`` text may hold tab, LF and CR.

    Not a RegexValidator: drf-spectacular would publish its regex as a positive ``pattern``
    even though it lists the forbidden characters. ``openapi_pattern`` is the published
    form: the allowed characters of the Basic Multilingual Plane (a JSON Schema pattern
    cannot name Unicode categories portably). Every value it matches is accepted here;
    characters past U+FFFF (emoji, …) are accepted too unless they are format or private-use.
    """

    def __init__(self, message: str, *, multiline: bool = False) -> None:
        self.message = message
        self.multiline = multiline
        self.allowed = frozenset("\t\n\r") if multiline else frozenset()

    def __call__(self, value: str) -> None:
        for char in value:
            if char not in self.allowed and unicodedata.category(char) in FORBIDDEN_TEXT_CATEGORIES:
                raise ValidationError(self.message, code="invalid")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PlainTextValidator) and (self.message, self.multiline) == (
            other.message,
            other.multiline,
        )

    def __hash__(self) -> int:
        return hash((self.message, self.multiline))

    @property
    def openapi_pattern(self) -> str:
        return _allowed_bmp_pattern(self.multiline)

    @property
    def openapi_description(self) -> str:
        lines = "Tab, line feed and carriage return are allowed. " if self.multiline else "One line. "
        return (
            "Plain text: no control characters, no format characters (zero-width, bidirectional controls, soft "
            "hyphen, BOM), no line/paragraph separators (U+2028, U+2029), surrogates or private-use characters "
            f"(Unicode categories Cc, Cf, Zl, Zp, Cs, Co). {lines}Surrounding whitespace is trimmed. `pattern` "
            "lists the allowed characters up to U+FFFF; characters beyond it are accepted unless they are format "
            "or private-use characters."
        )


@cache
def _allowed_bmp_pattern(multiline: bool) -> str:
    """The published pattern: allowed BMP characters, with no whitespace at either end.

    ``^(?:N(?:C*N)?)?$`` where C is every allowed character and N the non-whitespace ones: the
    server trims surrounding whitespace (a value of spaces only is blank), so a value this
    matches is one the server keeps as sent.
    """
    extra = {0x09, 0x0A, 0x0D} if multiline else set()
    allowed = [
        code
        for code in range(0x10000)
        if code in extra or unicodedata.category(chr(code)) not in FORBIDDEN_TEXT_CATEGORIES
    ]
    any_char = _char_class(allowed)
    edge_char = _char_class([code for code in allowed if not chr(code).isspace()])
    return f"^(?:{edge_char}(?:{any_char}*{edge_char})?)?$"


def _char_class(codes: list[int]) -> str:
    """``[\\uXXXX-\\uYYYY...]`` for sorted code points, merged into ranges."""
    ranges: list[tuple[int, int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1] = (ranges[-1][0], code)
        else:
            ranges.append((code, code))
    return "[" + "".join(f"\\u{lo:04x}" if lo == hi else f"\\u{lo:04x}-\\u{hi:04x}" for lo, hi in ranges) + "]"


# Summaries are shown to patients as single lines of plain text.
plain_text_validator = PlainTextValidator(
    "Must be plain text on one line (no control, format or separator characters such as U+200B, U+202E, U+2028)."
)
# Questions and notes may span lines (\n, or \r\n from a browser's textarea) and hold tabs.
multiline_text_validator = PlainTextValidator("Must be text without control characters.", multiline=True)

MAX_JSON_DEPTH = 20
_SURROGATE = re.compile("[\ud800-\udfff]")


def label_field(*, max_length: int = 100, **kwargs: Any) -> serializers.CharField:
    return StrictCharField(max_length=max_length, validators=[label_validator], **kwargs)


class StrictCharField(serializers.CharField):
    """A string, and only a string: DRF would quietly turn 123 into "123"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def _is_json_number(data: Any) -> bool:
    # bool is an int subclass: true would otherwise count as 1.
    return isinstance(data, int | float) and not isinstance(data, bool)


class StrictFloatField(serializers.FloatField):
    """A JSON number (integers included): DRF would quietly turn true into 1.0 and "0.5" into 0.5."""

    default_error_messages = {"invalid": "A valid number is required. Send a JSON number, not a string or boolean."}

    def to_internal_value(self, data: Any) -> float:
        if not _is_json_number(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer: DRF would quietly turn true into 1 and "7" into 7."""

    default_error_messages = {"invalid": "A valid integer is required. Send a JSON number, not a string or boolean."}

    def to_internal_value(self, data: Any) -> int:
        if not _is_json_number(data):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID written as a string: DRF would quietly turn 42 into 00000000-…-00000000002a."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false``: DRF would quietly accept "yes", "on", 1 and 0."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictSerializer(serializers.Serializer[Any]):
    """Rejects fields it does not know, naming them, instead of silently dropping them."""

    # Read by config.api.AutoSchema: the request body schema says so (additionalProperties: false).
    openapi_additional_properties = False

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
        "surrogate": "Must not contain lone surrogate characters (U+D800 to U+DFFF).",
        "depth": f"Must not nest deeper than {MAX_JSON_DEPTH} levels.",
    }

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            self.fail("not_object")
        self._check(value, 0)
        return value

    def _check_text(self, text: str) -> None:
        if "\x00" in text:
            self.fail("nul")
        if _SURROGATE.search(text):
            self.fail("surrogate")

    def _check(self, value: Any, depth: int) -> None:
        if depth > MAX_JSON_DEPTH:
            self.fail("depth")
        if isinstance(value, str):
            self._check_text(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                self._check_text(key)
                self._check(item, depth + 1)
        elif isinstance(value, list):
            for item in value:
                self._check(item, depth + 1)


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


class FlowCloseSerializer(StrictSerializer):
    flow_state = serializers.ChoiceField(
        choices=[ReasoningFlow.State.COMPLETED.value, ReasoningFlow.State.ABORTED.value]
    )
    outcome_type = label_field(required=False, allow_blank=True)
    outcome_summary = StrictCharField(
        max_length=280, required=False, allow_blank=True, validators=[plain_text_validator]
    )
    abort_reason = StrictCharField(max_length=200, required=False, allow_blank=True)
    outcome_metrics = OutcomeMetricsSerializer(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["flow_state"] == ReasoningFlow.State.COMPLETED:
            if not attrs.get("outcome_type"):
                raise serializers.ValidationError({"outcome_type": ["Required when flow_state is 'completed'."]})
            if attrs.get("abort_reason"):
                raise serializers.ValidationError({"abort_reason": ["Only allowed when flow_state is 'aborted'."]})
        return attrs


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
    data["steps"] = [{name: getattr(step, name) for name in fields} for step in steps]
    return data


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
    "outcome_metrics",
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


class StepBatchResponseSerializer(serializers.Serializer[Any]):
    steps = StepSerializer(many=True)


class AdminStepSerializer(StepSerializer):
    """The operator's view of a step: adds rationale and the non-PII inputs/outputs."""

    class Meta(StepSerializer.Meta):
        fields = ADMIN_STEP_FIELDS
        read_only_fields = fields


class AdminFlowSerializer(FlowSerializer):
    steps = serializers.SerializerMethodField()

    class Meta(FlowSerializer.Meta):
        fields = [*FlowSerializer.Meta.fields, "steps"]
        read_only_fields = fields

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
