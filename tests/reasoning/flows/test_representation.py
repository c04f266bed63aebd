"""The fast response builders must match the documented (OpenAPI) serializers exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from reasoning.flows.serializers import (
    AdminFlowSerializer,
    AdminStepSerializer,
    FlowSerializer,
    StepSerializer,
    admin_flow_representation,
    flow_representation,
    step_representation,
)
from reasoning.models import ReasoningFlow, ReasoningStep


def rendered(data: Any) -> Any:
    return json.loads(JSONRenderer().render(data))


@pytest.fixture
def closed_flow_with_steps(agent: APIClient, flow: dict[str, Any]) -> ReasoningFlow:
    first = agent.post(
        f"/api/reasoning/flows/{flow['id']}/steps",
        {
            "kind": "retrieval",
            "agent": "researcher",
            "summary_text": "Retrieved guidelines",
            "confidence": 0.9,
            "inputs": {"q": "labs", "name": "x"},
            "pii_fields": ["name"],
            "llm_call_log_ref": "llm-1",
        },
        format="json",
    ).json()
    agent.post(
        f"/api/reasoning/flows/{flow['id']}/steps",
        {"kind": "verdict", "agent": "critic", "summary_text": "Judged the claim", "parent_step_id": first["id"]},
        format="json",
    )
    agent.patch(
        f"/api/reasoning/flows/{flow['id']}",
        {"flow_state": "completed", "outcome_type": "claim_created"},
        format="json",
    )
    return ReasoningFlow.objects.get(pk=flow["id"])


def test_flow_representation_matches_flow_serializer(closed_flow_with_steps: ReasoningFlow) -> None:
    assert rendered(flow_representation(closed_flow_with_steps)) == rendered(
        FlowSerializer(closed_flow_with_steps).data
    )


def test_step_representation_matches_step_serializer(closed_flow_with_steps: ReasoningFlow) -> None:
    for step in ReasoningStep.objects.filter(flow=closed_flow_with_steps):
        assert rendered(step_representation(step)) == rendered(StepSerializer(step).data)


def test_admin_representation_matches_admin_serializers(closed_flow_with_steps: ReasoningFlow) -> None:
    steps = list(ReasoningStep.objects.filter(flow=closed_flow_with_steps).order_by("position"))
    data = rendered(admin_flow_representation(closed_flow_with_steps, steps))
    assert data["steps"] == rendered(AdminStepSerializer(steps, many=True).data)
    assert data == rendered(AdminFlowSerializer(closed_flow_with_steps, context={"steps": steps}).data)
    del data["steps"], data["tokens"]
    assert data == rendered(FlowSerializer(closed_flow_with_steps).data)
