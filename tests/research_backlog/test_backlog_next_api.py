"""POST /admin/v1/reasoning/research/backlog/next: pull the oldest pending request."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from research_backlog import services
from research_backlog.models import ResearchRequest
from tests.conftest import audit_trail_text, events
from tests.factories import NOW, QUESTION, make_request
from tests.research_backlog.support import DISPATCHED, NEXT_URL, NOW_JSON, OPERATOR, run_together, state

pytestmark = pytest.mark.django_db


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
