"""POST /admin/v1/reasoning/research/deeper-request: add a question to the research backlog."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from research_backlog.models import ResearchRequest
from tests.conftest import audit_trail_text, events
from tests.factories import NOW, QUESTION
from tests.research_backlog.support import CREATED, DEEPER_URL, NOW_JSON, OPERATOR, raw_column, state

pytestmark = pytest.mark.django_db


def test_deeper_request_creates_a_pending_row_with_defaults(operator: APIClient, clock: object) -> None:
    response = operator.post(
        DEEPER_URL,
        {"trigger_type": "user_question", "trigger_ref": "bp-treatment", "question": QUESTION},
        format="json",
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body == {
        "id": body["id"],
        "trigger_type": "user_question",
        "trigger_ref": "bp-treatment",
        "question": QUESTION,
        "reason": "operator_requested",
        "source": "operator",
        "requested_by": OPERATOR,
        "status": "pending",
        "retry_count": 0,
        "dispatched_from_backlog": True,
        "source_flow_id": None,
        "dispatched_at": None,
        "completed_at": None,
        "completed_flow_id": None,
        "failure_reason": "",
        "created_at": NOW_JSON,
    }
    row = ResearchRequest.objects.get(pk=body["id"])
    assert (row.status, row.question, row.requested_by, row.created_at) == ("pending", QUESTION, OPERATOR, NOW)
    assert ResearchRequest.objects.count() == 1


def test_deeper_request_takes_reason_source_flag_and_a_multiline_question(operator: APIClient) -> None:
    question = "First line of the question,\n\tand an indented second line."

    response = operator.post(
        DEEPER_URL,
        {
            "trigger_type": "lab_result",
            "question": question,
            "reason": "weak_composite_k",
            "source": "research_console",
            "dispatched_from_backlog": False,
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    row = ResearchRequest.objects.get(pk=response.json()["id"])
    assert (row.trigger_type, row.trigger_ref, row.question, row.reason, row.source, row.dispatched_from_backlog) == (
        "lab_result",
        "",
        question,
        "weak_composite_k",
        "research_console",
        False,
    )


def test_deeper_request_accepts_a_question_of_exactly_2000_characters(operator: APIClient) -> None:
    response = operator.post(DEEPER_URL, {"trigger_type": "user_question", "question": "q" * 2000}, format="json")

    assert response.status_code == 201, response.content
    assert len(ResearchRequest.objects.get().question) == 2000


def test_deeper_request_audits_labels_and_the_length_but_not_the_question(operator: APIClient) -> None:
    response = operator.post(DEEPER_URL, {"trigger_type": "user_question", "question": QUESTION}, format="json")

    request_id = response.json()["id"]
    (event,) = events(CREATED)
    assert (event.actor, event.target_type, event.target_id) == (
        OPERATOR,
        "research_backlog.researchrequest",
        request_id,
    )
    assert event.payload == {
        "request_id": request_id,
        "trigger_type": "user_question",
        "reason": "operator_requested",
        "source": "operator",
        "retry_count": 0,
        "question_chars": len(QUESTION),
        "source_flow_id": None,
    }
    trail = audit_trail_text()
    assert request_id in trail
    for secret in (QUESTION, "Zebulon", "Quixote"):
        assert secret not in trail


BAD_DEEPER_BODIES = {
    "missing_trigger_type": ({"question": QUESTION}, "trigger_type"),
    "blank_trigger_type": ({"trigger_type": "", "question": QUESTION}, "trigger_type"),
    "sentence_trigger_type": ({"trigger_type": "user question", "question": QUESTION}, "trigger_type"),
    "numeric_trigger_type": ({"trigger_type": 7, "question": QUESTION}, "trigger_type"),
    "overlong_trigger_type": ({"trigger_type": "t" * 101, "question": QUESTION}, "trigger_type"),
    "missing_question": ({"trigger_type": "user_question"}, "question"),
    "blank_question": ({"trigger_type": "user_question", "question": ""}, "question"),
    "whitespace_question": ({"trigger_type": "user_question", "question": " \t\r\n\u00a0 "}, "question"),
    "question_2001_chars": ({"trigger_type": "user_question", "question": "q" * 2001}, "question"),
    "question_nul": ({"trigger_type": "user_question", "question": "why\x00not"}, "question"),
    "question_bell": ({"trigger_type": "user_question", "question": "why\x07not"}, "question"),
    "question_escape": ({"trigger_type": "user_question", "question": "why\x1b[31mnot"}, "question"),
    "question_c1_control": ({"trigger_type": "user_question", "question": "why\x85not"}, "question"),
    "question_not_a_string": ({"trigger_type": "user_question", "question": ["why"]}, "question"),
    "trigger_ref_control": ({"trigger_type": "user_question", "question": "q", "trigger_ref": "a\x01b"}, "trigger_ref"),
    "trigger_ref_overlong": (
        {"trigger_type": "user_question", "question": "q", "trigger_ref": "r" * 501},
        "trigger_ref",
    ),
    "unknown_field": ({"trigger_type": "user_question", "question": "q", "priority": "high"}, "priority"),
    "unknown_reason": ({"trigger_type": "user_question", "question": "q", "reason": "curiosity"}, "reason"),
    "blank_reason": ({"trigger_type": "user_question", "question": "q", "reason": ""}, "reason"),
    "status_is_not_writable": ({"trigger_type": "user_question", "question": "q", "status": "completed"}, "status"),
    "flag_as_string": (
        {"trigger_type": "user_question", "question": "q", "dispatched_from_backlog": "true"},
        "dispatched_from_backlog",
    ),
    "flag_as_int": (
        {"trigger_type": "user_question", "question": "q", "dispatched_from_backlog": 0},
        "dispatched_from_backlog",
    ),
    "flag_as_null": (
        {"trigger_type": "user_question", "question": "q", "dispatched_from_backlog": None},
        "dispatched_from_backlog",
    ),
}


@pytest.mark.parametrize(("body", "field"), list(BAD_DEEPER_BODIES.values()), ids=list(BAD_DEEPER_BODIES))
def test_deeper_request_with_a_bad_body_is_400_and_writes_nothing(
    operator: APIClient, body: dict[str, Any], field: str
) -> None:
    before = state()

    response = operator.post(DEEPER_URL, body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert state() == before


@pytest.mark.parametrize("body", ["[]", '"a question"', "{not json"], ids=["list", "string", "malformed"])
def test_deeper_request_with_a_body_that_is_not_a_json_object_is_400(operator: APIClient, body: str) -> None:
    before = state()

    response = operator.post(DEEPER_URL, body, content_type="application/json")

    assert response.status_code == 400, response.content
    assert state() == before


def test_the_question_is_encrypted_at_rest(operator: APIClient) -> None:
    response = operator.post(
        DEEPER_URL, {"trigger_type": "user_question", "question": QUESTION, "trigger_ref": "ref-1"}, format="json"
    )
    assert response.status_code == 201

    (stored,) = raw_column("SELECT question FROM research_request")
    whole_row = "\n".join(raw_column("SELECT r::text FROM research_request AS r"))

    assert stored.strip()
    assert stored != QUESTION
    for secret in (QUESTION, "Zebulon", "Quixote", "blood pressure"):
        assert secret not in stored
        assert secret not in whole_row
    assert "ref-1" in whole_row  # the row is really there, readable where not encrypted
    assert ResearchRequest.objects.get().question == QUESTION
