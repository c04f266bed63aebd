"""Thin DRF views: validate, call one service, shape the response."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from config.errors import InvalidInput
from reasoning import services
from reasoning.access import CanReadNarrative, NarrativeReadThrottle, actor_for, patient_of
from reasoning.auth import BearerTokenAuthentication, CanWrite, IsAdmin, TokenPrincipal, actor_of
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
    StepBatchResponseSerializer,
    StepBatchSerializer,
    StepCreateSerializer,
    StepSerializer,
    admin_flow_representation,
    flow_representation,
    step_representation,
)
from reasoning.stats import reasoning_stats

ERROR = OpenApiResponse(OpenApiTypes.OBJECT, description='`{"detail": "..."}` or `{"field": ["message"]}`')
ERRORS = {
    400: OpenApiResponse(OpenApiTypes.OBJECT, description="Invalid body: the message names the field."),
    401: OpenApiResponse(OpenApiTypes.OBJECT, description="Missing, unknown, revoked or expired token."),
    403: OpenApiResponse(OpenApiTypes.OBJECT, description="The token lacks the route's scope."),
}
FLOW_ID = OpenApiParameter("flow_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The flow's id.")


def parse_uuid(value: str, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInput("must be a valid UUID", field=field) from None


class FlowCollectionView(APIView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="flows_create",
        summary="Open a reasoning flow",
        description="Needs `reasoning.write`. Audits `reasoning.flow.started`. "
        "Re-sending the same client-chosen `id` with the same body returns the stored flow (200).",
        request=FlowCreateSerializer,
        responses={201: FlowSerializer, 200: FlowSerializer, 409: ERROR, **ERRORS},
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
        body = FlowCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        flow, created = services.start_flow(body.validated_data, actor=actor_of(request))
        return Response(flow_representation(flow), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class FlowDetailView(APIView):
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
        return []

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
        "(existence is not revealed). 429 past 30 reads per 5 minutes per caller. "
        "Audits `patient.reasoning.flow.read`.",
        parameters=[FLOW_ID],
        responses={
            200: OpenApiResponse(NarrativeSerializer, description="The narrative."),
            202: OpenApiResponse(NarrativePendingSerializer, description="Still working on this."),
            403: ERROR,
            404: ERROR,
            429: ERROR,
            401: ERRORS[401],
        },
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
        "rejection_reason) feed the research-backlog producers. 409 when the flow is already closed.",
        parameters=[FLOW_ID],
        request=FlowCloseSerializer,
        responses={200: FlowSerializer, 404: ERROR, 409: ERROR, **ERRORS},
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
        pk = parse_uuid(flow_id, "flow_id")
        body = FlowCloseSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        flow = services.close_flow(
            pk,
            state=data["flow_state"],
            actor=actor_of(request),
            outcome_type=data.get("outcome_type", ""),
            outcome_summary=data.get("outcome_summary", ""),
            abort_reason=data.get("abort_reason", ""),
            outcome_metrics=data.get("outcome_metrics") or {},
        )
        return Response(flow_representation(flow))


class StepCollectionView(APIView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="steps_create",
        summary="Add a step to an active flow",
        description="Needs `reasoning.write`. Audits `reasoning.step.created`. 404 for an unknown flow, "
        "409 when the flow is closed. Values of keys listed in `pii_fields` are encrypted at rest and never "
        "stored in the `inputs`/`outputs` JSON.",
        parameters=[FLOW_ID],
        request=StepCreateSerializer,
        responses={201: StepSerializer, 200: StepSerializer, 404: ERROR, 409: ERROR, **ERRORS},
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
        pk = parse_uuid(flow_id, "flow_id")
        body = StepCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        step, created = services.add_step(pk, body.validated_data, actor=actor_of(request))
        return Response(step_representation(step), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class StepBatchView(APIView):
    permission_classes = [CanWrite]

    @extend_schema(
        operation_id="steps_create_batch",
        summary="Add several steps to an active flow at once",
        description=f"Needs `reasoning.write`. Up to {MAX_BATCH_STEPS} steps, stored in order, all or none; "
        "each is audited as `reasoning.step.created`. A step may name an earlier step of the same batch as a "
        "parent (give it a client-chosen `id`). Errors name the step: `steps[2].parent_step_id`. For agents "
        "that buffer steps (the SDK spool) or report a whole turn at once: one request instead of many.",
        parameters=[FLOW_ID],
        request=StepBatchSerializer,
        responses={
            201: StepBatchResponseSerializer,
            200: StepBatchResponseSerializer,
            404: ERROR,
            409: ERROR,
            **ERRORS,
        },
    )
    def post(self, request: Request, flow_id: str) -> Response:
        pk = parse_uuid(flow_id, "flow_id")
        body = StepBatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        steps, created = services.add_steps(pk, body.validated_data["steps"], actor=actor_of(request))
        return Response(
            {"steps": [step_representation(step) for step in steps]},
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )


class AdminFlowListView(APIView):
    permission_classes = [IsAdmin]
    max_limit = 200

    @extend_schema(
        operation_id="admin_flows_list",
        summary="List flows (newest first)",
        description="Needs `reasoning.admin`. Not audited. Filter by `trace_id` to reconstruct an agent turn.",
        parameters=[
            OpenApiParameter("trace_id", str, description="Only flows of this correlation id."),
            OpenApiParameter("flow_state", str, enum=ReasoningFlow.State.values),
            OpenApiParameter("limit", int, description="1 to 200, default 50."),
        ],
        responses={200: FlowSerializer(many=True), **ERRORS},
    )
    def get(self, request: Request) -> Response:
        params = request.query_params
        flows = ReasoningFlow.objects.order_by("-created_at")
        if trace_id := params.get("trace_id"):
            if len(trace_id) > 100 or "\x00" in trace_id:
                raise InvalidInput("must be at most 100 characters, without NUL", field="trace_id")
            flows = flows.filter(trace_id=trace_id)
        if state := params.get("flow_state"):
            if state not in ReasoningFlow.State.values:
                raise InvalidInput(f"must be one of {', '.join(ReasoningFlow.State.values)}", field="flow_state")
            flows = flows.filter(flow_state=state)
        limit = parse_limit(params.get("limit"), default=50, maximum=self.max_limit)
        return Response([flow_representation(flow) for flow in flows[:limit]])


def parse_limit(raw: Any, *, default: int, maximum: int) -> int:
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput("must be an integer", field="limit") from None
    if not 1 <= value <= maximum:
        raise InvalidInput(f"must be between 1 and {maximum}", field="limit")
    return value


class AdminFlowDetailView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="admin_flows_read",
        summary="Read a flow with its whole step DAG",
        description="Needs `reasoning.admin`. Audits `admin.reasoning.flow.read`. Steps come in write order with "
        "their parents and back-refs; PII values stay encrypted (only the `pii_fields` names are shown). Raw "
        "chain-of-thought (`reasoning_content`) is included only with `include_reasoning=true` and the "
        "`reasoning.cot.read` scope (403 otherwise); that read also audits "
        "`admin.reasoning.flow.reasoning_content_read`.",
        parameters=[
            FLOW_ID,
            OpenApiParameter("include_reasoning", bool, description="Include raw chain-of-thought."),
        ],
        responses={200: AdminFlowSerializer, 404: ERROR, **ERRORS},
    )
    def get(self, request: Request, flow_id: str) -> Response:
        pk = parse_uuid(flow_id, "flow_id")
        include_reasoning = _flag(request.query_params.get("include_reasoning"), "include_reasoning")
        if include_reasoning:
            user = request.user
            if not (isinstance(user, TokenPrincipal) and user.has_scope(ApiToken.Scope.COT_READ)):
                raise PermissionDenied("include_reasoning=true needs the 'reasoning.cot.read' scope.")
        flow, steps = services.read_flow_for_admin(pk, actor=actor_of(request), include_reasoning=include_reasoning)
        return Response(admin_flow_representation(flow, steps, include_reasoning=include_reasoning))


def _flag(raw: str | None, field: str) -> bool:
    if raw in (None, "", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise InvalidInput("must be true or false", field=field)


class AdminStatsView(APIView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="admin_reasoning_stats",
        summary="Flow, step and raw-reasoning counts",
        description="Needs `reasoning.admin`. Raw chain-of-thought appears only as character counts "
        "(sum, p50, p95) and how many steps hold or held it. Not audited (counts only).",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(reasoning_stats())
