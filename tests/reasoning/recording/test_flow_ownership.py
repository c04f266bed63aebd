"""Who may change a flow (docs/ingest.md, "Who may change a flow"): the token that opened it, or
a token with the admin scope. To every other writer the flow does not exist (404), and its
ids are "already in use" (409) without a word about the flow."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow, ReasoningStep
from tests import otlp
from tests.factories import FLOWS, add_step, open_flow

pytestmark = pytest.mark.django_db

STEP = {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved guidelines"}
CLOSE = {"flow_state": "aborted", "abort_reason": "tool_error"}


@pytest.fixture
def intruder(make_token: Callable[..., str]) -> APIClient:
    """Another agent's write token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token('reasoning.write', name='intruder')}")
    return client


@pytest.fixture
def admin_writer(make_token: Callable[..., str]) -> APIClient:
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {make_token('reasoning.write', 'reasoning.admin', name='supervisor')}"
    )
    return client


def _not_found(response: Any, flow_id: str) -> None:
    assert response.status_code == 404, response.content
    assert str(flow_id) in response.json()["detail"]
    assert "does not exist" in response.json()["detail"]


def _untouched(flow_id: str, steps: int = 0) -> None:
    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert flow.flow_state == ReasoningFlow.State.ACTIVE
    assert flow.step_count == steps == ReasoningStep.objects.filter(flow=flow).count()


def test_the_flow_records_who_opened_it(agent: APIClient) -> None:
    flow = open_flow(agent)

    assert ReasoningFlow.objects.get(pk=flow["id"]).opened_by == "token:agent"
    started = AuditEvent.objects.get(action="reasoning.flow.started", target_id=flow["id"])
    assert started.actor == "token:agent"


def test_the_opener_adds_steps_closes_and_records_the_outcome(agent: APIClient) -> None:
    flow = open_flow(agent)
    add_step(agent, flow["id"])

    closed = agent.patch(
        f"{FLOWS}/{flow['id']}", {"flow_state": "completed", "outcome_type": "recommendation_delivered"}, format="json"
    )
    outcome = agent.post(
        f"{FLOWS}/{flow['id']}/outcome", {"outcome": "follow_up_booked", "correct": True}, format="json"
    )

    assert closed.status_code == 200, closed.content
    assert outcome.status_code == 200, outcome.content


def test_another_writer_cannot_add_a_step(agent: APIClient, intruder: APIClient) -> None:
    flow = open_flow(agent)

    _not_found(intruder.post(f"{FLOWS}/{flow['id']}/steps", STEP, format="json"), flow["id"])
    _not_found(intruder.post(f"{FLOWS}/{flow['id']}/steps/batch", {"steps": [STEP]}, format="json"), flow["id"])
    _untouched(flow["id"])


def test_another_writer_cannot_close_the_flow(agent: APIClient, intruder: APIClient) -> None:
    flow = open_flow(agent)

    _not_found(intruder.patch(f"{FLOWS}/{flow['id']}", CLOSE, format="json"), flow["id"])
    _untouched(flow["id"])
    assert not AuditEvent.objects.filter(action="reasoning.flow.aborted", target_id=flow["id"]).exists()


def test_another_writer_cannot_record_the_outcome(agent: APIClient, intruder: APIClient) -> None:
    flow = open_flow(agent)
    agent.patch(
        f"{FLOWS}/{flow['id']}", {"flow_state": "completed", "outcome_type": "recommendation_delivered"}, format="json"
    )
    body = {"outcome": "follow_up_booked", "correct": False}

    _not_found(intruder.post(f"{FLOWS}/{flow['id']}/outcome", body, format="json"), flow["id"])
    batch = intruder.post("/api/reasoning/outcomes", {"outcomes": [{"flow_id": flow["id"], **body}]}, format="json")

    assert batch.json()["outcomes"][0]["reason"] == "not_found"
    assert ReasoningFlow.objects.get(pk=flow["id"]).outcome_recorded_at is None


def test_another_writer_cannot_append_or_close_through_ingest(agent: APIClient, intruder: APIClient) -> None:
    flow = open_flow(agent)

    response = intruder.post(
        "/api/reasoning/ingest", {"flows": [{"id": flow["id"], "steps": [STEP], "close": CLOSE}]}, format="json"
    )

    result = response.json()["flows"][0]
    assert result["status"] == "rejected"
    assert result["errors"] == {"flows[0].id": [f"flow {flow['id']} does not exist"]}
    _untouched(flow["id"])


def test_reusing_another_writers_flow_id_is_a_conflict_that_returns_nothing_of_it(
    agent: APIClient, intruder: APIClient
) -> None:
    body = {"id": str(uuid.uuid4()), "trigger_type": "user_question", "trigger_ref": "case/1"}
    assert agent.post(FLOWS, body, format="json").status_code == 201

    # The very same body: for the opener a replay (200 with the flow); for another writer a conflict.
    again = agent.post(FLOWS, body, format="json")
    stolen = intruder.post(FLOWS, body, format="json")

    assert again.status_code == 200
    assert stolen.status_code == 409
    assert stolen.json() == {"id": [f"id {body['id']} is already in use"]}
    assert "case/1" not in stolen.content.decode()


def test_reusing_another_writers_step_id_says_only_that_it_is_in_use(agent: APIClient, intruder: APIClient) -> None:
    theirs = open_flow(agent)
    step = add_step(agent, theirs["id"], id=str(uuid.uuid4()))
    mine = open_flow(intruder)

    response = intruder.post(f"{FLOWS}/{mine['id']}/steps", {**STEP, "id": step["id"]}, format="json")

    assert response.status_code == 409, response.content
    assert response.json() == {"id": [f"id {step['id']} is already in use"]}
    assert theirs["id"] not in response.content.decode()


def test_an_admin_token_may_change_any_flow(agent: APIClient, admin_writer: APIClient) -> None:
    flow = open_flow(agent)

    step = admin_writer.post(f"{FLOWS}/{flow['id']}/steps", STEP, format="json")
    closed = admin_writer.patch(f"{FLOWS}/{flow['id']}", CLOSE, format="json")

    assert step.status_code == 201, step.content
    assert closed.status_code == 200, closed.content
    aborted = AuditEvent.objects.get(action="reasoning.flow.aborted", target_id=flow["id"])
    assert aborted.actor == "token:supervisor"
    # The flow still belongs to its opener.
    assert ReasoningFlow.objects.get(pk=flow["id"]).opened_by == "token:agent"


def test_spans_of_another_writer_do_not_join_the_flow(agent: APIClient, intruder: APIClient) -> None:
    root = otlp.request(otlp.span("invoke_agent researcher", attributes={"gen_ai.operation.name": "invoke_agent"}))
    opened = agent.post("/v1/traces", otlp.protobuf_body(root), content_type="application/x-protobuf")
    assert opened.status_code == 200, opened.content
    (flow,) = ReasoningFlow.objects.filter(trace_id=otlp.TRACE_ID)

    child = otlp.request(otlp.child("execute_tool search", attributes={"gen_ai.operation.name": "execute_tool"}))
    response = intruder.post("/v1/traces", otlp.protobuf_body(child), content_type="application/x-protobuf")

    answer = ExportTraceServiceResponse()
    answer.ParseFromString(response.content)
    assert response.status_code == 200
    assert answer.partial_success.rejected_spans == 1
    assert not ReasoningStep.objects.filter(flow=flow).exists()
