"""POST /api/reasoning/flows/{id}/outcome: what happened after a decision, recorded once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import IntegrityError, InternalError, connection, transaction
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow
from tests.conftest import events

pytestmark = pytest.mark.django_db

ACTION = "reasoning.flow.outcome_recorded"
COMPLETE = {"flow_state": "completed", "outcome_type": "recommendation_delivered"}
# Distinctive, so that an echo into an error or the audit trail cannot be a coincidence.
UNSAFE_OUTCOME = "Emailed the result to zebulon.quixote@example.com"


def outcome_url(flow_id: object) -> str:
    return f"/api/reasoning/flows/{flow_id}/outcome"


def close(agent: APIClient, flow_id: str, body: dict[str, Any] = COMPLETE) -> None:
    response = agent.patch(f"/api/reasoning/flows/{flow_id}", body, format="json")
    assert response.status_code == 200, response.content


@pytest.fixture
def closed(agent: APIClient, flow: dict[str, Any]) -> str:
    """A completed flow without an outcome."""
    close(agent, flow["id"])
    flow_id: str = flow["id"]
    return flow_id


def test_record_is_200_with_the_flow_carrying_the_outcome(agent: APIClient, closed: str) -> None:
    response = agent.post(outcome_url(closed), {"outcome": "follow_up_booked", "correct": True}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["id"] == closed
    assert (body["outcome"], body["outcome_correct"]) == ("follow_up_booked", True)
    assert body["outcome_recorded_at"] is not None
    stored = ReasoningFlow.objects.get(pk=closed)
    assert (stored.outcome, stored.outcome_correct) == ("follow_up_booked", True)
    assert stored.outcome_recorded_at is not None


def test_plain_text_outcome_on_an_aborted_flow_is_recorded(agent: APIClient, flow: dict[str, Any]) -> None:
    close(agent, flow["id"], {"flow_state": "aborted", "abort_reason": "tool_error"})

    response = agent.post(
        outcome_url(flow["id"]), {"outcome": "  Patient did not reply  ", "correct": None}, format="json"
    )

    assert response.status_code == 200, response.content
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert (stored.outcome, stored.outcome_correct) == ("Patient did not reply", None)


def test_admin_flow_read_shows_the_outcome(agent: APIClient, operator: APIClient, closed: str) -> None:
    agent.post(outcome_url(closed), {"outcome": "follow_up_booked", "correct": False}, format="json")

    body = operator.get(f"/admin/v1/reasoning/flows/{closed}").json()

    assert (body["outcome"], body["outcome_correct"]) == ("follow_up_booked", False)
    assert body["outcome_recorded_at"] is not None


def test_a_flow_without_an_outcome_shows_empty_fields(operator: APIClient, closed: str) -> None:
    body = operator.get(f"/admin/v1/reasoning/flows/{closed}").json()

    assert (body["outcome"], body["outcome_correct"], body["outcome_recorded_at"]) == ("", None, None)


@pytest.mark.parametrize("first", [True, False, None], ids=["first-true", "first-false", "first-null"])
def test_record_twice_is_409_and_keeps_the_first(agent: APIClient, closed: str, first: bool | None) -> None:
    recorded = agent.post(outcome_url(closed), {"outcome": "first_outcome", "correct": first}, format="json")

    again = agent.post(outcome_url(closed), {"outcome": "second_outcome", "correct": True}, format="json")

    assert recorded.status_code == 200
    assert again.status_code == 409, again.content
    assert "already recorded" in again.json()["detail"]
    stored = ReasoningFlow.objects.get(pk=closed)
    assert (stored.outcome, stored.outcome_correct) == ("first_outcome", first)
    assert len(events(ACTION)) == 1


def test_active_flow_is_409_and_writes_nothing(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.post(outcome_url(flow["id"]), {"outcome": "too_early", "correct": True}, format="json")

    assert response.status_code == 409, response.content
    assert "still active" in response.json()["detail"]
    assert ReasoningFlow.objects.get(pk=flow["id"]).outcome_recorded_at is None
    assert events(ACTION) == []


def test_unknown_flow_is_404(agent: APIClient) -> None:
    response = agent.post(outcome_url(uuid.uuid4()), {"outcome": "x", "correct": True}, format="json")

    assert response.status_code == 404
    assert events(ACTION) == []


def test_malformed_flow_id_is_400_naming_it(agent: APIClient) -> None:
    response = agent.post(outcome_url("not-a-uuid"), {"outcome": "x", "correct": True}, format="json")

    assert response.status_code == 400
    assert list(response.json()) == ["flow_id"]


@pytest.mark.parametrize("value", ["true", 1, 0, "yes", [], {}], ids=repr)
def test_correct_that_is_not_a_boolean_or_null_is_400_naming_it(agent: APIClient, closed: str, value: Any) -> None:
    response = agent.post(outcome_url(closed), {"outcome": "follow_up_booked", "correct": value}, format="json")

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["correct"]
    assert ReasoningFlow.objects.get(pk=closed).outcome_recorded_at is None
    assert events(ACTION) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"outcome": "follow_up_booked"}, "correct"),
        ({"correct": True}, "outcome"),
        ({"outcome": "   ", "correct": True}, "outcome"),
        ({"outcome": "x" * 281, "correct": True}, "outcome"),
        ({"outcome": 7, "correct": True}, "outcome"),
        ({"outcome": "ok", "correct": True, "note": "extra"}, "note"),
    ],
    ids=["correct-missing", "outcome-missing", "outcome-blank", "outcome-too-long", "outcome-number", "unknown-field"],
)
def test_bad_body_is_400_naming_the_field(agent: APIClient, closed: str, body: dict[str, Any], field: str) -> None:
    response = agent.post(outcome_url(closed), body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert ReasoningFlow.objects.get(pk=closed).outcome_recorded_at is None


@pytest.mark.parametrize(
    ("text", "rule"),
    [(UNSAFE_OUTCOME, "email"), ("Booked for March 14", "written_date"), ("Line one\u2028line two", "control_chars")],
    ids=["email", "date", "separator"],
)
def test_outcome_the_guard_refuses_is_400_naming_the_rule_never_the_text(
    agent: APIClient, closed: str, text: str, rule: str
) -> None:
    response = agent.post(outcome_url(closed), {"outcome": text, "correct": True}, format="json")

    assert response.status_code == 400, response.content
    message = response.json()["outcome"][0]
    assert f"rule: {rule}" in message
    assert text not in response.content.decode()
    assert ReasoningFlow.objects.get(pk=closed).outcome_recorded_at is None
    assert events(ACTION) == []


def test_audit_event_carries_correct_and_no_text(agent: APIClient, closed: str) -> None:
    agent.post(outcome_url(closed), {"outcome": "Booked a follow-up visit", "correct": False}, format="json")

    (event,) = events(ACTION)
    assert event.actor == "token:agent"
    assert (event.target_type, event.target_id) == ("reasoning.reasoningflow", closed)
    assert event.payload == {"correct": False, "flow_state": "completed"}
    assert "follow-up" not in bytes(event.canonical).decode()


def test_wrong_scope_is_403_and_no_token_is_401(reader: APIClient, anonymous: APIClient, closed: str) -> None:
    body = {"outcome": "follow_up_booked", "correct": True}

    assert reader.post(outcome_url(closed), body, format="json").status_code == 403
    assert anonymous.post(outcome_url(closed), body, format="json").status_code == 401
    assert events(ACTION) == []


# --- The database refuses a change, whoever asks ---------------------------------------------


@pytest.mark.parametrize(
    "assignment",
    ["outcome = 'rewritten'", "outcome_correct = TRUE", "outcome_correct = NULL", "outcome_recorded_at = now()"],
)
def test_raw_sql_update_of_a_recorded_outcome_is_refused(agent: APIClient, closed: str, assignment: str) -> None:
    agent.post(outcome_url(closed), {"outcome": "follow_up_booked", "correct": False}, format="json")

    with pytest.raises((IntegrityError, InternalError)), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"UPDATE reasoning_flow SET {assignment} WHERE id = %s", [closed])

    stored = ReasoningFlow.objects.get(pk=closed)
    assert (stored.outcome, stored.outcome_correct) == ("follow_up_booked", False)


def test_other_columns_of_a_recorded_flow_may_still_change(agent: APIClient, closed: str) -> None:
    agent.post(outcome_url(closed), {"outcome": "follow_up_booked", "correct": False}, format="json")

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE reasoning_flow SET summary_guard_rule = 'email' WHERE id = %s", [closed])

    assert ReasoningFlow.objects.get(pk=closed).summary_guard_rule == "email"


def test_openapi_requires_both_keys_and_lets_correct_be_null(db: None) -> None:
    schema = APIClient().get("/api/schema/?format=json").json()
    body = schema["components"]["schemas"]["OutcomeRecordRequest"]

    assert set(body["required"]) == {"outcome", "correct"}
    assert body["properties"]["correct"]["nullable"] is True
    assert body["properties"]["outcome"]["maxLength"] == 280
    assert body["additionalProperties"] is False
