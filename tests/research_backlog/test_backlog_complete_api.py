"""POST /admin/v1/reasoning/research/backlog/{id}/complete: finish a dispatched request."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from research_backlog.models import ResearchRequest
from tests.conftest import events
from tests.factories import NOW, QUESTION, make_request
from tests.research_backlog.support import (
    COMPLETED,
    CREATED,
    DEEPER_URL,
    DISPATCHED,
    FAILED_VOLUNTARY,
    NEXT_URL,
    NOW_JSON,
    OPERATOR,
    complete_url,
    state,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def dispatched() -> ResearchRequest:
    return make_request(status="dispatched", dispatched_at=NOW - timedelta(minutes=2))


def test_complete_with_a_flow_marks_the_request_completed(
    operator: APIClient, dispatched: ResearchRequest, flow: dict[str, Any], clock: object
) -> None:
    response = operator.post(complete_url(dispatched.pk), {"flow_id": flow["id"]}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["status"], body["completed_flow_id"], body["completed_at"], body["failure_reason"]) == (
        str(dispatched.pk),
        "completed",
        flow["id"],
        NOW_JSON,
        "",
    )
    dispatched.refresh_from_db()
    assert (dispatched.status, str(dispatched.completed_flow_id), dispatched.completed_at) == (
        "completed",
        flow["id"],
        NOW,
    )
    (event,) = events(COMPLETED)
    assert (event.actor, event.target_id) == (OPERATOR, str(dispatched.pk))
    assert event.payload == {
        "request_id": str(dispatched.pk),
        "trigger_type": "user_question",
        "reason": "operator_requested",
        "source": "operator",
        "retry_count": 0,
        "flow_id": flow["id"],
        "run_seconds": 120.0,
    }
    assert events(FAILED_VOLUNTARY) == []


def test_complete_with_an_empty_body_completes_without_a_flow(operator: APIClient, dispatched: ResearchRequest) -> None:
    response = operator.post(complete_url(dispatched.pk), {}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["completed_flow_id"]) == ("completed", None)
    (event,) = events(COMPLETED)
    assert event.payload["flow_id"] is None


def test_complete_with_an_error_label_fails_the_request_voluntarily(
    operator: APIClient, dispatched: ResearchRequest, clock: object
) -> None:
    response = operator.post(complete_url(dispatched.pk), {"error": "no_sources_found"}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["failure_reason"], body["completed_at"], body["completed_flow_id"]) == (
        "failed_voluntary",
        "no_sources_found",
        NOW_JSON,
        None,
    )
    dispatched.refresh_from_db()
    assert (dispatched.status, dispatched.failure_reason, dispatched.completed_at) == (
        "failed_voluntary",
        "no_sources_found",
        NOW,
    )
    (event,) = events(FAILED_VOLUNTARY)
    assert event.actor == OPERATOR
    assert event.payload == {
        "request_id": str(dispatched.pk),
        "trigger_type": "user_question",
        "reason": "operator_requested",
        "source": "operator",
        "retry_count": 0,
        "flow_id": None,
        "run_seconds": 120.0,
        "error": "no_sources_found",
    }
    assert events(COMPLETED) == []


def test_complete_with_an_unknown_flow_is_400_and_the_request_stays_dispatched(
    operator: APIClient, dispatched: ResearchRequest, flow: dict[str, Any]
) -> None:
    before = state()

    response = operator.post(complete_url(dispatched.pk), {"flow_id": str(uuid.uuid4())}, format="json")

    assert response.status_code == 400, response.content
    assert "flow_id" in response.json()
    assert state() == before
    dispatched.refresh_from_db()
    assert dispatched.status == "dispatched"


BAD_COMPLETE_BODIES = {
    "error_sentence": ({"error": "the search engine was down"}, "error"),
    "error_blank": ({"error": ""}, "error"),
    "error_number": ({"error": 500}, "error"),
    "error_overlong": ({"error": "e" * 201}, "error"),
    "flow_id_not_uuid": ({"flow_id": "flow-7"}, "flow_id"),
    "flow_id_number": ({"flow_id": 42}, "flow_id"),
    "unknown_field": ({"status": "completed"}, "status"),
}


@pytest.mark.parametrize(("body", "field"), list(BAD_COMPLETE_BODIES.values()), ids=list(BAD_COMPLETE_BODIES))
def test_complete_with_a_bad_body_is_400_and_writes_nothing(
    operator: APIClient, dispatched: ResearchRequest, body: dict[str, Any], field: str
) -> None:
    before = state()

    response = operator.post(complete_url(dispatched.pk), body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert state() == before


def test_complete_with_a_malformed_request_id_is_400(operator: APIClient, dispatched: ResearchRequest) -> None:
    before = state()

    response = operator.post(complete_url("not-a-uuid"), {}, format="json")

    assert response.status_code == 400
    assert "request_id" in response.json()
    assert state() == before


def test_complete_of_an_unknown_request_is_404(operator: APIClient, dispatched: ResearchRequest) -> None:
    before = state()

    response = operator.post(complete_url(uuid.uuid4()), {}, format="json")

    assert response.status_code == 404
    assert state() == before


def test_completing_twice_is_409_and_keeps_the_first_result(
    operator: APIClient, flow: dict[str, Any], dispatched: ResearchRequest
) -> None:
    first = operator.post(complete_url(dispatched.pk), {"flow_id": flow["id"]}, format="json")
    assert first.status_code == 200
    before = state()

    again = operator.post(complete_url(dispatched.pk), {"flow_id": flow["id"]}, format="json")
    as_failure = operator.post(complete_url(dispatched.pk), {"error": "late_failure"}, format="json")

    assert (again.status_code, as_failure.status_code) == (409, 409)
    assert state() == before
    assert len(events(COMPLETED)) == 1


def test_completing_a_request_that_was_never_pulled_is_409(operator: APIClient) -> None:
    row = operator.post(DEEPER_URL, {"trigger_type": "user_question", "question": "q"}, format="json").json()
    before = state()

    response = operator.post(complete_url(row["id"]), {}, format="json")

    assert response.status_code == 409
    assert state() == before
    assert ResearchRequest.objects.get(pk=row["id"]).status == "pending"


@pytest.mark.parametrize("status", ["failed_voluntary", "failed_after_retries", "completed"])
@pytest.mark.parametrize("body", [{}, {"error": "retry"}], ids=["success", "error"])
def test_completing_a_finished_request_is_409(operator: APIClient, status: str, body: dict[str, Any]) -> None:
    row = make_request(status=status, completed_at=NOW, failure_reason="" if status == "completed" else "boom")
    before = state()

    response = operator.post(complete_url(row.pk), body, format="json")

    assert response.status_code == 409
    assert state() == before


def test_a_dispatcher_round_trip_through_the_routes(operator: APIClient, flow: dict[str, Any]) -> None:
    created = operator.post(DEEPER_URL, {"trigger_type": "user_question", "question": QUESTION}, format="json")
    pulled = operator.post(NEXT_URL, format="json")
    done = operator.post(complete_url(created.json()["id"]), {"flow_id": flow["id"]}, format="json")

    assert (created.status_code, pulled.status_code, done.status_code) == (201, 200, 200)
    assert pulled.json()["request"]["id"] == created.json()["id"]
    assert done.json()["status"] == "completed"
    request_events = AuditEvent.objects.filter(target_id=created.json()["id"]).order_by("id")
    assert list(request_events.values_list("action", flat=True)) == [CREATED, DISPATCHED, COMPLETED]
