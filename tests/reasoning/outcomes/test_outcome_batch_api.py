"""POST /api/reasoning/outcomes: many outcomes in one request, each item on its own."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow
from tests.factories import make_flow

pytestmark = pytest.mark.django_db

URL = "/api/reasoning/outcomes"
ACTION = "reasoning.flow.outcome_recorded"


def item(flow_id: object, outcome: str = "follow_up_booked", correct: bool | None = True) -> dict[str, Any]:
    return {"flow_id": str(flow_id), "outcome": outcome, "correct": correct}


def test_all_recorded_is_200(agent: APIClient) -> None:
    first, second = make_flow(), make_flow(abort_reason="timeout")

    response = agent.post(URL, {"outcomes": [item(first), item(second, "no_reply", None)]}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["recorded"], body["rejected"]) == (2, 0)
    assert [answer["status"] for answer in body["outcomes"]] == ["recorded", "recorded"]
    assert ReasoningFlow.objects.get(pk=second).outcome == "no_reply"
    assert AuditEvent.objects.filter(action=ACTION).count() == 2


def test_items_are_independent_and_each_refusal_says_why(agent: APIClient) -> None:
    good, recorded, active = make_flow(), make_flow(), make_flow(close=False)
    assert agent.post(URL, {"outcomes": [item(recorded)]}, format="json").status_code == 200
    events_before = AuditEvent.objects.filter(action=ACTION).count()
    unknown = uuid.uuid4()

    response = agent.post(
        URL,
        {
            "outcomes": [
                item(good),
                item(unknown),
                item(active),
                item(recorded, "changed_mind", False),
                item(good, "again"),
                {"flow_id": str(make_flow()), "outcome": "x", "correct": "yes"},
                item(make_flow(), "Sent to zebulon.quixote@example.com"),
                {"outcome": "x", "correct": True},
            ]
        },
        format="json",
    )

    assert response.status_code == 207, response.content
    body = response.json()
    reasons = [answer["reason"] for answer in body["outcomes"]]
    assert reasons == [
        "",
        "not_found",
        "flow_active",
        "already_recorded",
        "duplicate",
        "invalid",
        "unsafe_outcome",
        "invalid",
    ]
    assert (body["recorded"], body["rejected"]) == (1, 7)
    answers = body["outcomes"]
    assert answers[1]["flow_id"] == str(unknown)
    assert list(answers[5]["errors"]) == ["outcomes[5].correct"]
    assert "rule: email" in answers[6]["errors"]["outcomes[6].outcome"][0]
    assert "zebulon" not in response.content.decode()
    assert answers[7]["flow_id"] is None
    assert list(answers[7]["errors"]) == ["outcomes[7].flow_id"]
    assert ReasoningFlow.objects.get(pk=good).outcome == "follow_up_booked"
    assert ReasoningFlow.objects.get(pk=recorded).outcome_correct is True
    assert ReasoningFlow.objects.get(pk=active).outcome_recorded_at is None
    assert AuditEvent.objects.filter(action=ACTION).count() == events_before + 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "detail"),
        ({}, "outcomes"),
        ({"outcomes": []}, "outcomes"),
        ({"outcomes": "all"}, "outcomes"),
        ({"outcomes": [item(uuid.uuid4())] * 1001}, "outcomes"),
        ({"outcomes": [item(uuid.uuid4())], "dry_run": True}, "dry_run"),
    ],
    ids=["not-an-object", "no-outcomes", "empty", "not-a-list", "too-many", "unknown-field"],
)
def test_bad_envelope_is_400(agent: APIClient, body: Any, field: str) -> None:
    response = agent.post(URL, body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()


def test_wrong_scope_is_403_and_no_token_is_401(reader: APIClient, anonymous: APIClient) -> None:
    body = {"outcomes": [item(make_flow())]}

    assert reader.post(URL, body, format="json").status_code == 403
    assert anonymous.post(URL, body, format="json").status_code == 401
    assert not AuditEvent.objects.filter(action=ACTION).exists()


def test_a_fixed_number_of_queries_whatever_the_number_of_items(
    agent: APIClient, django_assert_num_queries: Callable[..., Any]
) -> None:
    one = [item(make_flow())]
    five = [item(make_flow()) for _ in range(5)]
    # The token is cached from here on, and the write rate limit's lease taken (core.throttling:
    # the first request counted 25 at once; the next ones ask nothing).
    agent.post(URL, {"outcomes": [item(uuid.uuid4())]}, format="json")

    # Expect 5 queries, however many items: SAVEPOINT (the durable transaction, nested in the
    # test's); the flows, locked in id order; the conditional UPDATE; the audit events with their
    # chainer queue rows (one statement); RELEASE SAVEPOINT.
    for items in (one, five):
        with django_assert_num_queries(5):
            response = agent.post(URL, {"outcomes": items}, format="json")
        assert response.json()["recorded"] == len(items)


def test_body_is_exactly_what_openapi_documents(agent: APIClient) -> None:
    from tests.schema_check import assert_matches_schema

    schema = APIClient().get("/api/schema/?format=json").json()
    documented = schema["paths"][URL]["post"]["responses"]["207"]["content"]["application/json"]["schema"]
    response = agent.post(URL, {"outcomes": [item(make_flow()), item(uuid.uuid4())]}, format="json")

    assert response.status_code == 207
    assert_matches_schema(schema, documented, response.json())
