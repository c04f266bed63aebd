"""``GET /admin/v1/reasoning/agents/{agent}/drift``: an agent's latest drift reports (thin view)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from core.api_views import ERRORS, ApiView, limit_parameter, parse_instant, parse_limit
from core.errors import InvalidInput
from core.labels import label_schema, label_validator
from reasoning.auth import IsAdmin
from reasoning.drift import SIGNALS
from reasoning.models import DriftReport

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
