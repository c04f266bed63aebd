"""Outcomes and sessions over HTTP: record what happened after a decision (once), one flow at a
time or many, and read sessions (summaries, the list, the replay). Thin: validate, call one
service or read, shape the answer. The request and response shapes are declared here, one
serializer per body, so the OpenAPI document is exact."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core import api_views
from core.actors import actor_for
from core.api_views import ERRORS, ApiView, flat_errors, limit_parameter, parse_limit, parse_uuid, with_next_page
from core.errors import NotFound
from core.labels import label_schema
from core.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
    StrictUUIDField,
    plain_text_validator,
    validated,
)
from reasoning.auth import CanWrite, IsAdmin, changes_only_own_flows
from reasoning.flows.serializers import FlowSerializer, flow_representation
from reasoning.models import ReasoningFlow
from reasoning.outcomes import services
from reasoning.outcomes.sessions import SESSION_PERIODS, SessionPage, check_session_id, session_summaries

MAX_OUTCOMES = 1000

# --- Shapes -----------------------------------------------------------------------------------

OUTCOME_HELP = (
    "What happened after the decision: a label (`follow_up_booked`) or one short line of plain text "
    "(≤ 280 characters). Checked by the summary guard: a text that reads as PHI (an e-mail, a date, a "
    "dose, an id, …) is a 400 naming the rule, and nothing is written."
)
CORRECT_HELP = (
    "Required, and may be null: `true` (the decision was right), `false` (it was wrong) or `null` (not "
    "known, or cannot be judged). Recorded once, whatever it says."
)


class GuardedOutcomeField(StrictCharField):
    """The outcome text: the summary guard (reasoning.outcomes.services) refuses what is not one line of plain text
    (its rule `control_chars`, which is the plain-text rule), so the schema publishes that rule's pattern."""

    openapi_validators = (plain_text_validator,)


class OutcomeRecordSerializer(StrictSerializer):
    outcome = GuardedOutcomeField(max_length=280, help_text=OUTCOME_HELP)
    correct = StrictBooleanField(allow_null=True, help_text=CORRECT_HELP)


class OutcomeBatchItemSerializer(OutcomeRecordSerializer):
    flow_id = StrictUUIDField(help_text="The closed flow whose outcome this is.")


class OutcomeBatchSerializer(StrictSerializer):
    outcomes: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=OutcomeBatchItemSerializer(), min_length=1, max_length=MAX_OUTCOMES
    )


class OutcomeItemResultSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(help_text="The item's position in `outcomes`.")
    flow_id = serializers.UUIDField(allow_null=True, help_text="Null when a rejected item named no valid id.")
    status = serializers.CharField(help_text="`recorded` or `rejected` (nothing of the item was written).")
    reason = serializers.CharField(
        allow_blank=True,
        help_text="Blank when recorded. `invalid`: the item's fields (see `errors`); `not_found`; `flow_active`: "
        "the flow is not closed yet; `already_recorded`; `duplicate`: the flow came earlier in this request; "
        "`blank`; `unsafe_outcome`: the summary guard refused the text (`errors` names the rule).",
    )
    errors = serializers.DictField(  # type: ignore[assignment]  # shadows Serializer.errors in the stubs only
        child=serializers.ListField(child=serializers.CharField()),
        help_text='Named from the body\'s root: `{"outcomes[3].correct": [...]}`.',
    )


class OutcomeBatchResultSerializer(serializers.Serializer[Any]):
    outcomes = OutcomeItemResultSerializer(many=True)
    recorded = serializers.IntegerField()
    rejected = serializers.IntegerField()


class SessionSummarySerializer(serializers.Serializer[Any]):
    """``reasoning.outcomes.sessions.SessionSummary``."""

    session_id = serializers.CharField()
    agent = serializers.CharField(allow_blank=True, help_text="The agent with the most flows (ties: alphabetical).")
    agents = serializers.ListField(child=serializers.CharField(), help_text="Every agent, most flows first.")
    total_decisions = serializers.IntegerField(help_text="The session's flows, whatever their state.")
    with_outcome = serializers.IntegerField(help_text="Flows whose outcome is recorded.")
    correct = serializers.IntegerField(help_text="Outcomes recorded with `correct: true`.")
    incorrect = serializers.IntegerField(help_text="Outcomes recorded with `correct: false`.")
    accuracy = serializers.FloatField(
        allow_null=True, help_text="correct / (correct + incorrect); null when no outcome was judged."
    )
    decision_types = serializers.DictField(child=serializers.IntegerField(), help_text="trigger_type → flows.")
    first_at = serializers.DateTimeField(help_text="When the first flow was opened.")
    last_at = serializers.DateTimeField(help_text="When the last flow was opened.")
    mean_confidence = serializers.FloatField(
        allow_null=True, help_text="Mean `outcome_confidence` of the flows that have one; null if none."
    )
    escalations = serializers.IntegerField(
        help_text="Flows closed with `outcome_type` `escalated` or holding a step of kind `escalation`."
    )
    input_tokens = serializers.IntegerField(
        allow_null=True, help_text="The flows' input tokens; null if none reported."
    )
    output_tokens = serializers.IntegerField(
        allow_null=True, help_text="The flows' output tokens; null if none reported."
    )
    cost_usd = serializers.FloatField(
        allow_null=True,
        help_text="US dollars, at each model call's price on its day; null when no call has a known price.",
    )


class SessionDecisionSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    trace_id = serializers.CharField()
    trigger_type = serializers.CharField()
    agent = serializers.CharField(allow_blank=True)
    flow_state = serializers.ChoiceField(choices=ReasoningFlow.State.choices)
    outcome_type = serializers.CharField(allow_blank=True)
    outcome = serializers.CharField(allow_blank=True, help_text="Blank until recorded; passed the summary guard.")
    outcome_correct = serializers.BooleanField(allow_null=True)
    outcome_confidence = serializers.FloatField(allow_null=True)
    step_count = serializers.IntegerField()
    patient_safe_summary = serializers.BooleanField(allow_null=True, help_text="The guard's result at close.")
    step_kinds = serializers.ListField(child=serializers.CharField(), help_text="In the order the steps began.")
    created_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)
    outcome_recorded_at = serializers.DateTimeField(allow_null=True)
    input_tokens = serializers.IntegerField(allow_null=True, help_text="Null when no step reported it.")
    output_tokens = serializers.IntegerField(allow_null=True, help_text="Null when no step reported it.")
    cost_usd = serializers.FloatField(allow_null=True, help_text="US dollars; null when no call has a known price.")


class SessionReplaySerializer(serializers.Serializer[Any]):
    session_id = serializers.CharField()
    decisions = SessionDecisionSerializer(many=True, help_text="Oldest first (created_at, then id).")


FLOW_ID = OpenApiParameter("flow_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The flow's id.")
SESSION_ID = OpenApiParameter(
    "session_id",
    {"type": "string", "minLength": 1, "maxLength": 100},
    OpenApiParameter.PATH,
    description="The session id the flows were opened with (at most 100 characters; 400 beyond).",
)
NEXT_PAGE_HEADERS = api_views.NEXT_PAGE_HEADERS
CURSOR = api_views.CURSOR_PARAMETER
NO_SESSION = OpenApiResponse(OpenApiTypes.OBJECT, description="No flow has this session id.")
EXAMPLE_FLOW_ID = "7d0c8d8e-3f53-4a35-9f3e-0d5f3c6b9a11"


# --- Recording outcomes --------------------------------------------------------------------------


class FlowOutcomeView(ApiView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="flows_outcome",
        summary="Record a closed flow's outcome, once",
        description="Needs `reasoning.write`. For a completed or aborted flow: what happened after the decision "
        "(`outcome`) and whether the decision was right (`correct`: true, false or null for not known). Both "
        "keys are required; `correct` may be null. Written once: a second call is a 409, also when the first "
        "said null, and a database trigger refuses any later change. 409 while the flow is active; 400 naming "
        "`outcome` when the summary guard refuses the text (the rule is named, the text never echoed). Audits "
        "`reasoning.flow.outcome_recorded` with `correct` and the flow's state (never the text). 200 with the "
        "flow, which carries `outcome`, `outcome_correct` and `outcome_recorded_at` from then on.",
        parameters=[FLOW_ID],
        request=OutcomeRecordSerializer,
        responses={
            200: FlowSerializer,
            404: OpenApiResponse(OpenApiTypes.OBJECT, description="No flow with this id."),
            409: OpenApiResponse(
                OpenApiTypes.OBJECT, description="The flow is still active, or its outcome is already recorded."
            ),
            **ERRORS,
        },
        examples=[
            OpenApiExample("Judged correct", request_only=True, value={"outcome": "follow_up_booked", "correct": True}),
            OpenApiExample(
                "Not known yet", request_only=True, value={"outcome": "Patient did not reply", "correct": None}
            ),
            OpenApiExample(
                "Refused by the guard",
                response_only=True,
                status_codes=["400"],
                value={"outcome": ["Refused by the summary guard (rule: email): describe what happened …"]},
            ),
        ],
    )
    def post(self, request: Request, flow_id: str) -> Response:
        pk = parse_uuid(flow_id, "flow_id")
        data = validated(OutcomeRecordSerializer, request.data)
        flow = services.record_outcome(
            pk, data["outcome"], data["correct"], actor=actor_for(request), opener_only=changes_only_own_flows(request)
        )
        return Response(flow_representation(flow))


def _check_envelope(data: Any) -> list[Any]:
    if not isinstance(data, dict):
        raise ValidationError({"detail": 'Expected a JSON object: {"outcomes": [...]}.'})
    unknown = sorted(set(data) - {"outcomes"})
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in unknown})
    items = data.get("outcomes")
    if not isinstance(items, list):
        raise ValidationError({"outcomes": ["Required: a list of outcomes."]})
    if not 1 <= len(items) <= MAX_OUTCOMES:
        raise ValidationError({"outcomes": [f"Send 1 to {MAX_OUTCOMES} outcomes per request (got {len(items)})."]})
    return items


def _echoed_id(raw: Any) -> uuid.UUID | None:
    try:
        value = raw.get("flow_id") if isinstance(raw, dict) else None
        return uuid.UUID(value) if isinstance(value, str) else None
    except ValueError:
        return None


class OutcomeBatchView(ApiView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="outcomes_record_batch",
        summary="Record the outcomes of many closed flows",
        description=f"Needs `reasoning.write`. Up to {MAX_OUTCOMES} items `{{flow_id, outcome, correct}}`, each "
        "with the rules of `POST /api/reasoning/flows/{flow_id}/outcome`, each on its own: the answer lists every "
        "item as `recorded` or `rejected` with a `reason` (`invalid`, `not_found`, `flow_active`, "
        "`already_recorded`, `duplicate`, `blank`, `unsafe_outcome`) and its errors named from the body's root "
        "(`outcomes[3].correct`). 200 when nothing was rejected, 207 when something was. One transaction, a "
        "fixed number of statements; one `reasoning.flow.outcome_recorded` per recorded flow. A body that is not "
        '`{"outcomes": [...]}` is a plain 400.',
        request=OutcomeBatchSerializer,
        responses={
            200: OutcomeBatchResultSerializer,
            207: OpenApiResponse(OutcomeBatchResultSerializer, description="Some items were rejected (see `reason`)."),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "Two outcomes",
                request_only=True,
                value={
                    "outcomes": [
                        {"flow_id": EXAMPLE_FLOW_ID, "outcome": "follow_up_booked", "correct": True},
                        {"flow_id": "0b8f7a36-9d1e-4c47-8a51-2f0d0f1c6e22", "outcome": "no_reply", "correct": None},
                    ]
                },
            ),
            OpenApiExample(
                "One recorded, one already recorded",
                response_only=True,
                status_codes=["207"],
                value={
                    "outcomes": [
                        {"index": 0, "flow_id": EXAMPLE_FLOW_ID, "status": "recorded", "reason": "", "errors": {}},
                        {
                            "index": 1,
                            "flow_id": "0b8f7a36-9d1e-4c47-8a51-2f0d0f1c6e22",
                            "status": "rejected",
                            "reason": "already_recorded",
                            "errors": {"outcomes[1].flow_id": ["The outcome of this flow is already recorded."]},
                        },
                    ],
                    "recorded": 1,
                    "rejected": 1,
                },
            ),
        ],
    )
    def post(self, request: Request) -> Response:
        raw_items = _check_envelope(request.data)
        answers: list[dict[str, Any] | None] = [None] * len(raw_items)
        items: list[services.Item] = []
        positions: list[int] = []
        for index, raw in enumerate(raw_items):
            try:
                fields = validated(OutcomeBatchItemSerializer, raw)
            except ValidationError as exc:
                answers[index] = _answer(
                    index, _echoed_id(raw), "invalid", flat_errors(exc.detail, f"outcomes[{index}]")
                )
                continue
            items.append(services.Item(fields["flow_id"], fields["outcome"], fields["correct"]))
            positions.append(index)
        results = (
            services.record_outcomes(items, actor=actor_for(request), opener_only=changes_only_own_flows(request))
            if items
            else []
        )
        for index, result in zip(positions, results, strict=True):
            error = result.error()
            errors = {} if error is None else {f"outcomes[{index}].{error.field or 'flow_id'}": [error.detail]}
            answers[index] = _answer(index, result.flow_id, result.reason, errors)
        rejected = sum(1 for answer in answers if answer is not None and answer["status"] == "rejected")
        return Response(
            {"outcomes": answers, "recorded": len(answers) - rejected, "rejected": rejected},
            status=status.HTTP_207_MULTI_STATUS if rejected else status.HTTP_200_OK,
        )


def _answer(index: int, flow_id: uuid.UUID | None, reason: str, errors: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "index": index,
        "flow_id": flow_id,
        "status": "rejected" if reason else "recorded",
        "reason": reason,
        "errors": errors,
    }


# --- Sessions ------------------------------------------------------------------------------------

MAX_SESSION_LIST = 200
SUMMARY_EXAMPLE = {
    "session_id": "s-2026-03-02-triage",
    "agent": "triage",
    "agents": ["triage", "critic"],
    "total_decisions": 14,
    "with_outcome": 8,
    "correct": 7,
    "incorrect": 1,
    "accuracy": 0.875,
    "decision_types": {"escalation_decision": 3, "position_sizing": 3, "signal_evaluation": 8},
    "first_at": "2026-03-02T09:00:00Z",
    "last_at": "2026-03-02T11:42:10Z",
    "mean_confidence": 0.81,
    "escalations": 2,
    "input_tokens": 48210,
    "output_tokens": 6120,
    "cost_usd": 0.1817,
}


class AdminSessionListView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {
        "get": [
            OpenApiParameter(
                "agent",
                label_schema(empty_allowed=True),
                description="Only sessions in which this agent (a label) made at least one decision; empty: "
                "every session.",
                examples=[OpenApiExample("Triage", value="triage")],
            ),
            OpenApiParameter(
                "period",
                str,
                enum=["", *SESSION_PERIODS],
                description="Only sessions with a decision in the last hour, day, week or 30 days.",
            ),
            OpenApiParameter(
                "created_after",
                OpenApiTypes.DATETIME,
                description="Only sessions with a decision opened at or after this instant (ISO 8601 with an offset).",
            ),
            OpenApiParameter(
                "created_before",
                OpenApiTypes.DATETIME,
                description="Only sessions with a decision opened before this instant (ISO 8601 with an offset); "
                "the list is then ordered by each session's last decision before it.",
            ),
            limit_parameter(default=50, maximum=MAX_SESSION_LIST),
            CURSOR,
        ]
    }

    @extend_schema(
        operation_id="admin_sessions_list",
        summary="List sessions with their summaries (newest first)",
        description="Needs `reasoning.admin`. Not audited (counts only). A session is the flows sharing a "
        "non-empty `session_id`; each comes with its summary (as `GET /admin/v1/reasoning/sessions/{session_id}`), "
        "newest `last_at` first (ties by session id, descending). `agent` (a label; 400 otherwise) keeps the "
        "sessions in which that agent made a decision; the summary still covers the whole session. When more "
        'sessions match than `limit`, the response carries `X-Next-Cursor` (and `Link: rel="next"`): send it '
        "back as `cursor` with the same filters. One aggregate query per page.",
        parameters=NEXT_PAGE_HEADERS,
        responses={200: SessionSummarySerializer(many=True), **ERRORS},
        examples=[OpenApiExample("One session", response_only=True, value=[SUMMARY_EXAMPLE])],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        search = SessionPage.parse(params)
        limit = parse_limit(params.get("limit"), default=50, maximum=MAX_SESSION_LIST)
        page, next_cursor = search.page(limit)
        return with_next_page(request, Response([summary.as_dict() for summary in page]), next_cursor)


class AdminSessionDetailView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="admin_sessions_read",
        summary="A session's summary",
        description="Needs `reasoning.admin`. Not audited (counts only). Decisions, outcomes recorded, correct and "
        "incorrect ones, `accuracy` = correct / (correct + incorrect) (null when none was judged: an outcome "
        "recorded with `correct: null` lowers nothing), decision types (trigger_type → flows), first and last "
        "flow, mean outcome confidence, escalations. 404 when no flow has this session id; 400 for an id longer "
        "than 100 characters.",
        parameters=[SESSION_ID],
        responses={200: SessionSummarySerializer, 404: NO_SESSION, **ERRORS},
        examples=[OpenApiExample("A triage session", response_only=True, value=SUMMARY_EXAMPLE)],
    )
    def get(self, request: Request, session_id: str) -> Response:
        session_id = check_session_id(session_id)
        summary = session_summaries([session_id]).get(session_id)
        if summary is None:
            raise NotFound("no session with this id")
        return Response(summary.as_dict())


MAX_REPLAY = 1000


class AdminSessionReplayView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {"get": [limit_parameter(default=200, maximum=MAX_REPLAY), CURSOR]}

    @extend_schema(
        operation_id="admin_sessions_replay",
        summary="A session's decisions as a timeline",
        description="Needs `reasoning.admin`. Audits `admin.reasoning.session.replay_read` (the number of flows "
        "read). The session's flows oldest first, each with its trigger type, agent, state, outcome type, "
        "recorded outcome and correctness, outcome confidence, the guard's result, its step kinds in the order "
        "the steps began and its times. No step text, rationale or raw reasoning: read a flow for those "
        "(`GET /admin/v1/reasoning/flows/{flow_id}`). Pages as the flow list does (`X-Next-Cursor`). 404 when no "
        "flow has this session id; 400 for an id longer than 100 characters, or naming `cursor` for a cursor this "
        "route did not issue.",
        parameters=[SESSION_ID, *NEXT_PAGE_HEADERS],
        responses={200: SessionReplaySerializer, 404: NO_SESSION, **ERRORS},
        examples=[
            OpenApiExample(
                "Two decisions",
                response_only=True,
                value={
                    "session_id": "s-2026-03-02-triage",
                    "decisions": [
                        {
                            "id": EXAMPLE_FLOW_ID,
                            "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                            "trigger_type": "escalation_decision",
                            "agent": "triage",
                            "flow_state": "completed",
                            "outcome_type": "escalated",
                            "outcome": "escalated_correctly",
                            "outcome_correct": True,
                            "outcome_confidence": 0.8,
                            "step_count": 2,
                            "patient_safe_summary": True,
                            "step_kinds": ["retrieval", "decision"],
                            "created_at": "2026-03-02T09:00:00Z",
                            "closed_at": "2026-03-02T09:00:04Z",
                            "outcome_recorded_at": "2026-03-02T15:30:00Z",
                            "input_tokens": 1812,
                            "output_tokens": 240,
                            "cost_usd": 0.00693,
                        }
                    ],
                },
            )
        ],
    )
    def get(self, request: Request, session_id: str) -> Response:
        session_id = check_session_id(session_id)
        params = request.query_params
        limit = parse_limit(params.get("limit"), default=200, maximum=MAX_REPLAY)
        decisions, next_cursor = services.read_session_replay(
            session_id, actor=actor_for(request), limit=limit, cursor=params.get("cursor", "").strip()
        )
        return with_next_page(request, Response({"session_id": session_id, "decisions": decisions}), next_cursor)
