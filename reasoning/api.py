"""Thin DRF views: validate, call one service, shape the response."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from core.actors import actor_for
from core.api_views import (
    CURSOR_PARAMETER,
    ERRORS,
    NEXT_PAGE_HEADERS,
    ApiView,
    limit_parameter,
    parse_flag,
    parse_limit,
    parse_uuid,
    with_next_page,
)
from core.labels import LABEL_PATTERN
from core.serializers import validated
from reasoning import services
from reasoning.access import CanReadNarrative, NarrativeReadThrottle, patient_of
from reasoning.auth import BearerTokenAuthentication, CanWrite, IsAdmin, TokenPrincipal, changes_only_own_flows
from reasoning.flow_search import GUARD_PATTERN, MAX_TEXT, PERIODS, SORTS, FlowSearch
from reasoning.models import ApiToken, ReasoningFlow
from reasoning.narrative import read_narrative
from reasoning.serializers import (
    MAX_BATCH_STEPS,
    AdminFlowSerializer,
    FlowCloseSerializer,
    FlowCreateSerializer,
    FlowSerializer,
    NarrativePendingSerializer,
    NarrativeSerializer,
    ReasoningStatsSerializer,
    StepBatchResponseSerializer,
    StepBatchSerializer,
    StepCreateSerializer,
    StepSerializer,
    admin_flow_representation,
    flow_representation,
    step_representation,
)
from reasoning.stats import reasoning_stats

FLOW_NOT_FOUND = OpenApiResponse(OpenApiTypes.OBJECT, description="No flow with this id.")
FLOW_CLOSED = OpenApiResponse(OpenApiTypes.OBJECT, description="The flow is closed: it accepts no more changes.")
ID_CONFLICT = OpenApiResponse(
    OpenApiTypes.OBJECT, description="This client-chosen id was already used with a different body."
)
FLOW_ID = OpenApiParameter("flow_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The flow's id.")


# What the three hot write routes do once the caller is known: the DRF views below and the
# handler below Django (``reasoning.recording.hot_writes``) both call these. Each returns the answer's
# body and status; errors are raised (``ValidationError``, ``ServiceError``).
Answer = tuple[dict[str, Any], int]


def open_flow(data: Any, *, actor: str, opener_only: bool) -> Answer:
    """``POST /api/reasoning/flows``."""
    fields = validated(FlowCreateSerializer, data)
    flow, created = services.start_flow(fields, actor=actor, opener_only=opener_only)
    return flow_representation(flow), status.HTTP_201_CREATED if created else status.HTTP_200_OK


def add_step(flow_id: str, data: Any, *, actor: str, opener_only: bool) -> Answer:
    """``POST /api/reasoning/flows/<flow_id>/steps``."""
    pk = parse_uuid(flow_id, "flow_id")
    fields = validated(StepCreateSerializer, data)
    step, created = services.add_step(pk, fields, actor=actor, opener_only=opener_only)
    return step_representation(step), status.HTTP_201_CREATED if created else status.HTTP_200_OK


def close_flow(flow_id: str, data: Any, *, actor: str, opener_only: bool) -> Answer:
    """``PATCH /api/reasoning/flows/<flow_id>``."""
    pk = parse_uuid(flow_id, "flow_id")
    fields = validated(FlowCloseSerializer, data)
    flow = services.close_flow(
        pk,
        state=fields["flow_state"],
        actor=actor,
        outcome_type=fields.get("outcome_type", ""),
        outcome_summary=fields.get("outcome_summary", ""),
        abort_reason=fields.get("abort_reason", ""),
        outcome_metrics=fields.get("outcome_metrics") or {},
        opener_only=opener_only,
    )
    return flow_representation(flow), status.HTTP_200_OK


class FlowCollectionView(ApiView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="flows_create",
        summary="Open a reasoning flow",
        description="Needs `reasoning.write`. Audits `reasoning.flow.started`. "
        "Re-sending the same client-chosen `id` with the same body returns the stored flow (200). 400 naming "
        "`patient_id` when no patient has that id.",
        request=FlowCreateSerializer,
        responses={201: FlowSerializer, 200: FlowSerializer, 409: ID_CONFLICT, **ERRORS},
        examples=[
            OpenApiExample(
                "Researcher turn",
                request_only=True,
                value={
                    "trigger_type": "user_question",
                    "trigger_ref": "benchmark/run-7/case-12",
                    "trigger_summary": "Patient asked whether a medication change is needed",
                    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "agent": "researcher",
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        body, code = open_flow(request.data, actor=actor_for(request), opener_only=changes_only_own_flows(request))
        return Response(body, status=code)


class FlowDetailView(ApiView):
    """GET: the patient narrative. PATCH: close the flow (agents)."""

    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes = [CanWrite]

    def get_permissions(self) -> Sequence[Any]:
        if self.request.method == "GET":
            return [CanReadNarrative()]
        return super().get_permissions()

    def get_throttles(self) -> list[BaseThrottle]:
        if self.request.method == "GET":
            return [NarrativeReadThrottle()]
        return super().get_throttles()  # the write limit

    @extend_schema(
        operation_id="flows_narrative",
        summary="Read the patient narrative of a decision",
        description="For the patient the decision is about: a `reasoning.read` token bound to that patient, or "
        "the patient's logged-in session. 200: trigger summary, step cards (agent label, summary, time), outcome "
        "summary, `dimensions` (the Decision Dimensions radar with the patient's labels: the snapshot taken at "
        "close, `source: snapshot`, or computed for older flows, `source: computed`), disclaimer. An aborted flow "
        "reached no decision: `reached_decision` false, `stopped` says so in plain words (with a `reason` code), "
        "and `outcome_summary` and `dimensions` are null. 202 while the "
        "flow is still running (with the step count so far). 403 (with a "
        "`reason`: `not_patient`, `no_consent`, `unsafe_summary`) when the caller is not a patient, has not "
        "opted in, or a summary failed the guard. 404 when the decision is unknown *or about someone else* "
        "(existence is not revealed). 429 past 30 reads per 5 minutes (`NARRATIVE_RATE_LIMIT`) per caller, or per "
        "patient for all their tokens and sessions together. "
        "Audits `patient.reasoning.flow.read`.",
        parameters=[FLOW_ID],
        responses={
            200: OpenApiResponse(NarrativeSerializer, description="The narrative."),
            202: OpenApiResponse(NarrativePendingSerializer, description="Still working on this."),
            403: OpenApiResponse(
                OpenApiTypes.OBJECT, description="`reason`: `not_patient`, `no_consent` or `unsafe_summary`."
            ),
            400: OpenApiResponse(OpenApiTypes.OBJECT, description="`flow_id` is not a UUID."),
            404: OpenApiResponse(OpenApiTypes.OBJECT, description="No such decision among the caller's own."),
            429: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="More than 30 reads in 5 minutes by this caller or for this patient; see Retry-After.",
            ),
            401: ERRORS[401],
        },
        examples=[
            OpenApiExample(
                "Consent is off",
                response_only=True,
                status_codes=["403"],
                value={
                    "detail": "You have not turned on reading the reasoning behind decisions (see your profile).",
                    "reason": "no_consent",
                },
            ),
            OpenApiExample(
                "Still working",
                response_only=True,
                status_codes=["202"],
                value={
                    "decision_id": "9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f",
                    "flow_state": "active",
                    "step_count": 3,
                    "detail": "Still working on this.",
                },
            ),
        ],
    )
    def get(self, request: Request, flow_id: str) -> Response:
        pk = parse_uuid(flow_id, "flow_id")
        narrative = read_narrative(pk, patient=patient_of(request), actor=actor_for(request))
        return Response(narrative.body, status=narrative.status)

    @extend_schema(
        operation_id="flows_close",
        summary="Complete or abort a flow",
        description="Needs `reasoning.write`. Audits `reasoning.flow.completed` or `reasoning.flow.aborted`; "
        "sets `outcome_confidence` to the lowest step confidence and stores the Decision Dimensions radar as "
        "`dimensions_snapshot`. `outcome_metrics` (composite_k, evidence_hits, verdict, claim_id, "
        "rejection_reason) feed the research-backlog producers. `completed` needs an `outcome_type` and takes no "
        "`abort_reason` (400 naming the field otherwise). 409 when the flow is already closed.",
        parameters=[FLOW_ID],
        request=FlowCloseSerializer,
        responses={200: FlowSerializer, 404: FLOW_NOT_FOUND, 409: FLOW_CLOSED, **ERRORS},
        examples=[
            OpenApiExample(
                "Complete",
                request_only=True,
                value={
                    "flow_state": "completed",
                    "outcome_type": "recommendation_delivered",
                    "outcome_summary": "Recommended a follow-up visit with the care team",
                },
            ),
            OpenApiExample("Abort", request_only=True, value={"flow_state": "aborted", "abort_reason": "tool_error"}),
        ],
    )
    def patch(self, request: Request, flow_id: str) -> Response:
        body, code = close_flow(
            flow_id, request.data, actor=actor_for(request), opener_only=changes_only_own_flows(request)
        )
        return Response(body, status=code)


class StepCollectionView(ApiView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="steps_create",
        summary="Add a step to an active flow",
        description="Needs `reasoning.write`. Audits `reasoning.step.created`. 404 for an unknown flow, "
        "409 when the flow is closed. Values of keys listed in `pii_fields` are encrypted at rest and never "
        "stored in the `inputs`/`outputs` JSON.",
        parameters=[FLOW_ID],
        request=StepCreateSerializer,
        responses={
            201: StepSerializer,
            200: StepSerializer,
            404: FLOW_NOT_FOUND,
            409: OpenApiResponse(
                OpenApiTypes.OBJECT, description="The flow is closed, or the step id was used with another body."
            ),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "Retrieval step",
                request_only=True,
                value={
                    "kind": "retrieval",
                    "agent": "researcher",
                    "summary_text": "Retrieved recent lab results and current guidelines",
                    "inputs": {"query_kind": "labs", "patient_name": "…"},
                    "pii_fields": ["patient_name"],
                    "confidence": 0.93,
                    "latency_ms": 120,
                    "llm_call_log_ref": "llm-call-7781",
                },
            )
        ],
    )
    def post(self, request: Request, flow_id: str) -> Response:
        body, code = add_step(
            flow_id, request.data, actor=actor_for(request), opener_only=changes_only_own_flows(request)
        )
        return Response(body, status=code)


def name_the_steps(errors: Mapping[str, Any]) -> dict[str, Any]:
    """Batch validation errors keyed the way the service names a bad parent: one flat
    ``{"steps[2].confidence": [...]}`` shape for every error of the batch route, instead of
    DRF's ``{"steps": {2: {"confidence": [...]}}}``. A problem with the list itself (empty,
    too long, not a list) stays under ``steps``; an item that is not an object, ``steps[i]``."""
    named: dict[str, Any] = {}
    for field, detail in errors.items():
        if field != "steps" or not isinstance(detail, Mapping):
            named[field] = detail
            continue
        for index, item in detail.items():
            if index == api_settings.NON_FIELD_ERRORS_KEY:
                named["steps"] = item
            elif isinstance(item, Mapping):
                for name, messages in item.items():
                    suffix = "" if name == api_settings.NON_FIELD_ERRORS_KEY else f".{name}"
                    named[f"steps[{index}]{suffix}"] = messages
            else:
                named[f"steps[{index}]"] = item
    return named


class StepBatchView(ApiView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="steps_create_batch",
        summary="Add several steps to an active flow at once",
        description=f"Needs `reasoning.write`. Up to {MAX_BATCH_STEPS} steps, stored in order, all or none; "
        "each is audited as `reasoning.step.created`. A step may name an earlier step of the same batch as a "
        "parent (give it a client-chosen `id`). Every 400 names the step and field in one flat shape: "
        '`{"steps[2].confidence": [...]}`, `{"steps[2].parent_step_id": [...]}`. For agents '
        "that buffer steps (the SDK spool) or report a whole turn at once: one request instead of many.",
        parameters=[FLOW_ID],
        request=StepBatchSerializer,
        responses={
            201: StepBatchResponseSerializer,
            200: StepBatchResponseSerializer,
            404: FLOW_NOT_FOUND,
            409: OpenApiResponse(
                OpenApiTypes.OBJECT, description="The flow is closed, or some step ids exist with other bodies."
            ),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "A retrieval, then a verdict that cites it",
                request_only=True,
                value={
                    "steps": [
                        {
                            "id": "1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b",
                            "kind": "retrieval",
                            "agent": "researcher",
                            "summary_text": "Retrieved the current guideline",
                            "confidence": 0.9,
                        },
                        {
                            "kind": "verdict",
                            "agent": "critic",
                            "summary_text": "Judged the guideline applicable",
                            "parent_step_id": "1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b",
                            "confidence": 0.8,
                        },
                    ]
                },
            )
        ],
    )
    def post(self, request: Request, flow_id: str) -> Response:
        pk = parse_uuid(flow_id, "flow_id")
        try:
            body = validated(StepBatchSerializer, request.data)
        except ValidationError as exc:
            raise ValidationError(name_the_steps(exc.detail)) from None  # type: ignore[arg-type]
        steps, created = services.add_steps(
            pk, body["steps"], actor=actor_for(request), opener_only=changes_only_own_flows(request)
        )
        return Response(
            {"steps": [step_representation(step) for step in steps]},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


MAX_FLOW_LIST = 200
# The free-text filters as FlowSearch reads them: at most MAX_TEXT characters, no NUL.
_TEXT = {"type": "string", "maxLength": MAX_TEXT, "pattern": r"^[^\u0000]*$"}
# A blank filter is no filter (the operator page's form sends every field).
_LABEL = {"type": "string", "maxLength": MAX_TEXT, "pattern": f"^(?:{LABEL_PATTERN.strip('^$')})?$"}
FLOW_LIST_PARAMETERS = [
    OpenApiParameter("trace_id", _TEXT, description="Only flows of this correlation id (an agent turn)."),
    OpenApiParameter("flow_state", str, enum=ReasoningFlow.State.values),
    OpenApiParameter(
        "agent",
        _TEXT,
        description="Only flows of this agent label.",
        examples=[OpenApiExample("Critic", value="critic")],
    ),
    OpenApiParameter("session_id", _TEXT, description="Only flows of this session."),
    OpenApiParameter(
        "trigger_type",
        _LABEL,
        description="Only flows with this trigger type.",
        examples=[OpenApiExample("User question", value="user_question")],
    ),
    OpenApiParameter(
        "created_after",
        OpenApiTypes.DATETIME,
        description="Only flows created at or after this time (ISO 8601 with an offset; write `Z`, or `+` as %2B).",
        examples=[OpenApiExample("Start of March", value="2026-03-01T00:00:00Z")],
    ),
    OpenApiParameter(
        "created_before",
        OpenApiTypes.DATETIME,
        description="Only flows created before this time (exclusive, so consecutive windows do not overlap).",
        examples=[OpenApiExample("Start of April", value="2026-04-01T00:00:00Z")],
    ),
    OpenApiParameter(
        "q",
        _TEXT,
        description="Free text: a prefix of the trace id or the trigger ref, or a flow id (whole, or its first "
        "hex digits as the flow list shows them).",
        examples=[OpenApiExample("A benchmark run", value="benchmark/run-7/")],
    ),
    OpenApiParameter("outcome_type", _LABEL, description="Only flows closed with this outcome type."),
    OpenApiParameter(
        "guard",
        {"type": "string", "pattern": GUARD_PATTERN},
        description="The summary guard's result: `safe` (shown to patients), `blocked`, or `blocked:<rule>` "
        "(e.g. `blocked:email`).",
    ),
    OpenApiParameter(
        "has_patient",
        str,
        enum=["", "true", "false", "1", "0", "yes", "no"],
        description="Only flows with (`true`) or without (`false`) a patient.",
    ),
    OpenApiParameter(
        "failed",
        str,
        enum=["", "true", "false", "1", "0", "yes", "no"],
        description="Only flows with (`true`) or without (`false`) a step whose work failed (`outcome` `error`: "
        "an OTLP span with status ERROR or an exception).",
    ),
    OpenApiParameter(
        "period", str, enum=["", *PERIODS], description="Only flows created in the last hour, day or week."
    ),
    OpenApiParameter(
        "sort",
        str,
        enum=["", *SORTS],
        description="`newest` (default), `duration` (longest first), `steps` (most first), `confidence` "
        "(lowest outcome confidence first).",
    ),
    limit_parameter(default=50, maximum=MAX_FLOW_LIST),
    CURSOR_PARAMETER,
]


class AdminFlowListView(ApiView):
    permission_classes = [IsAdmin]
    max_limit = MAX_FLOW_LIST
    query_parameters = {"get": FLOW_LIST_PARAMETERS}

    @extend_schema(
        operation_id="admin_flows_list",
        summary="List flows (newest first)",
        description="Needs `reasoning.admin`. Not audited. Filter by `trace_id` to reconstruct an agent turn, "
        "or by `q`, `agent`, `session_id`, `trigger_type`, `outcome_type`, `flow_state`, `guard`, `has_patient`, "
        "`failed` and a `period` or `created_after`/`created_before` window; filters combine (AND). Unknown query "
        "parameters are a 400. Ordered by `sort` (default: newest first), ties by `created_at` then `id`; the "
        "operators' flow list page runs the same search. When more flows match than `limit`, the response "
        "carries `X-Next-Cursor` (and a "
        '`Link: <...>; rel="next"` header): send it back as `cursor` with the same filters for the next page.',
        parameters=NEXT_PAGE_HEADERS,
        responses={200: FlowSerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "A critic's flows in March",
                response_only=True,
                value=[{"id": "0b5c…", "trigger_type": "user_question", "agent": "critic", "flow_state": "completed"}],
            )
        ],
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        search = FlowSearch.parse(params)
        limit = parse_limit(params.get("limit"), default=50, maximum=self.max_limit)
        page, next_cursor = search.page(limit)
        return with_next_page(request, Response([flow_representation(flow) for flow in page]), next_cursor)


class AdminFlowDetailView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {
        "get": [OpenApiParameter("include_reasoning", bool, description="Include raw chain-of-thought.")]
    }

    @extend_schema(
        operation_id="admin_flows_read",
        summary="Read a flow with its whole step DAG",
        description="Needs `reasoning.admin`. Audits `admin.reasoning.flow.read`. Steps come in write order with "
        "their parents and back-refs; PII values stay encrypted (only the `pii_fields` names are shown). Raw "
        "chain-of-thought (`reasoning_content`) is included only with `include_reasoning=true` and the "
        "`reasoning.cot.read` scope (403 otherwise); that read also audits "
        "`admin.reasoning.flow.reasoning_content_read`.",
        parameters=[FLOW_ID],
        responses={200: AdminFlowSerializer, 404: FLOW_NOT_FOUND, **ERRORS},
        examples=[
            OpenApiExample(
                "Not found",
                response_only=True,
                status_codes=["404"],
                value={"detail": "flow 9c1d2e3f-4a5b-4c6d-8e7f-0a1b2c3d4e5f does not exist"},
            )
        ],
    )
    def get(self, request: Request, flow_id: str) -> Response:
        pk = parse_uuid(flow_id, "flow_id")
        include_reasoning = include_reasoning_of(request)
        flow, steps = services.read_flow_for_admin(pk, actor=actor_for(request), include_reasoning=include_reasoning)
        return Response(admin_flow_representation(flow, steps, include_reasoning=include_reasoning))


class AdminStatsView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="admin_reasoning_stats",
        summary="Flow, step and raw-reasoning counts",
        description="Needs `reasoning.admin`. Raw chain-of-thought appears only as character counts "
        "(sum, p50, p95) and how many steps hold or held it. Not audited (counts only).",
        responses={200: ReasoningStatsSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "Counts",
                value={
                    "flows": {"active": 3, "completed": 120, "aborted": 7},
                    "steps": 842,
                    "reasoning_content": {
                        "steps_with_reasoning": 95,
                        "purged": 12,
                        "chars_sum": 181450,
                        "chars_p50": 1620,
                        "chars_p95": 5210,
                    },
                },
                response_only=True,
            )
        ],
    )
    def get(self, request: Request) -> Response:
        return Response(reasoning_stats())


def include_reasoning_of(request: Request) -> bool:
    """``?include_reasoning=true``, allowed only to a token with ``reasoning.cot.read`` (403 otherwise)."""
    include_reasoning = parse_flag(request.query_params.get("include_reasoning"), "include_reasoning")
    if include_reasoning:
        user = request.user
        if not (isinstance(user, TokenPrincipal) and user.has_scope(ApiToken.Scope.COT_READ)):
            raise PermissionDenied("include_reasoning=true needs the 'reasoning.cot.read' scope.")
    return include_reasoning
