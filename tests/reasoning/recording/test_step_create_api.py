"""POST /api/reasoning/flows/{id}/steps: append a step to an active flow."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow, ReasoningStep
from tests.conftest import audit_trail_text
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

FLOWS_URL = "/api/reasoning/flows"


def steps_url(flow_id: str) -> str:
    return f"{FLOWS_URL}/{flow_id}/steps"


def step_body(**overrides: Any) -> dict[str, Any]:
    return {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved current guidelines", **overrides}


def post_step(client: APIClient, flow_id: str, **overrides: Any) -> Any:
    return client.post(steps_url(flow_id), step_body(**overrides), format="json")


def step_created_events() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="reasoning.step.created").order_by("id"))


def test_steps_get_201_and_positions_1_2_3_in_arrival_order(agent: APIClient, flow: dict[str, Any]) -> None:
    responses = [post_step(agent, flow["id"], summary_text=f"Step number {n}") for n in range(3)]

    assert [r.status_code for r in responses] == [201, 201, 201]
    assert [r.json()["position"] for r in responses] == [1, 2, 3]
    assert all(r.json()["flow_id"] == flow["id"] for r in responses)
    stored = ReasoningStep.objects.filter(flow_id=flow["id"]).order_by("position")
    assert [s.summary_text for s in stored] == ["Step number 0", "Step number 1", "Step number 2"]


def test_each_step_increments_the_flows_step_count(agent: APIClient, flow: dict[str, Any]) -> None:
    add_step(agent, flow["id"])
    add_step(agent, flow["id"])

    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 2


def test_positions_are_per_flow(agent: APIClient, flow: dict[str, Any]) -> None:
    other = open_flow(agent)
    add_step(agent, flow["id"])
    add_step(agent, flow["id"])

    assert add_step(agent, other["id"])["position"] == 1


def test_step_write_audits_step_created_targeting_the_step(agent: APIClient, flow: dict[str, Any]) -> None:
    step = add_step(agent, flow["id"], kind="verdict")

    events = step_created_events()
    assert len(events) == 1
    assert events[0].target_id == step["id"]
    assert events[0].actor == "token:agent"
    assert events[0].payload["flow_id"] == flow["id"]
    assert events[0].payload["position"] == 1
    assert events[0].payload["kind"] == "verdict"


def test_summary_text_of_280_chars_is_accepted(agent: APIClient, flow: dict[str, Any]) -> None:
    step = add_step(agent, flow["id"], summary_text="a" * 280)

    assert ReasoningStep.objects.get(pk=step["id"]).summary_text == "a" * 280


def test_summary_text_of_281_chars_is_400_naming_summary_text(agent: APIClient, flow: dict[str, Any]) -> None:
    response = post_step(agent, flow["id"], summary_text="a" * 281)

    assert response.status_code == 400
    assert "summary_text" in response.json()
    assert not ReasoningStep.objects.exists()
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 0


def test_missing_summary_text_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    body = step_body()
    del body["summary_text"]

    response = agent.post(steps_url(flow["id"]), body, format="json")

    assert response.status_code == 400
    assert "summary_text" in response.json()


@pytest.mark.parametrize("confidence", [-0.1, 1.5])
def test_confidence_outside_0_to_1_is_400(agent: APIClient, flow: dict[str, Any], confidence: float) -> None:
    response = post_step(agent, flow["id"], confidence=confidence)

    assert response.status_code == 400
    assert "confidence" in response.json()


def test_parent_step_of_the_same_flow_is_recorded(agent: APIClient, flow: dict[str, Any]) -> None:
    root = add_step(agent, flow["id"])

    child = add_step(agent, flow["id"], parent_step_id=root["id"])

    assert child["parent_step_id"] == root["id"]
    assert str(ReasoningStep.objects.get(pk=child["id"]).parent_step_id) == root["id"]


def test_parent_step_of_another_flow_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    other = open_flow(agent)
    foreign = add_step(agent, other["id"])

    response = post_step(agent, flow["id"], parent_step_id=foreign["id"])

    assert response.status_code == 400
    assert "parent_step_id" in response.json()
    assert not ReasoningStep.objects.filter(flow_id=flow["id"]).exists()


def test_parent_step_that_does_not_exist_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    response = post_step(agent, flow["id"], parent_step_id=str(uuid.uuid4()))

    assert response.status_code == 400
    assert "parent_step_id" in response.json()
    assert not ReasoningStep.objects.exists()


def test_rejected_step_does_not_use_up_a_position(agent: APIClient, flow: dict[str, Any]) -> None:
    add_step(agent, flow["id"])
    rejected = post_step(agent, flow["id"], parent_step_id=str(uuid.uuid4()))

    accepted = add_step(agent, flow["id"])

    assert rejected.status_code == 400
    assert accepted["position"] == 2
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 2
    assert len(step_created_events()) == 2


def test_extra_parent_of_another_flow_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    root = add_step(agent, flow["id"])
    other = open_flow(agent)
    foreign = add_step(agent, other["id"])

    response = post_step(agent, flow["id"], parent_step_id=root["id"], extra_parent_ids=[foreign["id"]])

    assert response.status_code == 400
    assert "extra_parent_ids" in response.json()
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 1


def test_extra_parent_that_does_not_exist_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    root = add_step(agent, flow["id"])

    response = post_step(agent, flow["id"], parent_step_id=root["id"], extra_parent_ids=[str(uuid.uuid4())])

    assert response.status_code == 400
    assert "extra_parent_ids" in response.json()
    assert ReasoningStep.objects.count() == 1


def test_extra_parent_repeating_the_primary_parent_is_400(agent: APIClient, flow: dict[str, Any]) -> None:
    root = add_step(agent, flow["id"])

    response = post_step(agent, flow["id"], parent_step_id=root["id"], extra_parent_ids=[root["id"]])

    assert response.status_code == 400
    assert "extra_parent_ids" in response.json()


def test_merge_step_with_several_parents_round_trips_in_the_admin_read(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    root = add_step(agent, flow["id"])
    left = add_step(agent, flow["id"], parent_step_id=root["id"])
    right = add_step(agent, flow["id"], parent_step_id=root["id"])
    merge = add_step(agent, flow["id"], kind="aggregation", parent_step_id=left["id"], extra_parent_ids=[right["id"]])

    read = operator.get(f"/admin/v1/reasoning/flows/{flow['id']}")

    assert read.status_code == 200
    steps = {s["id"]: s for s in read.json()["steps"]}
    assert steps[merge["id"]]["parent_step_id"] == left["id"]
    assert steps[merge["id"]]["extra_parent_ids"] == [right["id"]]
    assert steps[left["id"]]["parent_step_id"] == root["id"]
    assert steps[root["id"]]["parent_step_id"] is None
    assert steps[root["id"]]["extra_parent_ids"] == []


def test_step_on_unknown_flow_is_404(agent: APIClient) -> None:
    response = post_step(agent, str(uuid.uuid4()))

    assert response.status_code == 404
    assert not ReasoningStep.objects.exists()


def test_step_on_malformed_flow_id_is_400(agent: APIClient) -> None:
    response = post_step(agent, "not-a-uuid")

    assert response.status_code == 400
    assert "flow_id" in response.json()


@pytest.mark.parametrize(
    "close_body",
    [
        {"flow_state": "completed", "outcome_type": "recommendation_delivered"},
        {"flow_state": "aborted", "abort_reason": "tool_error"},
    ],
)
def test_step_on_closed_flow_is_409_and_writes_nothing(
    agent: APIClient, flow: dict[str, Any], close_body: dict[str, str]
) -> None:
    add_step(agent, flow["id"])
    closed = agent.patch(f"{FLOWS_URL}/{flow['id']}", close_body, format="json")
    assert closed.status_code == 200

    response = post_step(agent, flow["id"], summary_text="Late step")

    assert response.status_code == 409
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 1
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 1
    assert len(step_created_events()) == 1


def test_retry_with_same_id_and_body_is_200_with_one_row(agent: APIClient, flow: dict[str, Any]) -> None:
    step_id = str(uuid.uuid4())

    first = post_step(agent, flow["id"], id=step_id, confidence=0.8)
    retry = post_step(agent, flow["id"], id=step_id, confidence=0.8)

    assert first.status_code == 201
    assert retry.status_code == 200
    assert retry.json() == first.json()
    assert first.json()["id"] == step_id
    assert ReasoningStep.objects.count() == 1
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 1
    assert len(step_created_events()) == 1


def test_retry_with_same_id_and_different_body_is_409(agent: APIClient, flow: dict[str, Any]) -> None:
    step_id = str(uuid.uuid4())
    first = post_step(agent, flow["id"], id=step_id, summary_text="Retrieved labs")

    conflict = post_step(agent, flow["id"], id=step_id, summary_text="Retrieved something else")

    assert first.status_code == 201
    assert conflict.status_code == 409
    assert ReasoningStep.objects.get(pk=step_id).summary_text == "Retrieved labs"
    assert len(step_created_events()) == 1


def test_reusing_a_step_id_on_another_flow_is_409(agent: APIClient, flow: dict[str, Any]) -> None:
    step_id = str(uuid.uuid4())
    other = open_flow(agent)
    add_step(agent, flow["id"], id=step_id)

    conflict = post_step(agent, other["id"], id=step_id)

    assert conflict.status_code == 409
    assert not ReasoningStep.objects.filter(flow_id=other["id"]).exists()


def test_step_without_token_is_401(anonymous: APIClient, flow: dict[str, Any]) -> None:
    response = post_step(anonymous, flow["id"])

    assert response.status_code == 401
    assert not ReasoningStep.objects.exists()


def test_step_with_read_only_token_is_403(reader: APIClient, flow: dict[str, Any]) -> None:
    response = post_step(reader, flow["id"])

    assert response.status_code == 403
    assert not ReasoningStep.objects.exists()


# --- PII declared in pii_fields -----------------------------------------------------------

PATIENT_NAME = "Zebulon Quixote"
MRN = "MRN-99887766"
PII_STEP = {
    "inputs": {"patient_name": PATIENT_NAME, "dose_note": "x"},
    "outputs": {"mrn_value": MRN},
    "pii_fields": ["patient_name", "mrn_value"],
}


def raw_rows(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return "\n".join(str(row[0]) for row in cursor.fetchall())


def test_declared_pii_is_not_stored_in_plaintext_in_the_step_table(agent: APIClient, flow: dict[str, Any]) -> None:
    step = add_step(agent, flow["id"], **PII_STEP)

    table = raw_rows("SELECT s::text FROM reasoning_step AS s")
    encrypted = raw_rows("SELECT coalesce(inputs_pii, '') || ' ' || coalesce(outputs_pii, '') FROM reasoning_step")
    documents = raw_rows("SELECT inputs::text || ' ' || outputs::text FROM reasoning_step")

    assert step["id"] in table  # the row is really there
    assert encrypted.strip()  # the values went to the encrypted columns
    assert PATIENT_NAME not in json.dumps(step)
    for secret in (PATIENT_NAME, "Zebulon", "Quixote", MRN, "99887766"):
        assert secret not in table
        assert secret not in encrypted
        assert secret not in documents
    assert "patient_name" not in documents
    assert "mrn_value" not in documents
    assert "dose_note" in documents  # undeclared keys stay readable


def test_declared_pii_decrypts_through_the_model(agent: APIClient, flow: dict[str, Any]) -> None:
    step = add_step(agent, flow["id"], **PII_STEP)

    stored = ReasoningStep.objects.get(pk=step["id"])

    assert stored.inputs == {"dose_note": "x"}
    assert stored.outputs == {}
    assert stored.inputs_pii is not None
    assert stored.outputs_pii is not None
    assert json.loads(stored.inputs_pii) == {"patient_name": PATIENT_NAME}
    assert json.loads(stored.outputs_pii) == {"mrn_value": MRN}


def test_declared_pii_never_reaches_the_audit_trail(agent: APIClient, flow: dict[str, Any]) -> None:
    add_step(agent, flow["id"], **PII_STEP)

    trail = audit_trail_text()

    assert "reasoning.step.created" in trail
    for secret in (PATIENT_NAME, "Zebulon", MRN, "99887766"):
        assert secret not in trail


def test_admin_read_shows_pii_field_names_but_not_their_values(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    add_step(agent, flow["id"], **PII_STEP)

    read = operator.get(f"/admin/v1/reasoning/flows/{flow['id']}")

    assert read.status_code == 200
    (step,) = read.json()["steps"]
    assert step["inputs"] == {"dose_note": "x"}
    assert step["outputs"] == {}
    assert step["pii_fields"] == ["patient_name", "mrn_value"]
    assert PATIENT_NAME not in read.content.decode()
    assert MRN not in read.content.decode()


def test_stored_columns_cannot_confirm_a_guessed_pii_value(agent: APIClient, flow: dict[str, Any]) -> None:
    # Someone holding a database dump (a replica, a backup) but not the encryption key
    # sees every non-PII field of the step. If any column is an unkeyed hash of the
    # request body, they can confirm a guessed name or MRN (an 8-digit MRN is 10^8
    # guesses) by hashing candidate bodies: the encryption would be pointless.
    body = step_body(**PII_STEP)
    add_step(agent, flow["id"], **PII_STEP)

    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()
    unkeyed_digest = hashlib.sha256(canonical).hexdigest()

    table = raw_rows("SELECT s::text FROM reasoning_step AS s")

    assert unkeyed_digest not in table
