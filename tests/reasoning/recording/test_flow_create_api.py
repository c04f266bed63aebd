"""POST /api/reasoning/flows: open a flow, audited, idempotent on a client-chosen id."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from django.db import DatabaseError, connection
from rest_framework.test import APIClient

from audit.models import AuditEvent
from patients.models import Patient
from reasoning.models import ReasoningFlow

pytestmark = pytest.mark.django_db

URL = "/api/reasoning/flows"
BODY = {"trigger_type": "user_question", "trigger_ref": "q/42", "agent": "researcher", "trace_id": "trace-create-1"}


def started_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="reasoning.flow.started").order_by("id"))


def test_create_flow_is_201_with_an_id_and_active_state(agent: APIClient) -> None:
    response = agent.post(URL, BODY, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    flow_id = uuid.UUID(body["id"])
    assert body["flow_state"] == "active"
    assert body["trigger_type"] == "user_question"
    assert body["trace_id"] == "trace-create-1"
    assert body["step_count"] == 0
    assert body["closed_at"] is None
    stored = ReasoningFlow.objects.get(pk=flow_id)
    assert stored.flow_state == ReasoningFlow.State.ACTIVE
    assert stored.agent == "researcher"


def test_trace_id_is_generated_when_omitted(agent: APIClient) -> None:
    first = agent.post(URL, {"trigger_type": "user_question"}, format="json")
    second = agent.post(URL, {"trigger_type": "user_question"}, format="json")

    assert first.status_code == second.status_code == 201
    first_trace, second_trace = first.json()["trace_id"], second.json()["trace_id"]
    assert first_trace
    assert second_trace
    assert first_trace != second_trace
    assert ReasoningFlow.objects.get(pk=first.json()["id"]).trace_id == first_trace


def test_create_flow_audits_flow_started_targeting_the_flow(agent: APIClient) -> None:
    response = agent.post(URL, BODY, format="json")

    events = started_events()
    assert len(events) == 1
    assert events[0].target_id == response.json()["id"]
    assert events[0].target_type == "reasoning.reasoningflow"
    assert events[0].actor == "token:agent"
    assert events[0].payload["trigger_type"] == "user_question"


@pytest.mark.django_db(transaction=True)
def test_flow_row_and_its_audit_event_are_written_by_the_same_transaction(agent: APIClient) -> None:
    # Real commits here (no test-wide transaction): each row's xmin is the id of the
    # transaction that inserted it, so equal xmins mean one transaction.
    response = agent.post(URL, BODY, format="json")
    assert response.status_code == 201
    flow_id = response.json()["id"]

    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM reasoning_flow WHERE id = %s", [flow_id])
        flow_xmin = cursor.fetchone()
        cursor.execute(
            "SELECT xmin::text FROM audit_event WHERE action = 'reasoning.flow.started' AND target_id = %s",
            [flow_id],
        )
        event_xmin = cursor.fetchone()
        cursor.execute("SELECT xmin::text FROM reasoning_api_token WHERE name = 'agent'")
        token_xmin = cursor.fetchone()
    assert flow_xmin is not None
    assert event_xmin == flow_xmin
    assert token_xmin != flow_xmin


def test_flow_is_not_kept_when_its_audit_event_cannot_be_written(agent: APIClient) -> None:
    # The database refuses the audit row (a trigger, dropped with the test's transaction).
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_refuse_audit_event() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'audit store unavailable'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER test_refuse_audit_event BEFORE INSERT ON audit_event"
            " FOR EACH ROW EXECUTE FUNCTION test_refuse_audit_event()"
        )

    with pytest.raises(DatabaseError, match="audit store unavailable"):
        agent.post(URL, BODY, format="json")

    assert not ReasoningFlow.objects.exists()


def test_unknown_patient_id_is_400_naming_patient_id_and_writes_nothing(agent: APIClient) -> None:
    response = agent.post(URL, {**BODY, "patient_id": str(uuid.uuid4())}, format="json")

    assert response.status_code == 400
    assert "patient_id" in response.json()
    assert not ReasoningFlow.objects.exists()
    assert started_events() == []


def test_known_patient_id_links_the_flow_to_the_patient(agent: APIClient) -> None:
    patient = Patient.objects.create()

    response = agent.post(URL, {**BODY, "patient_id": str(patient.pk)}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["patient_id"] == str(patient.pk)
    assert ReasoningFlow.objects.get(pk=response.json()["id"]).patient_id == patient.pk
    assert started_events()[0].payload["has_patient"] is True


def test_retry_with_same_id_and_body_is_200_with_the_stored_flow(agent: APIClient) -> None:
    # No trace_id: the server generates one, and the retry must get the same one back.
    body = {"id": str(uuid.uuid4()), "trigger_type": "user_question", "agent": "researcher"}

    first = agent.post(URL, body, format="json")
    retry = agent.post(URL, body, format="json")

    assert first.status_code == 201
    assert retry.status_code == 200
    assert retry.json() == first.json()
    assert first.json()["id"] == body["id"]
    assert ReasoningFlow.objects.count() == 1
    assert len(started_events()) == 1


def test_retry_with_same_id_and_different_body_is_409(agent: APIClient) -> None:
    flow_id = str(uuid.uuid4())
    first = agent.post(URL, {**BODY, "id": flow_id}, format="json")

    conflict = agent.post(URL, {**BODY, "id": flow_id, "trigger_type": "scheduled_review"}, format="json")

    assert first.status_code == 201
    assert conflict.status_code == 409
    assert "id" in conflict.json()
    assert ReasoningFlow.objects.get(pk=flow_id).trigger_type == "user_question"
    assert len(started_events()) == 1


def test_missing_trigger_type_is_400_naming_it(agent: APIClient) -> None:
    response = agent.post(URL, {"agent": "researcher"}, format="json")

    assert response.status_code == 400
    assert "trigger_type" in response.json()
    assert not ReasoningFlow.objects.exists()


def test_unknown_body_field_is_400_naming_it(agent: APIClient) -> None:
    response = agent.post(URL, {**BODY, "patient_name": "Zebulon Quixote"}, format="json")

    assert response.status_code == 400
    assert "patient_name" in response.json()
    assert not ReasoningFlow.objects.exists()


def test_create_without_token_is_401(anonymous: APIClient) -> None:
    response = anonymous.post(URL, BODY, format="json")

    assert response.status_code == 401
    assert not ReasoningFlow.objects.exists()


@pytest.mark.parametrize("scope", ["reasoning.read", "reasoning.admin"])
def test_create_with_a_token_lacking_write_scope_is_403(
    scope: str, make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    response = client_for(make_token(scope)).post(URL, BODY, format="json")

    assert response.status_code == 403
    assert not ReasoningFlow.objects.exists()
    assert started_events() == []
