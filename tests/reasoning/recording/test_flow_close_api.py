"""PATCH /api/reasoning/flows/{id}: complete or abort a flow, once."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow
from tests.conftest import events
from tests.factories import add_step

pytestmark = pytest.mark.django_db

COMPLETE = {"flow_state": "completed", "outcome_type": "recommendation_delivered", "outcome_summary": "Advised a visit"}
ABORT = {"flow_state": "aborted", "abort_reason": "tool_error"}


def flow_url(flow_id: str) -> str:
    return f"/api/reasoning/flows/{flow_id}"


def test_complete_is_200_and_sets_closed_at_and_outcome(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.patch(flow_url(flow["id"]), COMPLETE, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["flow_state"] == "completed"
    assert body["closed_at"] is not None
    assert body["outcome_type"] == "recommendation_delivered"
    assert body["outcome_summary"] == "Advised a visit"
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert stored.flow_state == ReasoningFlow.State.COMPLETED
    assert stored.closed_at is not None
    assert stored.closed_at >= stored.created_at


def test_outcome_confidence_is_the_lowest_step_confidence(agent: APIClient, flow: dict[str, Any]) -> None:
    for confidence in (0.95, 0.72, 0.9):
        add_step(agent, flow["id"], confidence=confidence)

    response = agent.patch(flow_url(flow["id"]), COMPLETE, format="json")

    assert response.status_code == 200
    assert response.json()["outcome_confidence"] == pytest.approx(0.72)
    assert ReasoningFlow.objects.get(pk=flow["id"]).outcome_confidence == pytest.approx(0.72)


def test_steps_without_confidence_do_not_lower_outcome_confidence(agent: APIClient, flow: dict[str, Any]) -> None:
    add_step(agent, flow["id"], confidence=0.95)
    add_step(agent, flow["id"])
    add_step(agent, flow["id"], confidence=0.9)

    response = agent.patch(flow_url(flow["id"]), COMPLETE, format="json")

    assert response.json()["outcome_confidence"] == pytest.approx(0.9)


def test_outcome_confidence_is_null_for_a_flow_without_steps(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.patch(flow_url(flow["id"]), COMPLETE, format="json")

    assert response.status_code == 200
    assert response.json()["outcome_confidence"] is None


def test_abort_with_reason_is_200(agent: APIClient, flow: dict[str, Any]) -> None:
    add_step(agent, flow["id"], confidence=0.5)

    response = agent.patch(flow_url(flow["id"]), ABORT, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["flow_state"] == "aborted"
    assert response.json()["abort_reason"] == "tool_error"
    assert response.json()["closed_at"] is not None
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert stored.flow_state == ReasoningFlow.State.ABORTED
    assert stored.abort_reason == "tool_error"


@pytest.mark.parametrize(
    ("first", "second"),
    [(COMPLETE, COMPLETE), (ABORT, COMPLETE), (COMPLETE, ABORT)],
    ids=["completed-then-completed", "aborted-then-completed", "completed-then-aborted"],
)
def test_close_twice_is_409_and_keeps_the_first_close(
    agent: APIClient, flow: dict[str, Any], first: dict[str, str], second: dict[str, str]
) -> None:
    closed = agent.patch(flow_url(flow["id"]), first, format="json")

    again = agent.patch(flow_url(flow["id"]), second, format="json")

    assert closed.status_code == 200
    assert again.status_code == 409
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert stored.flow_state == first["flow_state"]
    assert stored.closed_at is not None
    assert stored.closed_at == datetime.fromisoformat(closed.json()["closed_at"])
    close_events = events("reasoning.flow.completed") + events("reasoning.flow.aborted")
    assert len(close_events) == 1


def test_close_unknown_flow_is_404(agent: APIClient) -> None:
    response = agent.patch(flow_url(str(uuid.uuid4())), COMPLETE, format="json")

    assert response.status_code == 404
    assert events("reasoning.flow.completed") == []


def test_close_malformed_flow_id_is_400(agent: APIClient) -> None:
    response = agent.patch(flow_url("not-a-uuid"), COMPLETE, format="json")

    assert response.status_code == 400
    assert "flow_id" in response.json()


def test_complete_without_outcome_type_is_400_naming_it(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.patch(flow_url(flow["id"]), {"flow_state": "completed"}, format="json")

    assert response.status_code == 400
    assert "outcome_type" in response.json()
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == ReasoningFlow.State.ACTIVE


def test_abort_reason_on_complete_is_400_naming_it(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.patch(flow_url(flow["id"]), {**COMPLETE, "abort_reason": "tool_error"}, format="json")

    assert response.status_code == 400
    assert "abort_reason" in response.json()
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == ReasoningFlow.State.ACTIVE


@pytest.mark.parametrize("state", ["active", "bogus", ""])
def test_flow_state_other_than_completed_or_aborted_is_400(agent: APIClient, flow: dict[str, Any], state: str) -> None:
    response = agent.patch(flow_url(flow["id"]), {**COMPLETE, "flow_state": state}, format="json")

    assert response.status_code == 400
    assert "flow_state" in response.json()
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert stored.flow_state == ReasoningFlow.State.ACTIVE
    assert stored.closed_at is None


def test_complete_audits_flow_completed(agent: APIClient, flow: dict[str, Any]) -> None:
    add_step(agent, flow["id"], confidence=0.8)

    agent.patch(flow_url(flow["id"]), COMPLETE, format="json")

    (event,) = events("reasoning.flow.completed")
    assert event.target_id == flow["id"]
    assert event.actor == "token:agent"
    assert event.payload["outcome_type"] == "recommendation_delivered"
    assert event.payload["step_count"] == 1
    assert events("reasoning.flow.aborted") == []


def test_abort_audits_flow_aborted(agent: APIClient, flow: dict[str, Any]) -> None:
    agent.patch(flow_url(flow["id"]), ABORT, format="json")

    (event,) = events("reasoning.flow.aborted")
    assert event.target_id == flow["id"]
    assert event.actor == "token:agent"
    assert event.payload["timeout"] is False
    assert events("reasoning.flow.completed") == []


def test_close_without_token_is_401(anonymous: APIClient, flow: dict[str, Any]) -> None:
    response = anonymous.patch(flow_url(flow["id"]), COMPLETE, format="json")

    assert response.status_code == 401
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == ReasoningFlow.State.ACTIVE


def test_close_with_read_only_token_is_403(reader: APIClient, flow: dict[str, Any]) -> None:
    response = reader.patch(flow_url(flow["id"]), COMPLETE, format="json")

    assert response.status_code == 403
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == ReasoningFlow.State.ACTIVE


@pytest.mark.parametrize(("confidence", "audited"), [(0.00001, 0.0), (0.00009, 0.0001), (0.72, 0.72)])
def test_tiny_step_confidence_closes_the_flow_and_is_audited_without_exponent(
    agent: APIClient, flow: dict[str, Any], confidence: float, audited: float
) -> None:
    # Python writes 1e-05 in exponent notation, which jsonb would not give back as written:
    # the audit payload carries the nearest value record() accepts; the flow keeps the exact one.
    add_step(agent, flow["id"], confidence=confidence)

    response = agent.patch(flow_url(flow["id"]), COMPLETE, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["outcome_confidence"] == pytest.approx(confidence)
    (event,) = events("reasoning.flow.completed")
    assert event.payload["outcome_confidence"] == audited
