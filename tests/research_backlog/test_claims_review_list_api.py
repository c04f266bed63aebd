"""GET /admin/v1/reasoning/claims-pending-review: pending entries and recent resolutions."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from rest_framework.test import APIClient

from research_backlog.models import ClaimReview
from tests.conftest import audit_trail_text, events
from tests.factories import NOW, make_review
from tests.research_backlog.support import LISTED, NOTE, OPERATOR, REVIEWS_URL, ids, review_url, state

pytestmark = pytest.mark.django_db


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
