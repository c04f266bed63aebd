"""PATCH /admin/v1/reasoning/claims-pending-review/{id}: resolve or dismiss a claim."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from research_backlog.models import ClaimReview
from tests.conftest import audit_trail_text, events
from tests.factories import NOW, make_review
from tests.research_backlog.support import (
    NOTE,
    NOW_JSON,
    OPERATOR,
    RESOLVED,
    REVIEWS_URL,
    raw_column,
    review_url,
    state,
)

pytestmark = pytest.mark.django_db


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
