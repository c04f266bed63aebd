"""An agent's routes for operators: ``GET /admin/v1/reasoning/agents/{agent}/drift`` (its latest
drift reports) and ``…/review`` (its incorrect decisions for a 1:1 review; the rules are in
``reasoning.agents.review``). Thin views.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.types import OpenApiTypes
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
    parse_instant,
    parse_limit,
    with_next_page,
)
from core.errors import InvalidInput
from core.labels import label_schema, label_validator
from reasoning.agents import review, services
from reasoning.agents.drift import SIGNALS
from reasoning.auth import IsAdmin
from reasoning.models import DriftReport, ReasoningFlow

MAX_REPORTS = 100


DEFAULT_REPORTS = 20


class DriftSignalSerializer(serializers.Serializer[Any]):
    value = serializers.FloatField(allow_null=True, help_text="The session's value; null when it has none.")
    baseline = serializers.FloatField(allow_null=True, help_text="The baseline's mean; null when it has none.")
    level = serializers.ChoiceField(choices=DriftReport.Level.choices)


class DriftSignalsSerializer(serializers.Serializer[Any]):
    confidence = DriftSignalSerializer(help_text="Mean outcome_confidence of the session's flows.")
    decisions = DriftSignalSerializer(help_text="The session's number of flows (decisions).")
    escalation_rate = DriftSignalSerializer(
        help_text="Share of flows escalated (outcome_type `escalated` or a step of kind `escalation`)."
    )
    accuracy = DriftSignalSerializer(help_text="correct / (correct + incorrect) outcomes; null with none judged.")
    decision_mix = DriftSignalSerializer(
        help_text="Jensen-Shannon distance (base 2, 0..1) of the trigger-type mix from the baseline's."
    )


class DriftReportSerializer(serializers.Serializer[Any]):
    agent = serializers.CharField()
    session_id = serializers.CharField()
    session_ended_at = serializers.DateTimeField(help_text="The latest close of the session's flows.")
    computed_at = serializers.DateTimeField()
    baseline_sessions = serializers.IntegerField(help_text="Earlier sessions in the baseline.")
    decisions = serializers.IntegerField()
    level = serializers.ChoiceField(choices=DriftReport.Level.choices, help_text="The worst level of the signals.")
    signals = DriftSignalsSerializer()


def report_representation(report: DriftReport) -> dict[str, Any]:
    return {
        "agent": report.agent,
        "session_id": report.session_id,
        "session_ended_at": report.session_ended_at.isoformat(),
        "computed_at": report.computed_at.isoformat(),
        "baseline_sessions": report.baseline_sessions,
        "decisions": report.decisions,
        "level": report.level,
        "signals": {name: report.signals[name] for name in SIGNALS},
    }


def parse_agent(raw: str) -> str:
    if len(raw) > 100:
        raise InvalidInput("must be at most 100 characters", field="agent")
    try:
        label_validator(raw)
    except DjangoValidationError as exc:
        raise InvalidInput(exc.messages[0], field="agent") from None
    return raw


class AgentDriftView(ApiView):
    permission_classes = [IsAdmin]
    query_parameters = {
        "get": [
            limit_parameter(default=DEFAULT_REPORTS, maximum=MAX_REPORTS),
            OpenApiParameter(
                "before",
                OpenApiTypes.DATETIME,
                description="Only sessions that ended before this time: the last `session_ended_at` of the "
                "previous page.",
            ),
        ]
    }

    @extend_schema(
        operation_id="admin_agent_drift",
        summary="An agent's latest drift reports (newest session first)",
        description="Needs `reasoning.admin`. Not audited (levels and numbers only). Each report compares one "
        "completed session of the agent with the agent's baseline (its previous `DRIFT_BASELINE_SESSIONS` "
        "completed sessions): five signals, each with its value, the baseline's and a level (`normal`, `watch`, "
        "`alert`, `investigate`, or `insufficient_baseline` while the baseline holds fewer than "
        "`DRIFT_MIN_BASELINE_SESSIONS` sessions); `level` is the worst. Written by the daily drift job "
        "(`manage.py reasoning_drift`). An agent with no reports (or never seen) is a 200 with an empty list. "
        "400 when `agent` is not a label. Page with `limit` and `before`.",
        parameters=[
            OpenApiParameter(
                "agent", label_schema(), OpenApiParameter.PATH, description="The agent's label, e.g. `critic`."
            )
        ],
        responses={200: DriftReportSerializer(many=True), **ERRORS},
        examples=[
            OpenApiExample(
                "Escalations doubled",
                response_only=True,
                value=[
                    {
                        "agent": "critic",
                        "session_id": "s-42",
                        "session_ended_at": "2026-03-02T11:58:00Z",
                        "computed_at": "2026-03-03T03:00:00Z",
                        "baseline_sessions": 20,
                        "decisions": 14,
                        "level": "investigate",
                        "signals": {
                            "confidence": {"value": 0.81, "baseline": 0.84, "level": "normal"},
                            "decisions": {"value": 14.0, "baseline": 15.2, "level": "normal"},
                            "escalation_rate": {"value": 0.21, "baseline": 0.1, "level": "investigate"},
                            "accuracy": {"value": 0.875, "baseline": 0.9, "level": "normal"},
                            "decision_mix": {"value": 0.12, "baseline": 0.1, "level": "normal"},
                        },
                    }
                ],
            )
        ],
    )
    def get(self, request: Request, agent: str) -> Response:
        name = parse_agent(agent)
        limit = parse_limit(request.query_params.get("limit"), default=DEFAULT_REPORTS, maximum=MAX_REPORTS)
        before = parse_instant(request.query_params.get("before"), "before")
        reports = DriftReport.objects.filter(agent=name)
        if before is not None:
            reports = reports.filter(session_ended_at__lt=before)
        page = reports.order_by("-session_ended_at", "-id")[:limit]
        return Response([report_representation(report) for report in page])


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
