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
from core.scopes import IsAdmin
from core.serializers import (
    StrictSerializer,
)
from reasoning.models import ReasoningFlow
from research_backlog import services
from research_backlog.serializers import (
    BacklogStatusSerializer,
    ClaimReviewSerializer,
    CompleteSerializer,
    DeeperRequestSerializer,
    MarkClaimSerializer,
    PullResponseSerializer,
    PullSerializer,
    ResearchRequestRowSerializer,
    ResolveClaimSerializer,
    ReviewQueueSerializer,
    request_representation,
    review_representation,
)

NOT_DISPATCHED = OpenApiResponse(
    OpenApiTypes.OBJECT, description="The request is not `dispatched` (never pulled, or done)."
)
ALREADY_CLOSED = OpenApiResponse(OpenApiTypes.OBJECT, description="The entry is already resolved or dismissed.")
NOT_FOUND = OpenApiResponse(OpenApiTypes.OBJECT, description="No such row.")
REQUEST_ID = "0d9b6f0e-7c1a-4f7e-9a51-3e6a1b2c4d5f"
REVIEW_ID = "7f3c2a1b-5d4e-4c3b-8a2f-1e0d9c8b7a6f"
EXAMPLE_REQUEST = {
    "id": REQUEST_ID,
    "trigger_type": "user_question",
    "trigger_ref": "bp-treatment",
    "question": "Which guideline covers blood pressure targets for adults over 80?",
    "reason": "operator_requested",
    "source": "operator",
    "requested_by": "token:curator",
    "status": "pending",
    "retry_count": 0,
    "dispatched_from_backlog": True,
    "source_flow_id": None,
    "dispatched_at": None,
    "completed_at": None,
    "completed_flow_id": None,
    "failure_reason": "",
    "created_at": "2026-12-01T09:00:00Z",
}
EXAMPLE_REVIEW = {
    "id": REVIEW_ID,
    "claim_id": "claim/4471",
    "trigger_type": "claim_check",
    "reason": "claim_rejected",
    "source": "critic",
    "source_flow_id": None,
    "marked_by": "token:critic",
    "status": "pending",
    "resolution_note": "",
    "resolved_by": "",
    "resolved_at": None,
    "created_at": "2026-12-01T08:30:00Z",
}
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
        responses={201: ResearchRequestRowSerializer, **ERRORS},
        examples=[
            OpenApiExample("Queued", response_only=True, status_codes=["201"], value=EXAMPLE_REQUEST),
            OpenApiExample(
                "Deeper research",
                request_only=True,
                value={
                    "trigger_type": "user_question",
                    "trigger_ref": "bp-treatment",
                    "question": "Which guideline covers blood pressure targets for adults over 80?",
                },
            ),
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
        responses={200: PullResponseSerializer, **ERRORS},
        examples=[
            OpenApiExample("Only user questions", request_only=True, value={"trigger_type": "user_question"}),
            OpenApiExample(
                "Dispatched",
                response_only=True,
                value={"request": {**EXAMPLE_REQUEST, "status": "dispatched", "dispatched_at": "2026-12-01T09:05:00Z"}},
            ),
            OpenApiExample("Queue empty", response_only=True, value={"request": None}),
        ],
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
        responses={
            200: ResearchRequestRowSerializer,
            404: NOT_FOUND,
            409: OpenApiResponse(
                OpenApiTypes.OBJECT, description="The request is not `dispatched` (not pulled, or done)."
            ),
            **ERRORS,
        },
        examples=[
            OpenApiExample("Research produced a flow", request_only=True, value={"flow_id": REQUEST_ID}),
            OpenApiExample("The dispatcher gave up", request_only=True, value={"error": "dispatcher_gave_up"}),
            OpenApiExample(
                "Completed",
                response_only=True,
                value={
                    **EXAMPLE_REQUEST,
                    "status": "completed",
                    "dispatched_at": "2026-12-01T09:05:00Z",
                    "completed_at": "2026-12-01T09:09:30Z",
                    "completed_flow_id": "b2a1c3d4-0e5f-4a6b-9c7d-8e9f0a1b2c3d",
                },
            ),
        ],
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
        responses={200: BacklogStatusSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "A backlog that needs attention",
                response_only=True,
                value={
                    "status_distribution": {
                        "pending": 4,
                        "dispatched": 1,
                        "completed": 20,
                        "failed_voluntary": 2,
                        "failed_after_retries": 1,
                    },
                    "total": 28,
                    "oldest_pending_age_seconds": 1260.0,
                    "oldest_dispatched_age_seconds": 960.0,
                    "retry_distribution": {"0": 25, "1": 2, "3": 1},
                    "recent_failures": {
                        "window_hours": 24,
                        "count": 1,
                        "items": [
                            {
                                "id": REQUEST_ID,
                                "trigger_type": "user_question",
                                "reason": "weak_composite_k",
                                "status": "failed_after_retries",
                                "failure_reason": "stale_after_retries",
                                "retry_count": 3,
                                "completed_at": "2026-12-01T07:40:00Z",
                            }
                        ],
                    },
                    "loop_health": {"verdict": "warn", "reasons": ["oldest_dispatched_over_15m"]},
                },
            )
        ],
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
        responses={200: ReviewQueueSerializer, **ERRORS},
        examples=[
            OpenApiExample(
                "One waiting, one resolved",
                response_only=True,
                value={
                    "pending": [EXAMPLE_REVIEW],
                    "pending_count": 1,
                    "recent_resolutions": [
                        {
                            **EXAMPLE_REVIEW,
                            "id": "3a2b1c0d-9e8f-4a7b-8c6d-5e4f3a2b1c0d",
                            "claim_id": "claim/4468",
                            "status": "resolved",
                            "resolution_note": "Source checked; claim stands corrected.",
                            "resolved_by": "user:7",
                            "resolved_at": "2026-12-01T08:55:00Z",
                        }
                    ],
                },
            )
        ],
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
        responses={
            201: OpenApiResponse(ClaimReviewSerializer, description="Marked: a new entry."),
            200: OpenApiResponse(ClaimReviewSerializer, description="Already marked: the existing entry, unchanged."),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "A rejected claim",
                request_only=True,
                value={"claim_id": "claim/4471", "trigger_type": "claim_check", "source": "critic"},
            ),
            OpenApiExample("Marked", response_only=True, status_codes=["201", "200"], value=EXAMPLE_REVIEW),
        ],
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
        responses={
            200: ClaimReviewSerializer,
            404: NOT_FOUND,
            409: ALREADY_CLOSED,
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "Resolve", request_only=True, value={"status": "resolved", "note": "Source checked; claim corrected."}
            ),
            OpenApiExample(
                "Resolved",
                response_only=True,
                value={
                    **EXAMPLE_REVIEW,
                    "status": "resolved",
                    "resolution_note": "Source checked; claim corrected.",
                    "resolved_by": "token:curator",
                    "resolved_at": "2026-12-01T09:20:00Z",
                },
            ),
        ],
    )
    def patch(self, request: Request, review_id: str) -> Response:
        pk = parse_uuid(review_id, "review_id")
        data = _validated(ResolveClaimSerializer, request.data)
        entry = services.resolve_claim_review(pk, status=data["status"], note=data["note"], actor=actor_for(request))
        return Response(review_representation(entry))
