"""The summary guard at close: patient_safe_summary and summary_guard_rule, audited by rule name only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow
from reasoning.recording.services import close_flow

pytestmark = pytest.mark.django_db

FLOWS = "/api/reasoning/flows"
TRIGGER = "Patient asked whether a medication change is needed"
STEPS = ["Reviewed recent medications", "Checked the findings against the guidelines", "Drafted a plain answer"]
OUTCOME = "Recommended a follow-up visit with the care team"

EMAIL = "Asked about jordan.quill@example.org"
DOSE = "Reviewed metformin 500mg"
PHONE = "Asked the team to call 555-123-4567"


def record(
    agent: APIClient,
    *,
    trigger_summary: str = TRIGGER,
    summaries: list[str] | None = None,
    outcome_summary: str = OUTCOME,
    state: str = "completed",
) -> tuple[str, dict[str, Any]]:
    """Open, fill and close a flow through the API; return its id and the close response body."""
    response = agent.post(
        FLOWS,
        {"trigger_type": "user_question", "trigger_summary": trigger_summary, "agent": "researcher"},
        format="json",
    )
    assert response.status_code == 201, response.content
    flow_id: str = response.json()["id"]
    for summary in STEPS if summaries is None else summaries:
        step = agent.post(
            f"{FLOWS}/{flow_id}/steps",
            {"kind": "retrieval", "agent": "researcher", "summary_text": summary},
            format="json",
        )
        assert step.status_code == 201, step.content
    body: dict[str, Any] = {"flow_state": state}
    if state == "completed":
        body.update(outcome_type="recommendation_delivered", outcome_summary=outcome_summary)
    else:
        body.update(abort_reason="tool_error")
    closed = agent.patch(f"{FLOWS}/{flow_id}", body, format="json")
    assert closed.status_code == 200, closed.content
    result: dict[str, Any] = closed.json()
    return flow_id, result


def close_event(flow_id: str) -> AuditEvent:
    return AuditEvent.objects.get(action__in=["reasoning.flow.completed", "reasoning.flow.aborted"], target_id=flow_id)


def test_flow_with_plain_summaries_closes_patient_safe_with_no_rule(agent: APIClient) -> None:
    flow_id, body = record(agent)

    assert body["patient_safe_summary"] is True
    assert body["summary_guard_rule"] == ""
    stored = ReasoningFlow.objects.get(pk=flow_id)
    assert stored.patient_safe_summary is True
    assert stored.summary_guard_rule == ""
    payload = close_event(flow_id).payload
    assert payload["patient_safe_summary"] is True
    assert payload["summary_guard_rule"] is None


def test_flow_without_any_summary_is_patient_safe(agent: APIClient) -> None:
    flow_id, body = record(agent, trigger_summary="", summaries=[], outcome_summary="")

    assert body["patient_safe_summary"] is True
    assert ReasoningFlow.objects.get(pk=flow_id).summary_guard_rule == ""


@pytest.mark.parametrize(
    ("where", "fields", "rule"),
    [
        pytest.param("trigger", {"trigger_summary": EMAIL}, "email", id="trigger-email"),
        pytest.param("first step", {"summaries": [DOSE, *STEPS]}, "medication_dose", id="first-step-dose"),
        pytest.param("last step", {"summaries": [*STEPS, DOSE]}, "medication_dose", id="last-step-dose"),
        pytest.param("step", {"summaries": [*STEPS[:1], EMAIL]}, "email", id="step-email"),
        pytest.param("outcome", {"outcome_summary": PHONE}, "us_phone", id="outcome-phone"),
        pytest.param("outcome", {"outcome_summary": EMAIL}, "email", id="outcome-email"),
        # One Cyrillic letter each: they read as the Latin PHI to a patient.
        pytest.param("step", {"summaries": ["Reviewed chart for \u041cRN 4455"]}, "mrn_labeled", id="lookalike-mrn"),
        pytest.param("step", {"summaries": ["Checked 42 \u041eak Street"]}, "street_address", id="lookalike-street"),
        pytest.param("step", {"summaries": ["Noted a 67 ye\u0430r old man"]}, "age", id="lookalike-age"),
        pytest.param("step", {"summaries": ["Consulted dr. Jane Foster"]}, "titled_name", id="lowercase-title"),
    ],
)
def test_one_unsafe_summary_makes_the_flow_unsafe_and_names_the_rule(
    agent: APIClient, where: str, fields: dict[str, Any], rule: str
) -> None:
    flow_id, body = record(agent, **fields)

    assert body["patient_safe_summary"] is False, f"unsafe {where} summary passed"
    assert body["summary_guard_rule"] == rule
    stored = ReasoningFlow.objects.get(pk=flow_id)
    assert stored.patient_safe_summary is False
    assert stored.summary_guard_rule == rule


def test_rule_of_the_first_failing_summary_wins_trigger_then_steps_then_outcome(agent: APIClient) -> None:
    trigger_first, _ = record(agent, trigger_summary=EMAIL, summaries=[DOSE], outcome_summary=PHONE)
    step_first, _ = record(agent, summaries=[DOSE], outcome_summary=PHONE)

    assert ReasoningFlow.objects.get(pk=trigger_first).summary_guard_rule == "email"
    assert ReasoningFlow.objects.get(pk=step_first).summary_guard_rule == "medication_dose"


def test_aborted_flow_is_guarded_too(agent: APIClient) -> None:
    flow_id, body = record(agent, summaries=[DOSE], state="aborted")

    assert body["flow_state"] == "aborted"
    assert body["patient_safe_summary"] is False
    assert body["summary_guard_rule"] == "medication_dose"
    assert close_event(flow_id).payload["summary_guard_rule"] == "medication_dose"


def test_close_audit_payload_names_the_rule_but_never_the_text(agent: APIClient) -> None:
    flow_id, _ = record(agent, trigger_summary=EMAIL, summaries=[DOSE], outcome_summary=PHONE)

    event = close_event(flow_id)

    assert event.payload["patient_safe_summary"] is False
    assert event.payload["summary_guard_rule"] == "email"
    audited = [json.dumps(event.payload), bytes(event.canonical).decode()]
    for text in (EMAIL, DOSE, PHONE, "jordan.quill", "example.org", "metformin", "500mg", "555-123-4567", TRIGGER):
        assert not any(text in part for part in audited), f"{text!r} reached the close audit event"
    # Nor any other audit event of the flow's life.
    for stored in AuditEvent.objects.all():
        for text in ("jordan.quill", "metformin", "555-123-4567"):
            assert text not in json.dumps(stored.payload)
            assert text not in bytes(stored.canonical).decode()


def test_control_characters_reaching_the_service_are_caught_at_close(agent: APIClient, flow: dict[str, Any]) -> None:
    # The API rejects them (400); the guard still fires if a caller bypasses the serializer.
    closed = close_flow(
        flow["id"],
        state="completed",
        actor="system:test",
        outcome_type="answered",
        outcome_summary="Advised a visit\nwith the care team",
    )

    assert closed.patient_safe_summary is False
    assert closed.summary_guard_rule == "control_chars"
    assert ReasoningFlow.objects.get(pk=flow["id"]).summary_guard_rule == "control_chars"
