"""POST /admin/v1/reasoning/claims-pending-review: mark a claim for review."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from research_backlog.models import ClaimReview
from tests.conftest import events
from tests.factories import make_review
from tests.research_backlog.support import MARKED, NOW_JSON, OPERATOR, REVIEWS_URL, review_url, run_together, state

pytestmark = pytest.mark.django_db


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
