"""``GET /admin/v1/reasoning/agents/{agent}/review``: an agent's incorrect decisions for a 1:1
review (thin view; the rules are in ``reasoning.review``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.actors import actor_for
from core.api_views import (
    CURSOR_PARAMETER,
    ERRORS,
    NEXT_PAGE_HEADERS,
    ApiView,
    limit_parameter,
    parse_limit,
    with_next_page,
)
from core.labels import label_schema
from reasoning import review, services
from reasoning.auth import IsAdmin
from reasoning.drift_api import parse_agent
from reasoning.models import ReasoningFlow

MAX_DECISIONS = 100
DEFAULT_DECISIONS = 20


class ReviewStepSerializer(serializers.Serializer[Any]):
    position = serializers.IntegerField(help_text="1-based order of arrival within the flow.")
    kind = serializers.CharField()
    agent = serializers.CharField()
    summary_text = serializers.CharField(help_text="As on the flow page.")
    rationale = serializers.CharField(allow_blank=True, help_text="As on the flow page.")
    confidence = serializers.FloatField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)


class ReviewQuestionSerializer(serializers.Serializer[Any]):
    template = serializers.ChoiceField(
        choices=[name for name, _ in review.TEMPLATES] + [review.FALLBACK[0]],
        help_text='The template that asked it (docs/outcomes-and-drift.md, "Performance review").',
    )
    text = serializers.CharField(help_text="Quotes numbers, step kinds and positions only, never a summary.")


class ReviewDecisionSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    trace_id = serializers.CharField()
    session_id = serializers.CharField(allow_blank=True)
    trigger_type = serializers.CharField()
    flow_state = serializers.ChoiceField(choices=ReasoningFlow.State.choices)
    outcome_type = serializers.CharField(allow_blank=True)
    outcome = serializers.CharField(help_text="The recorded outcome; it passed the summary guard.")
    outcome_confidence = serializers.FloatField(allow_null=True)
    step_count = serializers.IntegerField()
    patient_safe_summary = serializers.BooleanField(allow_null=True, help_text="The guard's result at close.")
    created_at = serializers.DateTimeField()
    closed_at = serializers.DateTimeField(allow_null=True)
    outcome_recorded_at = serializers.DateTimeField(help_text="When it was recorded incorrect.")
    steps = ReviewStepSerializer(many=True, help_text="In the order they began, then by position.")
    questions = ReviewQuestionSerializer(many=True, help_text="1 to 3, in the templates' order.")


class ReviewGroupSerializer(serializers.Serializer[Any]):
    decision_type = serializers.CharField(help_text="The flows' `trigger_type`.")
    count = serializers.IntegerField(help_text="Decisions of this type on this page.")
    decisions = ReviewDecisionSerializer(many=True, help_text="Newest judgement first.")


class AgentReviewSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField()
    since = serializers.DateTimeField(allow_null=True, help_text="`since` as read; null without one.")
    groups = ReviewGroupSerializer(many=True, help_text="In the order of each group's newest decision.")


EXAMPLE = {
    "agent": "critic",
    "since": "2026-03-01T00:00:00Z",
    "groups": [
        {
            "decision_type": "lab_result",
            "count": 1,
            "decisions": [
                {
                    "id": "7d0c8d8e-3f53-4a35-9f3e-0d5f3c6b9a11",
                    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "session_id": "s-2026-03-02-triage",
                    "trigger_type": "lab_result",
                    "flow_state": "completed",
                    "outcome_type": "recommendation_delivered",
                    "outcome": "follow_up_not_needed",
                    "outcome_confidence": 0.92,
                    "step_count": 2,
                    "patient_safe_summary": True,
                    "created_at": "2026-03-02T09:00:00Z",
                    "closed_at": "2026-03-02T09:00:06Z",
                    "outcome_recorded_at": "2026-03-03T15:30:00Z",
                    "steps": [
                        {
                            "position": 1,
                            "kind": "llm_prompt",
                            "agent": "critic",
                            "summary_text": "Weighed the result against the guideline",
                            "rationale": "Within the target range",
                            "confidence": 0.95,
                            "latency_ms": 4200,
                            "started_at": "2026-03-02T09:00:01Z",
                        },
                        {
                            "position": 2,
                            "kind": "decision",
                            "agent": "critic",
                            "summary_text": "Recommended no follow-up",
                            "rationale": "",
                            "confidence": 0.92,
                            "latency_ms": 300,
                            "started_at": "2026-03-02T09:00:05Z",
                        },
                    ],
                    "questions": [
                        {
                            "template": "high_confidence",
                            "text": "Confidence was 0.92 on a decision recorded incorrect: what evidence supported it?",
                        },
                        {
                            "template": "no_retrieval",
                            "text": "No retrieval step preceded the verdict (step #2, decision): what was the "
                            "decision based on?",
                        },
                        {
                            "template": "slowest_step",
                            "text": "Step #1 (llm_prompt) took 4.2 s, the slowest: did it time out or retry?",
                        },
                    ],
                }
            ],
        }
    ],
}


class AgentReviewView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {
        "get": [
            OpenApiParameter(
                "since",
                {
                    "oneOf": [
                        {"type": "string", "format": "date"},
                        {"type": "string", "format": "date-time"},
                        {"type": "string", "maxLength": 0},
                    ]
                },
                description="Only decisions recorded incorrect at or after this time: an ISO 8601 date (its "
                "midnight, UTC) or a date-time with an offset (400 otherwise).",
                examples=[
                    OpenApiExample("A day", value="2026-03-01"),
                    OpenApiExample("A time", value="2026-03-01T09:00:00Z"),
                ],
            ),
            limit_parameter(default=DEFAULT_DECISIONS, maximum=MAX_DECISIONS),
            CURSOR_PARAMETER,
        ]
    }

    @extend_schema(
        operation_id="admin_agent_review",
        summary="An agent's incorrect decisions, with questions for a 1:1 review",
        description="Needs `reasoning.admin`. Audits `admin.reasoning.agent.review_read` (a routine read) with the "
        "agent and the page's counts. The agent's flows whose outcome was recorded `correct: false`, newest "
        "`outcome_recorded_at` first (then id), optionally since a time, grouped by decision type "
        "(`trigger_type`, groups in the order of their newest decision). Each decision carries its steps in the "
        "order they began (position, kind, agent, summary, rationale, confidence, latency; never inputs, "
        "outputs or raw reasoning) and 1 to 3 questions from fixed templates (high confidence, no retrieval "
        "step, the slowest step, merged branches; a generic one when none applies). An agent with none is a "
        "200 with no groups. 400 naming `agent` when it is not a label, `since`, `limit` or `cursor` when "
        'unreadable. When more decisions match than `limit`, `X-Next-Cursor` (and `Link: rel="next"`) give '
        "the next page. Two queries a page, whatever its size.",
        parameters=[
            OpenApiParameter(
                "agent", label_schema(), OpenApiParameter.PATH, description="The agent's label, e.g. `critic`."
            ),
            *NEXT_PAGE_HEADERS,
        ],
        responses={200: AgentReviewSerializer, **ERRORS},
        examples=[OpenApiExample("One confident mistake", response_only=True, value=EXAMPLE)],
    )
    def get(self, request: Request, agent: str) -> Response:
        name = parse_agent(agent)
        params = request.query_params
        since = review.parse_since(params.get("since"))
        limit = parse_limit(params.get("limit"), default=DEFAULT_DECISIONS, maximum=MAX_DECISIONS)
        cursor = params.get("cursor", "").strip()
        page = services.read_agent_review(name, actor=actor_for(request), since=since, limit=limit, cursor=cursor)
        return with_next_page(
            request, Response({"agent": name, "since": since, "groups": page.groups}), page.next_cursor
        )
