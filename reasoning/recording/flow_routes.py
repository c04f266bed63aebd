"""The flow routes, one call per change: open a flow, add a step or a batch, close it (and the
patient's narrative on the flow's GET). Thin DRF views: validate, call one service, shape the
response.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle

from core.actors import actor_for
from core.api_views import (
    ERRORS,
    ApiView,
    parse_uuid,
)
from core.compiled_serializers import one_time_zone
from core.serializers import validated
from reasoning.access import CanReadNarrative, NarrativeReadThrottle, patient_of
from reasoning.auth import BearerTokenAuthentication, CanWrite, changes_only_own_flows
from reasoning.flows.parameters import FLOW_ID, FLOW_NOT_FOUND
from reasoning.flows.serializers import (
    FlowSerializer,
    NarrativePendingSerializer,
    NarrativeSerializer,
    StepSerializer,
    flow_representation,
    step_representation,
)
from reasoning.flows.services import read_narrative
from reasoning.recording import services
from reasoning.recording.serializers import (
    MAX_BATCH_STEPS,
    FlowCloseSerializer,
    FlowCreateSerializer,
    StepBatchResponseSerializer,
    StepBatchSerializer,
    StepCreateSerializer,
)

FLOW_CLOSED = OpenApiResponse(OpenApiTypes.OBJECT, description="The flow is closed: it accepts no more changes.")


ID_CONFLICT = OpenApiResponse(
    OpenApiTypes.OBJECT, description="This client-chosen id was already used with a different body."
)


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
            with one_time_zone():  # the steps' date-times in one time zone, read once
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
