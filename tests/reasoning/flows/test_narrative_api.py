"""GET /api/reasoning/flows/{id}: the patient narrative, and who may read it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from audit.models import AuditEvent
from patients.models import Patient
from patients.services import create_patient, set_reasoning_read_consent
from reasoning.flows.narrative import DISCLAIMER
from reasoning.models import ApiToken, ReasoningFlow
from tests.schema_check import assert_matches_schema

pytestmark = pytest.mark.django_db

FLOWS = "/api/reasoning/flows"
READ_ACTION = "patient.reasoning.flow.read"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

TRIGGER = "Patient asked whether a medication change is needed"
STEP_SUMMARIES = ["Reviewed recent medications", "Checked the findings against the guidelines"]
OUTCOME = "Recommended a follow-up visit with the care team"
UNSAFE_STEP = "Reviewed metformin 500mg"

# Content an agent writes that the narrative must never carry.
TRACE_ID = "trace-7f3a9c2e41"
SESSION_ID = "session-5b8d1e"
RATIONALE = "Rationale-marker: compared three guideline versions"
INPUT_VALUE = "input-marker-labs-query"
OUTPUT_VALUE = "output-marker-guideline-v4"
REASONING = "CoT-marker: the patient may need a dose review"
HIDDEN_KEYS = {
    "id",
    "step_id",
    "flow_id",
    "parent_step_id",
    "extra_parent_ids",
    "trace_id",
    "session_id",
    "patient_id",
    "trigger_ref",
    "inputs",
    "outputs",
    "inputs_pii",
    "outputs_pii",
    "pii_fields",
    "rationale",
    "reasoning_content",
    "reasoning_content_chars",
    "llm_call_log_ref",
    "span_id",
    "summary_guard_rule",
    "patient_safe_summary",
}


def flow_url(flow_id: str) -> str:
    return f"{FLOWS}/{flow_id}"


# --- Personas ----------------------------------------------------------------------------


def new_patient(username: str, *, consent: bool) -> Patient:
    return create_patient(username=username, password=f"pw-{username}-1", actor="system:test", consent=consent)


@pytest.fixture
def other_patient() -> Patient:
    """Another consenting patient: the outsider for the first patient's flows."""
    return new_patient("morgan", consent=True)


# Morgan's app: a reasoning.read token bound to Morgan; it may read Morgan's flows, not Ada's.
@pytest.fixture
def other_app(
    other_patient: Patient, make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> APIClient:
    return client_for(make_token("reasoning.read", name="morgan-app", patient_id=other_patient.pk))


# --- Flows, written through the agent API ---------------------------------------------------


@dataclass(frozen=True)
class Recorded:
    flow_id: str
    steps: list[dict[str, Any]]


def record_flow(
    agent: APIClient,
    patient: Patient,
    *,
    trigger_summary: str = TRIGGER,
    summaries: list[str] | None = None,
    outcome_summary: str = OUTCOME,
    close: bool = True,
    abort_reason: str | None = None,
) -> Recorded:
    """Open a flow with one step per summary; complete it, or abort it with ``abort_reason``."""
    response = agent.post(
        FLOWS,
        {
            "trigger_type": "user_question",
            "trigger_ref": "portal/question/881",
            "trigger_summary": trigger_summary,
            "agent": "researcher",
            "patient_id": str(patient.pk),
            "trace_id": TRACE_ID,
            "session_id": SESSION_ID,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    flow_id: str = response.json()["id"]
    steps: list[dict[str, Any]] = []
    agents = ["researcher", "critic"]
    for index, summary in enumerate(STEP_SUMMARIES if summaries is None else summaries):
        step = agent.post(
            f"{flow_url(flow_id)}/steps",
            {
                "kind": "retrieval",
                "agent": agents[index % 2],
                "summary_text": summary,
                "rationale": RATIONALE,
                "inputs": {"query": INPUT_VALUE},
                "outputs": {"source": OUTPUT_VALUE},
                "llm_call_log_ref": "llm-call-7781",
                "span_id": "00f067aa0ba902b7",
                "reasoning_content": REASONING,
                **({"parent_step_id": steps[-1]["id"]} if steps else {}),
            },
            format="json",
        )
        assert step.status_code == 201, step.content
        steps.append(step.json())
    if close:
        body: dict[str, Any] = (
            {"flow_state": "completed", "outcome_type": "recommendation_delivered", "outcome_summary": outcome_summary}
            if abort_reason is None
            else {"flow_state": "aborted", "abort_reason": abort_reason, "outcome_summary": outcome_summary}
        )
        closed = agent.patch(flow_url(flow_id), body, format="json")
        assert closed.status_code == 200, closed.content
    return Recorded(flow_id, steps)


def keys_of(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from keys_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from keys_of(item)


def read_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=READ_ACTION).order_by("id"))


def all_audit_text() -> str:
    parts = []
    for payload, canonical in AuditEvent.objects.values_list("payload", "canonical"):
        parts.append(json.dumps(payload, ensure_ascii=False))
        parts.append(bytes(canonical).decode())
    return "\n".join(parts)


# --- 200 --------------------------------------------------------------------------------------


def test_patient_reads_the_narrative_of_a_completed_flow(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient)

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["decision_id"] == recorded.flow_id
    assert body["flow_state"] == "completed"
    assert body["trigger_summary"] == TRIGGER
    assert body["steps"] == [
        {"agent": "Research assistant", "summary": STEP_SUMMARIES[0], "created_at": recorded.steps[0]["created_at"]},
        {"agent": "Fact checker", "summary": STEP_SUMMARIES[1], "created_at": recorded.steps[1]["created_at"]},
    ]
    assert body["outcome_summary"] == OUTCOME
    assert body["closed_at"] is not None
    assert body["disclaimer"] == DISCLAIMER
    assert "not medical advice" in body["disclaimer"]


def test_narrative_carries_no_ids_inputs_outputs_rationale_or_raw_reasoning(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient)

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 200, response.content
    body = response.json()
    assert not set(keys_of(body)) & HIDDEN_KEYS
    for card in body["steps"]:
        assert set(card) == {"agent", "summary", "created_at"}
    text = response.content.decode()
    for step in recorded.steps:
        assert step["id"] not in text
    for hidden in (
        TRACE_ID,
        SESSION_ID,
        str(consenting_patient.pk),
        "portal/question/881",
        RATIONALE,
        INPUT_VALUE,
        OUTPUT_VALUE,
        REASONING,
        "llm-call-7781",
        "00f067aa0ba902b7",
    ):
        assert hidden not in text


def test_narrative_shows_nothing_of_the_recorded_outcome_or_its_correctness(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    # Outcome correctness is operator information (docs/outcomes-and-drift.md).
    recorded = record_flow(agent, consenting_patient)
    judged = agent.post(
        f"{flow_url(recorded.flow_id)}/outcome",
        {"outcome": "clinician-overrode-marker", "correct": False},
        format="json",
    )
    assert judged.status_code == 200, judged.content

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 200, response.content
    assert not set(keys_of(response.json())) & {"outcome", "outcome_correct", "correct", "outcome_recorded_at"}
    assert "clinician-overrode-marker" not in response.content.decode()


def test_unknown_agent_label_is_shown_capitalised_with_spaces(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    flow_id = agent.post(
        FLOWS, {"trigger_type": "user_question", "patient_id": str(consenting_patient.pk)}, format="json"
    ).json()["id"]
    step = agent.post(
        f"{flow_url(flow_id)}/steps",
        {"kind": "tool_call", "agent": "dose_checker", "summary_text": "Weighed the evidence"},
        format="json",
    )
    assert step.status_code == 201, step.content
    agent.patch(flow_url(flow_id), {"flow_state": "completed", "outcome_type": "answered"}, format="json")

    body = patient_app.get(flow_url(flow_id)).json()

    assert [card["agent"] for card in body["steps"]] == ["Dose checker"]


def test_flow_without_steps_has_an_empty_step_list(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient, summaries=[])

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 200, response.content
    assert response.json()["steps"] == []
    assert response.json()["outcome_summary"] == OUTCOME


# --- Aborted flows: no decision was reached ------------------------------------------------

CONCLUSION_STEP = "Concluded that a follow-up visit is the right next step"


@pytest.mark.parametrize(
    ("abort_reason", "code", "sentence"),
    [
        ("tool_error", "tool_error", "One of the tools it relies on failed, so it could not finish."),
        ("timeout", "timeout", "It ran for too long without finishing, so it was stopped automatically."),
        ("agent gave up after retries", "other", "It could not finish."),
    ],
)
def test_aborted_flow_says_it_stopped_before_a_decision_and_recommended_nothing(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient, abort_reason: str, code: str, sentence: str
) -> None:
    recorded = record_flow(
        agent, consenting_patient, summaries=["Reviewed recent medications", CONCLUSION_STEP], abort_reason=abort_reason
    )

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["flow_state"] == "aborted"
    assert body["reached_decision"] is False
    assert body["stopped"] == {
        "message": "This process stopped before reaching a decision. Nothing was recommended.",
        "reason": code,
        "reason_text": sentence,
    }
    # Nothing presented as the decision or its strength.
    assert body["outcome_summary"] is None
    assert body["dimensions"] is None
    assert OUTCOME not in response.content.decode()
    # The steps are still there, as what was done before it stopped.
    assert [card["summary"] for card in body["steps"]] == ["Reviewed recent medications", CONCLUSION_STEP]


def test_free_text_abort_reason_is_never_shown_to_the_patient(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient, abort_reason="EHR lookup crashed on chart-7781")

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 200, response.content
    assert response.json()["stopped"]["reason"] == "other"
    assert "chart-7781" not in response.content.decode()
    assert "crashed" not in response.content.decode()


def test_completed_flow_reached_a_decision_and_keeps_its_outcome_and_radar(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient)

    body = patient_app.get(flow_url(recorded.flow_id)).json()

    assert body["flow_state"] == "completed"
    assert body["reached_decision"] is True
    assert body["stopped"] is None
    assert body["outcome_summary"] == OUTCOME
    assert body["dimensions"]["axes"][0]["label"] == "How sure"


@pytest.mark.parametrize("abort_reason", [None, "tool_error"], ids=["completed", "aborted"])
def test_narrative_body_is_exactly_what_openapi_documents(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient, abort_reason: str | None
) -> None:
    schema = APIClient().get("/api/schema/?format=json").json()
    documented = schema["paths"]["/api/reasoning/flows/{flow_id}"]["get"]["responses"]
    recorded = record_flow(agent, consenting_patient, abort_reason=abort_reason)
    active = record_flow(agent, consenting_patient, close=False)

    served = patient_app.get(flow_url(recorded.flow_id))
    pending = patient_app.get(flow_url(active.flow_id))

    assert (served.status_code, pending.status_code) == (200, 202)
    assert_matches_schema(schema, documented["200"]["content"]["application/json"]["schema"], served.json())
    assert_matches_schema(schema, documented["202"]["content"]["application/json"]["schema"], pending.json())


# --- 202 --------------------------------------------------------------------------------------


def test_active_flow_is_202_with_the_step_count_so_far(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient, close=False)

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 202, response.content
    body = response.json()
    assert body["flow_state"] == "active"
    assert body["step_count"] == 2
    assert "steps" not in body
    assert TRIGGER not in response.content.decode()
    for summary in STEP_SUMMARIES:
        assert summary not in response.content.decode()


# --- 403 --------------------------------------------------------------------------------------


def test_flow_with_a_dose_in_a_step_summary_is_403_unsafe_summary(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient, summaries=["Reviewed recent medications", UNSAFE_STEP])
    stored = ReasoningFlow.objects.get(pk=recorded.flow_id)
    assert stored.patient_safe_summary is False
    assert stored.summary_guard_rule == "medication_dose"

    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 403, response.content
    assert response.json()["reason"] == "unsafe_summary"
    text = response.content.decode()
    for hidden in ("metformin", "500mg", TRIGGER, OUTCOME, "medication_dose"):
        assert hidden not in text


def test_non_consenting_patient_is_403_no_consent(
    agent: APIClient, non_consenting_patient: Patient, non_consenting_app: APIClient
) -> None:
    recorded = record_flow(agent, non_consenting_patient)

    response = non_consenting_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 403, response.content
    assert response.json()["reason"] == "no_consent"
    assert TRIGGER not in response.content.decode()


def test_revoked_consent_is_403_no_consent_on_the_next_read(
    agent: APIClient, consenting_patient: Patient, patient_app: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient)
    assert patient_app.get(flow_url(recorded.flow_id)).status_code == 200

    set_reasoning_read_consent(consenting_patient.pk, granted=False, actor="user:test")
    response = patient_app.get(flow_url(recorded.flow_id))

    assert response.status_code == 403, response.content
    assert response.json()["reason"] == "no_consent"


def test_unbound_read_token_is_403_not_patient(
    agent: APIClient, consenting_patient: Patient, reader: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient)

    response = reader.get(flow_url(recorded.flow_id))

    assert response.status_code == 403, response.content
    assert response.json()["reason"] == "not_patient"
    assert TRIGGER not in response.content.decode()


def test_agent_token_without_the_read_scope_is_403(agent: APIClient, consenting_patient: Patient) -> None:
    recorded = record_flow(agent, consenting_patient)

    response = agent.get(flow_url(recorded.flow_id))

    assert response.status_code == 403, response.content
    assert "reasoning.read" in response.json()["detail"]
    assert TRIGGER not in response.content.decode()


def test_logged_in_user_who_is_not_a_patient_is_403_not_patient(
    agent: APIClient, consenting_patient: Patient, outsider_client: Client
) -> None:
    recorded = record_flow(agent, consenting_patient)

    response = outsider_client.get(flow_url(recorded.flow_id))

    assert response.status_code == 403, response.content
    assert response.json()["reason"] == "not_patient"


# --- 404, 401 ---------------------------------------------------------------------------------


def test_another_patients_flow_is_404_exactly_like_an_unknown_flow(
    agent: APIClient, consenting_patient: Patient, other_patient: Patient, patient_app: APIClient
) -> None:
    theirs = record_flow(agent, other_patient)

    response = patient_app.get(flow_url(theirs.flow_id))
    unknown = patient_app.get(flow_url(str(uuid.uuid4())))

    assert response.status_code == 404, response.content
    assert unknown.status_code == 404, unknown.content
    assert response.json() == unknown.json()
    assert TRIGGER not in response.content.decode()


def test_request_without_credentials_is_401(
    agent: APIClient, consenting_patient: Patient, anonymous: APIClient
) -> None:
    recorded = record_flow(agent, consenting_patient)

    response = anonymous.get(flow_url(recorded.flow_id))

    assert response.status_code == 401, response.content
    assert TRIGGER not in response.content.decode()


# --- Session ----------------------------------------------------------------------------------


def test_patient_session_reads_its_own_narrative(
    agent: APIClient, consenting_patient: Patient, patient_client: Client
) -> None:
    recorded = record_flow(agent, consenting_patient)

    response = patient_client.get(flow_url(recorded.flow_id))

    assert response.status_code == 200, response.content
    assert response.json()["trigger_summary"] == TRIGGER
    (event,) = read_events()
    assert event.actor == f"user:{consenting_patient.user_id}"


def test_patient_session_gets_404_for_another_patients_flow(
    agent: APIClient, other_patient: Patient, patient_client: Client
) -> None:
    theirs = record_flow(agent, other_patient)

    response = patient_client.get(flow_url(theirs.flow_id))

    assert response.status_code == 404, response.content


# --- Throttle ---------------------------------------------------------------------------------


def test_31st_read_within_5_minutes_is_429_and_allowed_again_5_minutes_later(
    agent: APIClient,
    consenting_patient: Patient,
    patient_app: APIClient,
    other_patient: Patient,
    other_app: APIClient,
) -> None:
    with time_machine.travel(T0, tick=False) as clock:
        recorded = record_flow(agent, consenting_patient)
        theirs = record_flow(agent, other_patient)
        for minute in range(30):
            clock.move_to(T0 + timedelta(seconds=minute * 9))  # 30 reads spread over 4.5 minutes
            assert patient_app.get(flow_url(recorded.flow_id)).status_code == 200

        clock.move_to(T0 + timedelta(minutes=4, seconds=59))
        throttled = patient_app.get(flow_url(recorded.flow_id))
        # The limit is per caller: another patient's app still reads.
        other = other_app.get(flow_url(theirs.flow_id))

        assert throttled.status_code == 429, throttled.content
        assert TRIGGER not in throttled.content.decode()
        assert other.status_code == 200, other.content

        clock.move_to(T0 + timedelta(minutes=5, seconds=9))
        assert patient_app.get(flow_url(recorded.flow_id)).status_code == 200


# --- Audit ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "status", "outcome"),
    [
        ("served", 200, "served"),
        ("active", 202, "in_progress"),
        ("no_consent", 403, "denied_no_consent"),
        ("unsafe", 403, "denied_unsafe_summary"),
    ],
)
def test_each_read_is_audited_with_its_outcome(
    agent: APIClient,
    consenting_patient: Patient,
    patient_app: APIClient,
    non_consenting_patient: Patient,
    non_consenting_app: APIClient,
    scenario: str,
    status: int,
    outcome: str,
) -> None:
    if scenario == "no_consent":
        recorded, client = record_flow(agent, non_consenting_patient), non_consenting_app
    elif scenario == "unsafe":
        recorded, client = record_flow(agent, consenting_patient, summaries=[UNSAFE_STEP]), patient_app
    else:
        recorded, client = record_flow(agent, consenting_patient, close=scenario != "active"), patient_app

    response = client.get(flow_url(recorded.flow_id))

    assert response.status_code == status, response.content
    (event,) = read_events()
    assert (event.target_type, event.target_id) == ("reasoning.reasoningflow", recorded.flow_id)
    assert event.payload["outcome"] == outcome
    assert event.actor.startswith("token:")


def test_unbound_token_read_is_audited_as_a_denial(
    agent: APIClient, consenting_patient: Patient, reader: APIClient
) -> None:
    # narrative.py: "Every answer other than 404 is audited as patient.reasoning.flow.read
    # with its outcome" -- the not_patient 403 included.
    recorded = record_flow(agent, consenting_patient)

    response = reader.get(flow_url(recorded.flow_id))

    assert response.status_code == 403, response.content
    events = read_events()
    assert len(events) == 1, "a not_patient denial wrote no patient.reasoning.flow.read event"
    assert events[0].actor == "token:reader"
    assert events[0].payload["outcome"].startswith("denied")


def test_audit_payloads_never_carry_summary_text(
    agent: APIClient,
    consenting_patient: Patient,
    patient_app: APIClient,
    non_consenting_patient: Patient,
    non_consenting_app: APIClient,
) -> None:
    served = record_flow(agent, consenting_patient)
    unsafe = record_flow(agent, consenting_patient, summaries=[UNSAFE_STEP])
    active = record_flow(agent, consenting_patient, close=False)
    no_consent = record_flow(agent, non_consenting_patient)

    statuses = [
        patient_app.get(flow_url(served.flow_id)).status_code,
        patient_app.get(flow_url(unsafe.flow_id)).status_code,
        patient_app.get(flow_url(active.flow_id)).status_code,
        non_consenting_app.get(flow_url(no_consent.flow_id)).status_code,
    ]

    assert statuses == [200, 403, 202, 403]
    assert len(read_events()) == 4
    assert all("outcome" in event.payload for event in read_events())
    audited = all_audit_text()
    for text in (TRIGGER, *STEP_SUMMARIES, OUTCOME, UNSAFE_STEP, "metformin", RATIONALE, REASONING):
        assert text not in audited


# --- Tokens from the command line ---------------------------------------------------------------


def test_create_api_token_with_patient_prints_a_token_that_reads_the_narrative(
    agent: APIClient, consenting_patient: Patient, client_for: Callable[[str | None], APIClient]
) -> None:
    recorded = record_flow(agent, consenting_patient)
    out = StringIO()

    call_command(
        "create_api_token",
        "--name",
        "casey-phone",
        "--patient",
        str(consenting_patient.pk),
        "--scopes",
        "reasoning.read",
        stdout=out,
    )

    raw = out.getvalue().splitlines()[-1]
    assert ApiToken.objects.get(name="casey-phone").patient_id == consenting_patient.pk
    response = client_for(raw).get(flow_url(recorded.flow_id))
    assert response.status_code == 200, response.content
    assert response.json()["trigger_summary"] == TRIGGER


@pytest.mark.parametrize(
    "scopes", ["reasoning.write", "reasoning.read,reasoning.write", "reasoning.read,reasoning.admin"]
)
def test_binding_a_token_with_more_than_read_to_a_patient_is_a_command_error(
    consenting_patient: Patient, scopes: str
) -> None:
    with pytest.raises(CommandError, match="scopes"):
        call_command(
            "create_api_token",
            "--name",
            "casey-bad",
            "--patient",
            str(consenting_patient.pk),
            "--scopes",
            scopes,
            stdout=StringIO(),
        )

    assert not ApiToken.objects.filter(name="casey-bad").exists()


def test_binding_a_token_to_an_unknown_patient_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="patient"):
        call_command(
            "create_api_token",
            "--name",
            "nobody-app",
            "--patient",
            str(uuid.uuid4()),
            "--scopes",
            "reasoning.read",
            stdout=StringIO(),
        )

    assert not ApiToken.objects.filter(name="nobody-app").exists()


# --- Summaries are plain text -------------------------------------------------------------------

CONTROL_CHARACTERS = [
    pytest.param("\n", id="newline"),
    pytest.param("\x07", id="bell"),
    pytest.param("\t", id="tab"),
    pytest.param("\x9b", id="c1-csi"),
]


@pytest.mark.parametrize("char", CONTROL_CHARACTERS)
def test_trigger_summary_with_a_control_character_is_400_naming_the_field(agent: APIClient, char: str) -> None:
    response = agent.post(
        FLOWS, {"trigger_type": "user_question", "trigger_summary": f"Asked about{char}options"}, format="json"
    )

    assert response.status_code == 400, response.content
    assert "trigger_summary" in response.json()
    assert not ReasoningFlow.objects.exists()


@pytest.mark.parametrize("char", CONTROL_CHARACTERS)
def test_step_summary_with_a_control_character_is_400_naming_the_field(
    agent: APIClient, flow: dict[str, Any], char: str
) -> None:
    response = agent.post(
        f"{flow_url(flow['id'])}/steps",
        {"kind": "retrieval", "agent": "researcher", "summary_text": f"Looked up{char}guidelines"},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert "summary_text" in response.json()
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 0


@pytest.mark.parametrize("char", CONTROL_CHARACTERS)
def test_batch_step_summary_with_a_control_character_is_400_naming_the_field(
    agent: APIClient, flow: dict[str, Any], char: str
) -> None:
    response = agent.post(
        f"{flow_url(flow['id'])}/steps/batch",
        {"steps": [{"kind": "retrieval", "agent": "researcher", "summary_text": f"Looked up{char}guidelines"}]},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert "summary_text" in json.dumps(response.json())
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 0


@pytest.mark.parametrize("char", CONTROL_CHARACTERS)
def test_outcome_summary_with_a_control_character_is_400_naming_the_field(
    agent: APIClient, flow: dict[str, Any], char: str
) -> None:
    response = agent.patch(
        flow_url(flow["id"]),
        {"flow_state": "completed", "outcome_type": "answered", "outcome_summary": f"Advised{char}a visit"},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert "outcome_summary" in response.json()
    assert ReasoningFlow.objects.get(pk=flow["id"]).flow_state == "active"
