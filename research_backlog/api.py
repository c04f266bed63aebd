"""Operator and dispatcher routes of the self-improvement loop (``reasoning.admin``).

The dispatcher contract is two routes: ``backlog/next`` hands out one pending request
under an exclusive claim, ``backlog/{id}/complete`` records the result.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import actor_for
from core.api_views import ERRORS, ApiView, limit_parameter, parse_limit, parse_uuid
from core.errors import InvalidInput
from core.serializers import (
    StrictSerializer,
)
from reasoning.auth import IsAdmin
from reasoning.models import ReasoningFlow
from research_backlog import services
from research_backlog.serializers import (
    CompleteSerializer,
    DeeperRequestSerializer,
    MarkClaimSerializer,
    PullSerializer,
    ResolveClaimSerializer,
    request_representation,
    review_representation,
)

CONFLICT = OpenApiResponse(OpenApiTypes.OBJECT, description="The row is not in a state that allows this.")
NOT_FOUND = OpenApiResponse(OpenApiTypes.OBJECT, description="No such row.")
MAX_PENDING_LIST = 500


def _validated(serializer_class: type[StrictSerializer], data: Any) -> dict[str, Any]:
    body = serializer_class(data={} if data is None or data == "" else data)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


class DeeperRequestView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="research_deeper_request",
        summary="Add a question to the research backlog",
        description="Needs `reasoning.admin`. Creates a `pending` request (201). Audits "
        "`reasoning.research.deeper_request_created` (labels and the question's length, never its text).",
        request=DeeperRequestSerializer,
        responses={201: OpenApiResponse(OpenApiTypes.OBJECT), **ERRORS},
        examples=[
            OpenApiExample(
                "Deeper research",
                request_only=True,
                value={
                    "trigger_type": "user_question",
                    "trigger_ref": "bp-treatment",
                    "question": "Which guideline covers blood pressure targets for adults over 80?",
                },
            )
        ],
    )
    def post(self, request: Request) -> Response:
        data = _validated(DeeperRequestSerializer, request.data)
        row, _ = services.enqueue(actor=actor_for(request), **data)
        return Response(request_representation(row), status=status.HTTP_201_CREATED)


class BacklogNextView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="research_backlog_next",
        summary="Pull the oldest pending request (exclusive claim)",
        description="Needs `reasoning.admin`. Flips the oldest `pending` row (optionally of one "
        "`trigger_type`) to `dispatched` and returns it as `{request: {...}}`; `{request: null}` when the "
        "queue is empty. Concurrent pullers never receive the same row (`FOR UPDATE SKIP LOCKED`). Audits "
        "`reasoning.research.backlog.dispatched`.",
        request=PullSerializer,
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="`{request: {...} | null}`"), **ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = _validated(PullSerializer, request.data)
        row = services.pull_next(actor=actor_for(request), trigger_type=data.get("trigger_type"))
        return Response({"request": None if row is None else request_representation(row)})


class BacklogCompleteView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="research_backlog_complete",
        summary="Record the result of a dispatched request",
        description="Needs `reasoning.admin`. `{flow_id?}` marks it `completed`; `{error}` marks it "
        "`failed_voluntary`. 404 unknown request; 400 when `flow_id` names no recorded flow; 409 unless the "
        "row is `dispatched` (no double completion, no completion without a pull). Audits "
        "`reasoning.research.backlog.completed` or `.failed_voluntary`.",
        request=CompleteSerializer,
        parameters=[OpenApiParameter("request_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), 404: NOT_FOUND, 409: CONFLICT, **ERRORS},
    )
    def post(self, request: Request, request_id: str) -> Response:
        pk = parse_uuid(request_id, "request_id")
        data = _validated(CompleteSerializer, request.data)
        row = services.complete(pk, actor=actor_for(request), flow_id=data.get("flow_id"), error=data.get("error"))
        return Response(request_representation(row))


class BacklogStatusView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="research_backlog_status",
        summary="Backlog observability and the loop-health verdict",
        description="Needs `reasoning.admin`. `status_distribution`, `oldest_pending_age_seconds`, "
        "`oldest_dispatched_age_seconds`, `retry_distribution`, `recent_failures` (last 24 h: count and the "
        "latest 10) and `loop_health` (`critical` at oldest dispatched >= 25 min or oldest pending >= 1 h; "
        "`warn` at oldest dispatched >= 15 min or >= 5 recent failures; else `healthy`, with the reasons). "
        "Audits `admin.reasoning.research.backlog_read`.",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **ERRORS},
    )
    def get(self, request: Request) -> Response:
        return Response(services.read_backlog_status(actor=actor_for(request)))


class ClaimReviewCollectionView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {"get": [limit_parameter(default=100, maximum=MAX_PENDING_LIST)]}

    @extend_schema(
        operation_id="claims_pending_review_list",
        summary="Claims waiting for a curator, and the last day's resolutions",
        description="Needs `reasoning.admin`. `pending` (oldest first, at most `limit`), `pending_count`, and "
        "`recent_resolutions` (the last 10 resolved or dismissed in the past 24 h). Audits "
        "`admin.reasoning.claims_pending_review.listed`.",
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), **ERRORS},
    )
    def get(self, request: Request) -> Response:
        limit = parse_limit(request.query_params.get("limit"), default=100, maximum=MAX_PENDING_LIST)
        queue = services.read_review_queue(actor=actor_for(request), limit=limit)
        return Response(
            {
                "pending": [review_representation(entry) for entry in queue["pending"]],
                "pending_count": queue["pending_count"],
                "recent_resolutions": [review_representation(entry) for entry in queue["recent_resolutions"]],
            }
        )

    @extend_schema(
        operation_id="claims_pending_review_mark",
        summary="Mark a claim for human review (idempotent on claim_id)",
        description="Needs `reasoning.admin`. 201 with the new entry; 200 with the existing entry when the "
        "claim was already marked (whatever its status). 400 when `flow_id` names no recorded flow. Audits "
        "`reasoning.claims_pending_review.marked` (new entries only).",
        request=MarkClaimSerializer,
        responses={201: OpenApiResponse(OpenApiTypes.OBJECT), 200: OpenApiResponse(OpenApiTypes.OBJECT), **ERRORS},
    )
    def post(self, request: Request) -> Response:
        data = _validated(MarkClaimSerializer, request.data)
        flow_id = data.pop("flow_id", None)
        if flow_id is not None and not ReasoningFlow.objects.filter(pk=flow_id).exists():
            raise InvalidInput("no flow with this id", field="flow_id")
        entry, created = services.mark_claim_for_review(actor=actor_for(request), source_flow_id=flow_id, **data)
        return Response(review_representation(entry), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ClaimReviewDetailView(ApiView):
    permission_classes = [IsAdmin]

    @extend_schema(
        operation_id="claims_pending_review_resolve",
        summary="Resolve or dismiss a pending claim",
        description="Needs `reasoning.admin`. `{status: resolved|dismissed, note?}`. 404 unknown; 409 when the "
        "entry is already resolved or dismissed. Audits `reasoning.claims_pending_review.resolved` (the note's "
        "length, not its text; the note is stored encrypted).",
        request=ResolveClaimSerializer,
        parameters=[OpenApiParameter("review_id", OpenApiTypes.UUID, OpenApiParameter.PATH)],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), 404: NOT_FOUND, 409: CONFLICT, **ERRORS},
    )
    def patch(self, request: Request, review_id: str) -> Response:
        pk = parse_uuid(review_id, "review_id")
        data = _validated(ResolveClaimSerializer, request.data)
        entry = services.resolve_claim_review(pk, status=data["status"], note=data["note"], actor=actor_for(request))
        return Response(review_representation(entry))
