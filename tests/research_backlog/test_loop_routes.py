"""Every route of the loop: authentication, scope and methods; the audit trail of a whole loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ApiToken
from tests.conftest import audit_trail_text
from tests.factories import NOW, QUESTION, make_request, make_review
from tests.research_backlog.support import (
    BACKLOG_READ,
    BACKLOG_URL,
    COMPLETED,
    CREATED,
    DEEPER_URL,
    DISPATCHED,
    FAILED_VOLUNTARY,
    LISTED,
    MARKED,
    NEXT_URL,
    NOTE,
    RESOLVED,
    REVIEWS_URL,
    complete_url,
    review_url,
    state,
)

pytestmark = pytest.mark.django_db


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
