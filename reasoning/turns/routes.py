"""GET /admin/v1/reasoning/turns/{trace_id}: every flow of one agent turn as one graph."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import actor_for
from core.api_views import ERRORS, ApiView
from reasoning.auth import IsAdmin
from reasoning.flows.parameters import include_reasoning_of
from reasoning.flows.serializers import AdminFlowSerializer, admin_flow_representation
from reasoning.turns.graph import (
    MAX_TRACE_ID,
    MAX_TURN_FLOWS,
    MAX_TURN_STEPS,
    Turn,
    check_trace_id,
)
from reasoning.turns.services import read_turn_for_admin


def turn_representation(turn: Turn, *, include_reasoning: bool = False) -> dict[str, Any]:
    return {
        "trace_id": turn.trace_id,
        "truncated": turn.truncated,
        "flows": [
            admin_flow_representation(flow, turn.steps[flow.pk], include_reasoning=include_reasoning)
            for flow in turn.flows
        ],
        "graph": {
            "clusters": [
                {
                    "flow_id": flow.pk,
                    "agent": flow.agent,
                    "trigger_type": flow.trigger_type,
                    "step_ids": [step.pk for step in turn.steps[flow.pk]],
                }
                for flow in turn.flows
            ],
            "nodes": [
                {
                    "id": step.pk,
                    "flow_id": step.flow_id,
                    "position": step.position,
                    "kind": step.kind,
                    "agent": step.agent,
                    "started_at": step.started_at,
                    "created_at": step.created_at,
                }
                for flow in turn.flows
                for step in turn.steps[flow.pk]
            ],
            "edges": [edge.as_dict() for edge in turn.edges],
        },
    }


# --- Response shapes (documentation; turn_representation builds the body) -------------------


class TurnClusterSerializer(serializers.Serializer[Any]):
    flow_id = serializers.UUIDField()
    agent = serializers.CharField(allow_blank=True)
    trigger_type = serializers.CharField()
    step_ids = serializers.ListField(child=serializers.UUIDField(), help_text="The flow's steps, in time order.")


class TurnNodeSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField(help_text="The step's id.")
    flow_id = serializers.UUIDField()
    position = serializers.IntegerField(help_text="The step's position in its flow.")
    kind = serializers.CharField()
    agent = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class TurnEdgeSerializer(serializers.Serializer[Any]):
    to = serializers.UUIDField(help_text="The child step's id.")
    kind = serializers.ChoiceField(choices=["parent", "merge", "cross_flow"])
    reason = serializers.ChoiceField(
        choices=[
            "parent_step",
            "extra_parent",
            "trigger_ref",
            "step_ref",
            "memory_claim_ref",
            "decision_graph_node_ref",
            "nested_agent",
            "backlog_dispatch",
        ],
        help_text='Why the steps are linked (docs/outcomes-and-drift.md, "The turn view").',
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # "from" is a Python keyword, so it cannot be a class attribute.
        return {"from": serializers.UUIDField(help_text="The parent step's id."), **super().get_fields()}


class TurnGraphSerializer(serializers.Serializer[Any]):
    clusters = TurnClusterSerializer(many=True, help_text="One per flow, in time order.")
    nodes = TurnNodeSerializer(many=True, help_text="Every step, flow by flow.")
    edges = TurnEdgeSerializer(many=True)


class TurnSerializer(serializers.Serializer[Any]):
    trace_id = serializers.CharField()
    truncated = serializers.BooleanField(
        help_text=f"More than {MAX_TURN_FLOWS} flows or {MAX_TURN_STEPS} steps: the first ones in time order are shown."
    )
    flows = AdminFlowSerializer(many=True, help_text="As the flow route shows each, in `created_at` order.")
    graph = TurnGraphSerializer()


TRACE_ID = OpenApiParameter(
    "trace_id", OpenApiTypes.STR, OpenApiParameter.PATH, description="The turn's correlation id (≤ 100 characters)."
)


class AdminTurnDetailView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {
        "get": [OpenApiParameter("include_reasoning", bool, description="Include raw chain-of-thought.")]
    }

    @extend_schema(
        operation_id="admin_turns_read",
        summary="Read an agent turn: every flow of one trace id as one graph",
        description="Needs `reasoning.admin`. Audits `admin.reasoning.turn.read`. Every flow sharing the "
        "correlation id, in `created_at` order, each as the flow route shows it, and one `graph`: a cluster "
        "per flow, a node per step, and edges `parent`, `merge` and `cross_flow` (a flow triggered by "
        "another, a step naming another flow, a claim or decision-graph ref shared across flows, a nested "
        "agent's flow and its caller, a backlog dispatch; see docs/outcomes-and-drift.md). "
        f"At most {MAX_TURN_FLOWS} flows and {MAX_TURN_STEPS} "
        "steps (`truncated` says when there were more). Raw chain-of-thought only with "
        "`include_reasoning=true` and the `reasoning.cot.read` scope (403 otherwise); that read also audits "
        "`admin.reasoning.flow.reasoning_content_read` for each flow. 400 for a trace id longer than "
        f"{MAX_TRACE_ID} characters, 404 when no flow has it.",
        parameters=[TRACE_ID],
        responses={
            200: TurnSerializer,
            404: OpenApiResponse(OpenApiTypes.OBJECT, description="No flow has this trace id."),
            **ERRORS,
        },
        examples=[
            OpenApiExample(
                "A researcher's claim judged by a critic",
                response_only=True,
                status_codes=["200"],
                value={
                    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "truncated": False,
                    "flows": [{"id": "0b5c…", "agent": "researcher", "steps": ["…"]}, {"id": "7d1e…"}],
                    "graph": {
                        "clusters": [
                            {
                                "flow_id": "0b5c…",
                                "agent": "researcher",
                                "trigger_type": "user_question",
                                "step_ids": ["a1…", "a2…"],
                            },
                            {"flow_id": "7d1e…", "agent": "critic", "trigger_type": "claim", "step_ids": ["b1…"]},
                        ],
                        "nodes": [{"id": "a1…", "flow_id": "0b5c…", "position": 1, "kind": "retrieval"}],
                        "edges": [
                            {"from": "a1…", "to": "a2…", "kind": "parent", "reason": "parent_step"},
                            {"from": "a2…", "to": "b1…", "kind": "cross_flow", "reason": "memory_claim_ref"},
                        ],
                    },
                },
            ),
            OpenApiExample(
                "Trace id too long",
                response_only=True,
                status_codes=["400"],
                value={"trace_id": [f"must be 1 to {MAX_TRACE_ID} characters"]},
            ),
        ],
    )
    def get(self, request: Request, trace_id: str) -> Response:
        check_trace_id(trace_id)
        include_reasoning = include_reasoning_of(request)
        turn = read_turn_for_admin(trace_id, actor=actor_for(request), include_reasoning=include_reasoning)
        return Response(turn_representation(turn, include_reasoning=include_reasoning))
