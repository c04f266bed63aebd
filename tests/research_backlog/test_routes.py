"""The self-improvement loop's routes (reasoning.admin): the research backlog and claims pending review.

What a dispatcher or an operator checks: status codes, bodies, the rows, the audit trail,
that a rejected request writes nothing, that free text is encrypted at rest and stays out
of the trail, and that concurrent pullers never share a row.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ApiToken
from research_backlog import services
from research_backlog.models import ClaimReview, ResearchRequest

pytestmark = pytest.mark.django_db

DEEPER_URL = "/admin/v1/reasoning/research/deeper-request"
BACKLOG_URL = "/admin/v1/reasoning/research/backlog"
NEXT_URL = "/admin/v1/reasoning/research/backlog/next"
REVIEWS_URL = "/admin/v1/reasoning/claims-pending-review"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
NOW_JSON = "2026-03-02T12:00:00Z"
OPERATOR = "token:operator"
# Distinctive strings, so a leak into a table or the trail cannot be a coincidence.
QUESTION = "Which guideline covers blood pressure targets for Zebulon Quixote, aged 83?"
NOTE = "Curator Wilhelmina checked the Quixote citation: the dose was transposed."

DISPATCHED = "reasoning.research.backlog.dispatched"
COMPLETED = "reasoning.research.backlog.completed"
FAILED_VOLUNTARY = "reasoning.research.backlog.failed_voluntary"
CREATED = "reasoning.research.deeper_request_created"
BACKLOG_READ = "admin.reasoning.research.backlog_read"
MARKED = "reasoning.claims_pending_review.marked"
RESOLVED = "reasoning.claims_pending_review.resolved"
LISTED = "admin.reasoning.claims_pending_review.listed"


def complete_url(request_id: object) -> str:
    return f"/admin/v1/reasoning/research/backlog/{request_id}/complete"


def review_url(review_id: object) -> str:
    return f"{REVIEWS_URL}/{review_id}"


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def state() -> dict[str, Any]:
    """Every row of both queues and every audit event id: equal before and after means nothing was written."""
    return {
        "requests": list(ResearchRequest.objects.order_by("pk").values()),
        "reviews": list(ClaimReview.objects.order_by("pk").values()),
        "audit": list(AuditEvent.objects.order_by("id").values_list("id", flat=True)),
    }


def raw_column(sql: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [str(row[0]) for row in cursor.fetchall()]


def audit_trail_text() -> str:
    return "\n".join(raw_column("SELECT e::text || ' ' || convert_from(e.canonical, 'UTF8') FROM audit_event AS e"))


def make_request(**fields: Any) -> ResearchRequest:
    values: dict[str, Any] = {
        "trigger_type": "user_question",
        "question": QUESTION,
        "reason": ResearchRequest.Reason.OPERATOR_REQUESTED,
        "source": "operator",
        "requested_by": OPERATOR,
    }
    values.update(fields)
    if values.get("status", "pending") != "pending":
        values.setdefault("dispatched_at", values.get("created_at", NOW))
    return ResearchRequest.objects.create(**values)


def make_review(claim_id: str, **fields: Any) -> ClaimReview:
    return ClaimReview.objects.create(claim_id=claim_id, source="critic", marked_by="token:critic", **fields)


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [item["id"] for item in items]


@pytest.fixture
def clock() -> Iterator[time_machine.Coordinates]:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def dispatched() -> ResearchRequest:
    return make_request(status="dispatched", dispatched_at=NOW - timedelta(minutes=2))


# --- POST deeper-request ------------------------------------------------------------------


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


# --- POST backlog/next --------------------------------------------------------------------


def test_next_hands_out_the_oldest_pending_request_and_marks_it_dispatched(operator: APIClient, clock: object) -> None:
    # Inserted newest first: FIFO means created_at, not insertion order.
    newer = make_request(created_at=NOW - timedelta(minutes=1), trigger_ref="newer")
    oldest = make_request(created_at=NOW - timedelta(minutes=9), trigger_ref="oldest", retry_count=1)
    make_request(created_at=NOW - timedelta(minutes=30), status="completed", completed_at=NOW)

    response = operator.post(NEXT_URL, {}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert list(body) == ["request"]
    assert body["request"] == {
        "id": str(oldest.pk),
        "trigger_type": "user_question",
        "trigger_ref": "oldest",
        "question": QUESTION,
        "reason": "operator_requested",
        "source": "operator",
        "requested_by": OPERATOR,
        "status": "dispatched",
        "retry_count": 1,
        "dispatched_from_backlog": True,
        "source_flow_id": None,
        "dispatched_at": NOW_JSON,
        "completed_at": None,
        "completed_flow_id": None,
        "failure_reason": "",
        "created_at": "2026-03-02T11:51:00Z",
    }
    oldest.refresh_from_db()
    assert (oldest.status, oldest.dispatched_at) == ("dispatched", NOW)
    newer.refresh_from_db()
    assert (newer.status, newer.dispatched_at) == ("pending", None)


def test_next_audits_the_dispatch(operator: APIClient) -> None:
    row = make_request(trigger_type="lab_result", reason="weak_composite_k", source="researcher_auto_enqueue")

    operator.post(NEXT_URL, format="json")

    (event,) = events(DISPATCHED)
    assert (event.actor, event.target_type, event.target_id) == (
        OPERATOR,
        "research_backlog.researchrequest",
        str(row.pk),
    )
    assert event.payload == {
        "request_id": str(row.pk),
        "trigger_type": "lab_result",
        "reason": "weak_composite_k",
        "source": "researcher_auto_enqueue",
        "retry_count": 0,
    }
    assert QUESTION not in audit_trail_text()


def test_next_pulls_in_fifo_order_then_returns_null(operator: APIClient) -> None:
    rows = [make_request(created_at=NOW - timedelta(minutes=minutes)) for minutes in (3, 7, 5, 1)]
    expected = [str(row.pk) for row in sorted(rows, key=lambda row: row.created_at)]

    pulled = [operator.post(NEXT_URL, format="json").json()["request"]["id"] for _ in rows]
    last = operator.post(NEXT_URL, format="json")

    assert pulled == expected
    assert last.status_code == 200
    assert last.json() == {"request": None}
    assert set(ResearchRequest.objects.values_list("status", flat=True)) == {"dispatched"}
    assert [event.target_id for event in events(DISPATCHED)] == expected


def test_next_on_a_queue_without_pending_rows_is_null_and_changes_nothing(operator: APIClient) -> None:
    make_request(status="dispatched")
    make_request(status="completed", completed_at=NOW)
    make_request(status="failed_voluntary", completed_at=NOW, failure_reason="gave_up")
    make_request(status="failed_after_retries", completed_at=NOW, failure_reason="stale_after_retries")
    before = state()

    response = operator.post(NEXT_URL, format="json")

    assert response.status_code == 200
    assert response.json() == {"request": None}
    assert state() == before


def test_next_with_no_body_at_all_pulls(operator: APIClient) -> None:
    row = make_request()

    response = operator.post(NEXT_URL)

    assert response.status_code == 200, response.content
    assert response.json()["request"]["id"] == str(row.pk)


def test_next_with_a_trigger_type_pulls_the_oldest_of_that_type_only(operator: APIClient) -> None:
    other_older = make_request(trigger_type="user_question", created_at=NOW - timedelta(hours=2))
    lab_new = make_request(trigger_type="lab_result", created_at=NOW - timedelta(minutes=1))
    lab_old = make_request(trigger_type="lab_result", created_at=NOW - timedelta(minutes=10))

    first = operator.post(NEXT_URL, {"trigger_type": "lab_result"}, format="json").json()["request"]
    second = operator.post(NEXT_URL, {"trigger_type": "lab_result"}, format="json").json()["request"]
    third = operator.post(NEXT_URL, {"trigger_type": "lab_result"}, format="json")

    assert (first["id"], first["trigger_type"]) == (str(lab_old.pk), "lab_result")
    assert second["id"] == str(lab_new.pk)
    assert third.json() == {"request": None}
    other_older.refresh_from_db()
    assert other_older.status == "pending"
    # Without the filter the other type is still there.
    assert operator.post(NEXT_URL, format="json").json()["request"]["id"] == str(other_older.pk)


BAD_PULL_BODIES = {
    "sentence": {"trigger_type": "user question"},
    "blank": {"trigger_type": ""},
    "number": {"trigger_type": 3},
    "null": {"trigger_type": None},
    "overlong": {"trigger_type": "t" * 101},
    "unknown_field": {"limit": 5},
}


@pytest.mark.parametrize("body", list(BAD_PULL_BODIES.values()), ids=list(BAD_PULL_BODIES))
def test_next_with_a_bad_body_is_400_and_dispatches_nothing(operator: APIClient, body: dict[str, Any]) -> None:
    make_request(trigger_type="user_question")
    before = state()

    response = operator.post(NEXT_URL, body, format="json")

    assert response.status_code == 400, response.content
    assert set(response.json()) == set(body)
    assert state() == before


# --- POST backlog/{id}/complete -----------------------------------------------------------


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


# --- GET backlog --------------------------------------------------------------------------


def test_backlog_reports_distribution_ages_retries_and_recent_failures(operator: APIClient, clock: object) -> None:
    make_request(created_at=NOW - timedelta(minutes=10))
    make_request(created_at=NOW - timedelta(minutes=4), retry_count=2)
    make_request(status="dispatched", created_at=NOW - timedelta(hours=1), dispatched_at=NOW - timedelta(minutes=3))
    make_request(status="dispatched", created_at=NOW - timedelta(minutes=2), retry_count=1)
    make_request(status="completed", completed_at=NOW - timedelta(minutes=30))
    recent = make_request(
        status="failed_voluntary",
        trigger_type="lab_result",
        completed_at=NOW - timedelta(hours=1),
        failure_reason="no_sources_found",
    )
    older = make_request(
        status="failed_after_retries",
        completed_at=NOW - timedelta(hours=23),
        failure_reason="stale_after_retries",
        retry_count=3,
        reason="weak_composite_k",
    )
    make_request(status="failed_voluntary", completed_at=NOW - timedelta(hours=25), failure_reason="ancient")

    response = operator.get(BACKLOG_URL)

    assert response.status_code == 200, response.content
    assert response.json() == {
        "status_distribution": {
            "pending": 2,
            "dispatched": 2,
            "completed": 1,
            "failed_voluntary": 2,
            "failed_after_retries": 1,
        },
        "total": 8,
        "oldest_pending_age_seconds": 600.0,
        "oldest_dispatched_age_seconds": 180.0,
        "retry_distribution": {"0": 5, "1": 1, "2": 1, "3": 1},
        "recent_failures": {
            "window_hours": 24,
            "count": 2,
            "items": [
                {
                    "id": str(recent.pk),
                    "trigger_type": "lab_result",
                    "reason": "operator_requested",
                    "status": "failed_voluntary",
                    "failure_reason": "no_sources_found",
                    "retry_count": 0,
                    "completed_at": "2026-03-02T11:00:00Z",
                },
                {
                    "id": str(older.pk),
                    "trigger_type": "user_question",
                    "reason": "weak_composite_k",
                    "status": "failed_after_retries",
                    "failure_reason": "stale_after_retries",
                    "retry_count": 3,
                    "completed_at": "2026-03-01T13:00:00Z",
                },
            ],
        },
        "loop_health": {"verdict": "healthy", "reasons": []},
    }


def test_backlog_of_an_empty_queue(operator: APIClient) -> None:
    response = operator.get(BACKLOG_URL)

    assert response.status_code == 200
    body = response.json()
    assert body["status_distribution"] == dict.fromkeys(ResearchRequest.Status.values, 0)
    assert (body["total"], body["oldest_pending_age_seconds"], body["oldest_dispatched_age_seconds"]) == (0, None, None)
    assert body["retry_distribution"] == {}
    assert body["recent_failures"] == {"window_hours": 24, "count": 0, "items": []}
    assert body["loop_health"] == {"verdict": "healthy", "reasons": []}


def test_backlog_lists_at_most_ten_recent_failures_newest_first(operator: APIClient, clock: object) -> None:
    rows = [
        make_request(status="failed_voluntary", completed_at=NOW - timedelta(minutes=minutes), failure_reason="x")
        for minutes in range(12)
    ]

    body = operator.get(BACKLOG_URL).json()

    assert body["recent_failures"]["count"] == 12
    assert ids(body["recent_failures"]["items"]) == [str(row.pk) for row in rows[:10]]
    assert body["loop_health"] == {"verdict": "warn", "reasons": ["recent_failures_at_least_5"]}


# (kind, age) rows placed relative to NOW, and the verdict they must produce.
HEALTH_CASES: dict[str, tuple[list[tuple[str, timedelta]], str, list[str]]] = {
    "dispatched_just_under_15m": ([("dispatched", timedelta(minutes=15, seconds=-1))], "healthy", []),
    "dispatched_15m": ([("dispatched", timedelta(minutes=15))], "warn", ["oldest_dispatched_over_15m"]),
    "dispatched_just_under_25m": (
        [("dispatched", timedelta(minutes=25, seconds=-1))],
        "warn",
        ["oldest_dispatched_over_15m"],
    ),
    "dispatched_25m": ([("dispatched", timedelta(minutes=25))], "critical", ["oldest_dispatched_over_25m"]),
    "pending_just_under_1h": ([("pending", timedelta(hours=1, seconds=-1))], "healthy", []),
    "pending_1h": ([("pending", timedelta(hours=1))], "critical", ["oldest_pending_over_1h"]),
    "four_recent_failures": ([("failed", timedelta(hours=1))] * 4, "healthy", []),
    "five_recent_failures": ([("failed", timedelta(hours=1))] * 5, "warn", ["recent_failures_at_least_5"]),
    "fifth_failure_outside_24h": (
        [("failed", timedelta(hours=1))] * 4 + [("failed", timedelta(hours=24, seconds=1))],
        "healthy",
        [],
    ),
    "critical_and_warn": (
        [("pending", timedelta(hours=2))] + [("failed", timedelta(minutes=5))] * 5,
        "critical",
        ["oldest_pending_over_1h", "recent_failures_at_least_5"],
    ),
}


@pytest.mark.parametrize(("rows", "verdict", "reasons"), list(HEALTH_CASES.values()), ids=list(HEALTH_CASES))
def test_backlog_loop_health_verdict(
    operator: APIClient, clock: object, rows: list[tuple[str, timedelta]], verdict: str, reasons: list[str]
) -> None:
    for kind, age in rows:
        if kind == "pending":
            make_request(created_at=NOW - age)
        elif kind == "dispatched":
            make_request(status="dispatched", created_at=NOW - age, dispatched_at=NOW - age)
        else:
            make_request(status="failed_voluntary", completed_at=NOW - age, failure_reason="x")

    body = operator.get(BACKLOG_URL).json()

    assert body["loop_health"] == {"verdict": verdict, "reasons": reasons}


def test_backlog_read_is_audited_with_the_total_and_verdict_only(operator: APIClient, clock: object) -> None:
    make_request(created_at=NOW - timedelta(hours=2))
    make_request(status="dispatched")
    before = state()

    operator.get(BACKLOG_URL)

    (event,) = events(BACKLOG_READ)
    assert (event.actor, event.target_type, event.target_id) == (OPERATOR, "", "")
    assert event.payload == {"total": 2, "loop_health": "critical"}
    after = state()
    assert (after["requests"], after["reviews"]) == (before["requests"], before["reviews"])
    assert QUESTION not in audit_trail_text()


# --- POST claims-pending-review -----------------------------------------------------------


def test_marking_a_claim_creates_a_pending_entry(operator: APIClient, clock: object) -> None:
    response = operator.post(
        REVIEWS_URL, {"claim_id": "claim-42", "trigger_type": "user_question", "source": "critic"}, format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body == {
        "id": body["id"],
        "claim_id": "claim-42",
        "trigger_type": "user_question",
        "reason": "claim_rejected",
        "source": "critic",
        "source_flow_id": None,
        "marked_by": OPERATOR,
        "status": "pending",
        "resolution_note": "",
        "resolved_by": "",
        "resolved_at": None,
        "created_at": NOW_JSON,
    }
    entry = ClaimReview.objects.get()
    assert (str(entry.pk), entry.claim_id, entry.status, entry.marked_by) == (
        body["id"],
        "claim-42",
        "pending",
        OPERATOR,
    )
    (event,) = events(MARKED)
    assert (event.actor, event.target_type, event.target_id) == (OPERATOR, "research_backlog.claimreview", body["id"])
    assert event.payload == {
        "review_id": body["id"],
        "claim_id": "claim-42",
        "reason": "claim_rejected",
        "source": "critic",
        "source_flow_id": None,
    }


def test_marking_a_claim_with_its_flow_records_the_flow(operator: APIClient, flow: dict[str, Any]) -> None:
    response = operator.post(
        REVIEWS_URL, {"claim_id": "claim-7", "flow_id": flow["id"], "reason": "contradicts_guideline"}, format="json"
    )

    assert response.status_code == 201, response.content
    assert (response.json()["source_flow_id"], response.json()["reason"]) == (flow["id"], "contradicts_guideline")
    assert str(ClaimReview.objects.get().source_flow_id) == flow["id"]
    (event,) = events(MARKED)
    assert event.payload["source_flow_id"] == flow["id"]


def test_marking_the_same_claim_again_returns_the_existing_entry(operator: APIClient) -> None:
    first = operator.post(REVIEWS_URL, {"claim_id": "claim-42"}, format="json")
    before = state()

    second = operator.post(REVIEWS_URL, {"claim_id": "claim-42", "reason": "another_reason"}, format="json")

    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json() == first.json()
    assert state() == before
    assert len(events(MARKED)) == 1


def test_marking_a_resolved_claim_again_returns_it_resolved(operator: APIClient) -> None:
    first = operator.post(REVIEWS_URL, {"claim_id": "claim-42"}, format="json").json()
    resolved = operator.patch(review_url(first["id"]), {"status": "resolved", "note": "fine"}, format="json")
    assert resolved.status_code == 200
    before = state()

    again = operator.post(REVIEWS_URL, {"claim_id": "claim-42"}, format="json")

    assert again.status_code == 200, again.content
    assert (again.json()["id"], again.json()["status"]) == (first["id"], "resolved")
    assert state() == before
    assert len(events(MARKED)) == 1


def test_marking_with_an_unknown_flow_is_400_and_writes_nothing(operator: APIClient, flow: dict[str, Any]) -> None:
    before = state()

    response = operator.post(REVIEWS_URL, {"claim_id": "claim-42", "flow_id": str(uuid.uuid4())}, format="json")

    assert response.status_code == 400, response.content
    assert "flow_id" in response.json()
    assert state() == before


BAD_MARK_BODIES = {
    "missing_claim_id": ({"reason": "claim_rejected"}, "claim_id"),
    "blank_claim_id": ({"claim_id": ""}, "claim_id"),
    "numeric_claim_id": ({"claim_id": 42}, "claim_id"),
    "overlong_claim_id": ({"claim_id": "c" * 201}, "claim_id"),
    "control_in_claim_id": ({"claim_id": "claim\x0042"}, "claim_id"),
    "sentence_reason": ({"claim_id": "claim-42", "reason": "it was wrong"}, "reason"),
    "sentence_source": ({"claim_id": "claim-42", "source": "a curator"}, "source"),
    "flow_id_not_uuid": ({"claim_id": "claim-42", "flow_id": "flow-1"}, "flow_id"),
    "unknown_field": ({"claim_id": "claim-42", "status": "resolved"}, "status"),
}


@pytest.mark.parametrize(("body", "field"), list(BAD_MARK_BODIES.values()), ids=list(BAD_MARK_BODIES))
def test_marking_with_a_bad_body_is_400_and_writes_nothing(
    operator: APIClient, body: dict[str, Any], field: str
) -> None:
    make_review("claim-existing")
    before = state()

    response = operator.post(REVIEWS_URL, body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert state() == before


# --- GET claims-pending-review ------------------------------------------------------------


def test_listing_shows_pending_entries_oldest_first_with_the_count(operator: APIClient, clock: object) -> None:
    newer = make_review("claim-new", created_at=NOW - timedelta(minutes=1))
    oldest = make_review("claim-old", created_at=NOW - timedelta(days=3))
    middle = make_review("claim-mid", created_at=NOW - timedelta(hours=5))
    make_review("claim-done", status="dismissed", resolved_at=NOW - timedelta(hours=1), resolved_by="token:curator")

    response = operator.get(REVIEWS_URL)

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"pending", "pending_count", "recent_resolutions"}
    assert ids(body["pending"]) == [str(oldest.pk), str(middle.pk), str(newer.pk)]
    assert body["pending_count"] == 3
    assert body["pending"][0] == {
        "id": str(oldest.pk),
        "claim_id": "claim-old",
        "trigger_type": "",
        "reason": "claim_rejected",
        "source": "critic",
        "source_flow_id": None,
        "marked_by": "token:critic",
        "status": "pending",
        "resolution_note": "",
        "resolved_by": "",
        "resolved_at": None,
        "created_at": "2026-02-27T12:00:00Z",
    }
    assert [entry["claim_id"] for entry in body["recent_resolutions"]] == ["claim-done"]


def test_listing_is_audited_with_counts(operator: APIClient, clock: object) -> None:
    make_review("claim-1")
    make_review("claim-2")
    make_review("claim-3", status="resolved", resolved_at=NOW, resolution_note=NOTE)
    before = state()

    operator.get(REVIEWS_URL)

    (event,) = events(LISTED)
    assert (event.actor, event.target_type) == (OPERATOR, "")
    assert event.payload == {"pending_count": 2, "recent_count": 1}
    assert state()["reviews"] == before["reviews"]
    assert NOTE not in audit_trail_text()


def test_listing_respects_limit_but_counts_every_pending_entry(operator: APIClient) -> None:
    entries = [make_review(f"claim-{n}", created_at=NOW - timedelta(minutes=10 - n)) for n in range(5)]

    body = operator.get(REVIEWS_URL, {"limit": "2"}).json()

    assert ids(body["pending"]) == [str(entries[0].pk), str(entries[1].pk)]
    assert body["pending_count"] == 5


@pytest.mark.parametrize("limit", ["1", "500"])
def test_listing_accepts_the_limit_bounds(operator: APIClient, limit: str) -> None:
    make_review("claim-a", created_at=NOW - timedelta(minutes=2))
    make_review("claim-b", created_at=NOW - timedelta(minutes=1))

    response = operator.get(REVIEWS_URL, {"limit": limit})

    assert response.status_code == 200
    assert len(response.json()["pending"]) == min(int(limit), 2)


@pytest.mark.parametrize("limit", ["0", "501", "-1", "abc", "2.5"])
def test_listing_with_a_bad_limit_is_400_and_not_audited(operator: APIClient, limit: str) -> None:
    make_review("claim-a")
    before = state()

    response = operator.get(REVIEWS_URL, {"limit": limit})

    assert response.status_code == 400
    assert "limit" in response.json()
    assert state() == before


def test_recent_resolutions_are_terminal_entries_of_the_past_day_newest_first(operator: APIClient) -> None:
    # Resolved through the route 25 hours ago: too old to be recent.
    with time_machine.travel(NOW - timedelta(hours=25), tick=False):
        stale = operator.post(REVIEWS_URL, {"claim_id": "claim-stale"}, format="json").json()
        operator.patch(review_url(stale["id"]), {"status": "resolved"}, format="json")
    with time_machine.travel(NOW - timedelta(hours=2), tick=False):
        dismissed = operator.post(REVIEWS_URL, {"claim_id": "claim-dismissed"}, format="json").json()
        operator.patch(review_url(dismissed["id"]), {"status": "dismissed"}, format="json")
    with time_machine.travel(NOW - timedelta(minutes=5), tick=False):
        resolved = operator.post(REVIEWS_URL, {"claim_id": "claim-resolved"}, format="json").json()
        operator.patch(review_url(resolved["id"]), {"status": "resolved", "note": "ok"}, format="json")
    pending = make_review("claim-pending", created_at=NOW - timedelta(hours=30))

    with time_machine.travel(NOW, tick=False):
        body = operator.get(REVIEWS_URL).json()

    assert ids(body["recent_resolutions"]) == [resolved["id"], dismissed["id"]]
    assert [entry["status"] for entry in body["recent_resolutions"]] == ["resolved", "dismissed"]
    assert body["recent_resolutions"][0]["resolved_at"] == "2026-03-02T11:55:00Z"
    assert ids(body["pending"]) == [str(pending.pk)]


def test_recent_resolutions_hold_at_most_ten(operator: APIClient, clock: object) -> None:
    entries = [
        make_review(
            f"claim-{n}",
            status="resolved" if n % 2 else "dismissed",
            resolved_at=NOW - timedelta(minutes=10 * n + 1),
            resolved_by="token:curator",
        )
        for n in range(12)
    ]
    # An entry resolved exactly 24 h ago is still inside the window, but older than the ten newest.
    ClaimReview.objects.filter(pk=entries[11].pk).update(resolved_at=NOW - timedelta(hours=24))

    body = operator.get(REVIEWS_URL).json()

    assert ids(body["recent_resolutions"]) == [str(entry.pk) for entry in entries[:10]]
    assert body["pending"] == []
    assert body["pending_count"] == 0


# --- PATCH claims-pending-review/{id} -----------------------------------------------------


@pytest.mark.parametrize("status", ["resolved", "dismissed"])
def test_resolving_a_pending_claim_records_the_note(operator: APIClient, clock: object, status: str) -> None:
    entry = make_review("claim-42", created_at=NOW - timedelta(hours=1))

    response = operator.patch(review_url(entry.pk), {"status": status, "note": NOTE}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["id"], body["status"], body["resolution_note"], body["resolved_by"], body["resolved_at"]) == (
        str(entry.pk),
        status,
        NOTE,
        OPERATOR,
        NOW_JSON,
    )
    entry.refresh_from_db()
    assert (entry.status, entry.resolution_note, entry.resolved_by, entry.resolved_at) == (status, NOTE, OPERATOR, NOW)
    (event,) = events(RESOLVED)
    assert (event.actor, event.target_type, event.target_id) == (
        OPERATOR,
        "research_backlog.claimreview",
        str(entry.pk),
    )
    assert event.payload == {
        "review_id": str(entry.pk),
        "claim_id": "claim-42",
        "status": status,
        "note_chars": len(NOTE),
        "pending_seconds": 3600.0,
    }
    trail = audit_trail_text()
    for secret in (NOTE, "Wilhelmina", "transposed"):
        assert secret not in trail


def test_resolving_without_a_note_stores_an_empty_one(operator: APIClient) -> None:
    entry = make_review("claim-42")

    response = operator.patch(review_url(entry.pk), {"status": "dismissed"}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["resolution_note"] == ""
    (event,) = events(RESOLVED)
    assert event.payload["note_chars"] == 0


@pytest.mark.parametrize("first", ["resolved", "dismissed"])
@pytest.mark.parametrize("second", ["resolved", "dismissed"])
def test_resolving_an_already_terminal_claim_is_409(operator: APIClient, first: str, second: str) -> None:
    entry = make_review("claim-42")
    assert operator.patch(review_url(entry.pk), {"status": first, "note": "first"}, format="json").status_code == 200
    before = state()

    response = operator.patch(review_url(entry.pk), {"status": second, "note": "second"}, format="json")

    assert response.status_code == 409
    assert state() == before
    entry.refresh_from_db()
    assert (entry.status, entry.resolution_note) == (first, "first")
    assert len(events(RESOLVED)) == 1


def test_resolving_an_unknown_claim_is_404(operator: APIClient) -> None:
    make_review("claim-42")
    before = state()

    response = operator.patch(review_url(uuid.uuid4()), {"status": "resolved"}, format="json")

    assert response.status_code == 404
    assert state() == before


def test_resolving_with_a_malformed_id_is_400(operator: APIClient) -> None:
    before = state()

    response = operator.patch(review_url("claim-42"), {"status": "resolved"}, format="json")

    assert response.status_code == 400
    assert "review_id" in response.json()
    assert state() == before


BAD_RESOLVE_BODIES = {
    "missing_status": ({"note": "n"}, "status"),
    "back_to_pending": ({"status": "pending"}, "status"),
    "unknown_status": ({"status": "closed"}, "status"),
    "null_status": ({"status": None}, "status"),
    "note_with_control": ({"status": "resolved", "note": "bad\x07note"}, "note"),
    "note_2001_chars": ({"status": "resolved", "note": "n" * 2001}, "note"),
    "note_not_a_string": ({"status": "resolved", "note": 5}, "note"),
    "unknown_field": ({"status": "resolved", "resolved_by": "someone"}, "resolved_by"),
}


@pytest.mark.parametrize(("body", "field"), list(BAD_RESOLVE_BODIES.values()), ids=list(BAD_RESOLVE_BODIES))
def test_resolving_with_a_bad_body_is_400_and_writes_nothing(
    operator: APIClient, body: dict[str, Any], field: str
) -> None:
    entry = make_review("claim-42")
    before = state()

    response = operator.patch(review_url(entry.pk), body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert state() == before


# --- Authentication and scope on every route ----------------------------------------------


@pytest.fixture
def targets() -> dict[str, str]:
    """A dispatched request and a pending review for the routes that name one."""
    return {
        "request": str(make_request(status="dispatched").pk),
        "review": str(make_review("claim-42").pk),
    }


ROUTES: dict[str, tuple[str, Callable[[dict[str, str]], str], dict[str, Any] | None]] = {
    "deeper_request": ("post", lambda t: DEEPER_URL, {"trigger_type": "user_question", "question": "q"}),
    "backlog_next": ("post", lambda t: NEXT_URL, {}),
    "backlog_complete": ("post", lambda t: complete_url(t["request"]), {}),
    "backlog_status": ("get", lambda t: BACKLOG_URL, None),
    "claims_mark": ("post", lambda t: REVIEWS_URL, {"claim_id": "claim-new"}),
    "claims_list": ("get", lambda t: REVIEWS_URL, None),
    "claims_resolve": ("patch", lambda t: review_url(t["review"]), {"status": "resolved", "note": NOTE}),
}


def call(client: APIClient, route: str, targets: dict[str, str]) -> Any:
    """Send the route's request; returns the test client's response."""
    method, url, body = ROUTES[route]
    if method == "get":
        return client.get(url(targets))
    return getattr(client, method)(url(targets), body, format="json")


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_works_for_an_admin_token(operator: APIClient, targets: dict[str, str], route: str) -> None:
    make_request()  # something to pull

    response = call(operator, route, targets)

    assert response.status_code in (200, 201), response.content


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("credentials", [None, "rft_not-a-real-token"], ids=["no_token", "unknown_token"])
def test_every_route_without_a_valid_token_is_401_and_writes_nothing(
    client_for: Callable[[str | None], APIClient], targets: dict[str, str], route: str, credentials: str | None
) -> None:
    make_request()
    before = state()

    response = call(client_for(credentials), route, targets)

    assert response.status_code == 401, response.content
    assert state() == before


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("scope", ["reasoning.write", "reasoning.read"])
def test_every_route_without_the_admin_scope_is_403_and_writes_nothing(
    make_token: Callable[..., str],
    client_for: Callable[[str | None], APIClient],
    targets: dict[str, str],
    route: str,
    scope: str,
) -> None:
    client = client_for(make_token(scope))
    make_request()
    before = state()

    response = call(client, route, targets)

    assert response.status_code == 403, response.content
    assert "reasoning.admin" in response.json()["detail"]
    assert state() == before


def test_a_revoked_admin_token_is_401(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    client = client_for(make_token("reasoning.admin", name="revoked-operator"))
    ApiToken.objects.filter(name="revoked-operator").update(revoked_at=NOW)
    make_request()
    before = state()

    assert client.post(NEXT_URL, format="json").status_code == 401
    assert state() == before


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", DEEPER_URL),
        ("get", NEXT_URL),
        ("get", "/admin/v1/reasoning/research/backlog/00000000-0000-0000-0000-000000000001/complete"),
        ("post", BACKLOG_URL),
        ("delete", REVIEWS_URL),
        ("delete", f"{REVIEWS_URL}/00000000-0000-0000-0000-000000000001"),
    ],
)
def test_other_methods_are_405_and_write_nothing(operator: APIClient, method: str, url: str) -> None:
    make_request()
    before = state()

    response = getattr(operator, method)(url)

    assert response.status_code == 405
    assert state() == before


# --- Free text at rest and in the trail ---------------------------------------------------


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


def test_the_curator_note_is_encrypted_at_rest(operator: APIClient) -> None:
    entry = operator.post(REVIEWS_URL, {"claim_id": "claim-42"}, format="json").json()
    response = operator.patch(review_url(entry["id"]), {"status": "resolved", "note": NOTE}, format="json")
    assert response.status_code == 200

    (stored,) = raw_column("SELECT resolution_note FROM claim_review")
    whole_row = "\n".join(raw_column("SELECT c::text FROM claim_review AS c"))

    assert stored.strip()
    assert stored != NOTE
    for secret in (NOTE, "Wilhelmina", "Quixote", "transposed"):
        assert secret not in stored
        assert secret not in whole_row
    assert "claim-42" in whole_row
    assert ClaimReview.objects.get().resolution_note == NOTE


def test_a_whole_loop_leaves_exact_audit_actions_and_no_free_text(operator: APIClient, flow: dict[str, Any]) -> None:
    first_event = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0

    kept = operator.post(DEEPER_URL, {"trigger_type": "user_question", "question": QUESTION}, format="json").json()
    failed = operator.post(DEEPER_URL, {"trigger_type": "user_question", "question": QUESTION}, format="json").json()
    operator.post(NEXT_URL, format="json")
    operator.post(NEXT_URL, format="json")
    operator.post(complete_url(kept["id"]), {"flow_id": flow["id"]}, format="json")
    operator.post(complete_url(failed["id"]), {"error": "no_sources_found"}, format="json")
    operator.get(BACKLOG_URL)
    review = operator.post(REVIEWS_URL, {"claim_id": "claim-42"}, format="json").json()
    operator.post(REVIEWS_URL, {"claim_id": "claim-42"}, format="json")
    operator.patch(review_url(review["id"]), {"status": "resolved", "note": NOTE}, format="json")
    operator.get(REVIEWS_URL)

    actions = list(AuditEvent.objects.filter(id__gt=first_event).order_by("id").values_list("action", flat=True))
    assert actions == [
        CREATED,
        CREATED,
        DISPATCHED,
        DISPATCHED,
        COMPLETED,
        FAILED_VOLUNTARY,
        BACKLOG_READ,
        MARKED,
        RESOLVED,
        LISTED,
    ]
    trail = audit_trail_text()
    for secret in (QUESTION, NOTE, "Zebulon", "Quixote", "Wilhelmina"):
        assert secret not in trail


# --- Concurrency: exclusive FIFO claims ---------------------------------------------------


def run_together(workers: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(n)`` in ``workers`` threads released at once; each thread closes its own connection."""
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            work(n)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def make_pending_rows(count: int) -> set[str]:
    start = NOW - timedelta(days=1)
    rows = ResearchRequest.objects.bulk_create(
        ResearchRequest(
            trigger_type="user_question",
            question=f"{QUESTION} #{n}",
            reason=ResearchRequest.Reason.OPERATOR_REQUESTED,
            source="operator",
            requested_by=OPERATOR,
            created_at=start + timedelta(seconds=n),
        )
        for n in range(count)
    )
    return {str(row.pk) for row in rows}


@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_pullers_claim_each_of_200_rows_exactly_once() -> None:
    # Real commits; each thread has its own database connection (Django's are per thread).
    workers = 8
    created = make_pending_rows(200)
    claimed: list[list[str]] = [[] for _ in range(workers)]

    def pull_until_empty(n: int) -> None:
        while (row := services.pull_next(actor=f"system:puller-{n}")) is not None:
            assert row.status == "dispatched"
            claimed[n].append(str(row.pk))

    errors = run_together(workers, pull_until_empty)

    assert errors == []
    every_claim = [request_id for claims in claimed for request_id in claims]
    assert len(every_claim) == 200
    assert len(set(every_claim)) == 200  # no duplicates
    assert set(every_claim) == created  # no losses
    assert ResearchRequest.objects.filter(status="dispatched", dispatched_at__isnull=False).count() == 200
    assert not ResearchRequest.objects.pending().exists()
    # Each row's single dispatch event names the puller that got it.
    trail = events(DISPATCHED)
    assert len(trail) == 200
    claimed_by = {request_id: f"system:puller-{n}" for n, claims in enumerate(claimed) for request_id in claims}
    assert {event.target_id: event.actor for event in trail} == claimed_by
    # Each puller took its rows oldest first.
    created_at = {str(pk): at for pk, at in ResearchRequest.objects.values_list("pk", "created_at")}
    for claims in claimed:
        assert [created_at[request_id] for request_id in claims] == sorted(created_at[r] for r in claims)


@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_dispatchers_pull_through_the_route_without_sharing_a_row(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    workers = 8
    raw = make_token("reasoning.admin", name="dispatcher")
    created = make_pending_rows(80)
    claimed: list[list[str]] = [[] for _ in range(workers)]
    nulls = [0] * workers

    def pull_until_empty(n: int) -> None:
        client = client_for(raw)
        while True:
            response = client.post(NEXT_URL, {}, format="json")
            assert response.status_code == 200, response.content
            request = response.json()["request"]
            if request is None:
                nulls[n] += 1
                return
            assert request["status"] == "dispatched"
            claimed[n].append(request["id"])

    errors = run_together(workers, pull_until_empty)

    assert errors == []
    assert nulls == [1] * workers
    every_claim = [request_id for claims in claimed for request_id in claims]
    assert len(every_claim) == len(set(every_claim)) == 80
    assert set(every_claim) == created
    assert set(ResearchRequest.objects.values_list("status", flat=True)) == {"dispatched"}
    assert len(events(DISPATCHED)) == 80


@pytest.mark.django_db(transaction=True)
def test_eight_concurrent_marks_of_one_claim_create_one_entry(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    workers = 8
    raw = make_token("reasoning.admin", name="critic")
    answers: list[tuple[int, str]] = []

    def mark(n: int) -> None:
        response = client_for(raw).post(REVIEWS_URL, {"claim_id": "claim-contended"}, format="json")
        answers.append((response.status_code, response.json()["id"]))

    errors = run_together(workers, mark)

    assert errors == []
    assert sorted(status for status, _ in answers) == [200] * (workers - 1) + [201]
    entry = ClaimReview.objects.get()
    assert {review_id for _, review_id in answers} == {str(entry.pk)}
    assert len(events(MARKED)) == 1
