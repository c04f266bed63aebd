"""The operators' flow routes: the flow list, one flow with its steps, the counts. Thin DRF views."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import actor_for
from core.api_views import (
    ERRORS,
    NEXT_PAGE_HEADERS,
    ApiView,
    parse_limit,
    parse_uuid,
    with_next_page,
)
from reasoning.auth import IsAdmin
from reasoning.flows import services
from reasoning.flows.parameters import (
    FLOW_ID,
    FLOW_LIST_PARAMETERS,
    FLOW_NOT_FOUND,
    MAX_FLOW_LIST,
    include_content_of,
    include_reasoning_of,
)
from reasoning.flows.search import FlowSearch
from reasoning.flows.serializers import (
    AdminFlowSerializer,
    FlowSerializer,
    ReasoningStatsSerializer,
    admin_flow_representation,
    flow_representation,
)
from reasoning.flows.stats import reasoning_stats


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
        "get": [
            OpenApiParameter("include_reasoning", bool, description="Include raw chain-of-thought."),
            OpenApiParameter(
                "include_content",
                bool,
                description="Include each step's inputs and outputs in full, the encrypted ones decrypted.",
            ),
        ]
    }

    @extend_schema(
        operation_id="admin_flows_read",
        summary="Read a flow with its whole step DAG",
        description="Needs `reasoning.admin`. Audits `admin.reasoning.flow.read`. Steps come in write order with "
        "their parents and back-refs; PII values stay encrypted (only the `pii_fields` names are shown). Raw "
        "chain-of-thought (`reasoning_content`) is included only with `include_reasoning=true` and the "
        "`reasoning.cot.read` scope (403 otherwise); that read also audits "
        "`admin.reasoning.flow.reasoning_content_read`. A step's content -- its inputs and outputs in full, the "
        "encrypted keys (prompts, completions, tool arguments and results) decrypted -- is included only with "
        "`include_content=true` and the `reasoning.content.read` scope (403 otherwise); that read audits "
        "`admin.reasoning.flow.content_read` with the reader and the flow.",
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
        include_content = include_content_of(request)
        flow, steps = services.read_flow_for_admin(
            pk, actor=actor_for(request), include_reasoning=include_reasoning, include_content=include_content
        )
        return Response(
            admin_flow_representation(flow, steps, include_reasoning=include_reasoning, include_content=include_content)
        )


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
