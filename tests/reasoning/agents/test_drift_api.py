"""``GET /admin/v1/reasoning/agents/{agent}/drift``: an agent's latest drift reports, for operators."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.agents.drift import SessionStats, judge_agent
from reasoning.agents.services import store_drift_reports
from tests.schema_check import assert_matches_schema

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def url(agent: str) -> str:
    return f"/admin/v1/reasoning/agents/{agent}/drift"


def store(agent: str, sessions: int, *, last_decisions: int = 20) -> None:
    """Reports of ``sessions`` alike sessions of ``agent``, one hour apart, each escalating a
    tenth of its decisions; the last one with ``last_decisions`` decisions (20 like the others
    unless told)."""
    decisions = [20] * (sessions - 1) + [last_decisions]
    stats = [
        SessionStats(
            session_id=f"{agent}-{n}",
            ended_at=T0 + timedelta(hours=n),
            decisions=decisions[n],
            mean_confidence=0.8,
            escalations=decisions[n] // 10,
            correct=9,
            incorrect=1,
            trigger_counts={"user_question": 20},
        )
        for n in range(sessions)
    ]
    store_drift_reports(agent, judge_agent(stats), actor="system:test")


def test_reports_come_newest_session_first_with_signals_and_levels(operator: APIClient) -> None:
    store("critic", 7, last_decisions=10)
    store("researcher", 2)

    response = operator.get(url("critic"))

    assert response.status_code == 200
    body = response.json()
    assert [report["session_id"] for report in body] == [f"critic-{n}" for n in range(6, -1, -1)]
    newest = body[0]
    assert newest["agent"] == "critic"
    assert newest["baseline_sessions"] == 6
    assert newest["decisions"] == 10
    assert newest["level"] == "alert"
    assert newest["session_ended_at"] == (T0 + timedelta(hours=6)).isoformat()
    assert newest["signals"]["decisions"] == {"value": 10.0, "baseline": 20.0, "level": "alert"}
    assert newest["signals"]["confidence"]["level"] == "normal"
    assert body[-1]["level"] == "insufficient_baseline"


def test_limit_and_before_page_through_the_reports(operator: APIClient) -> None:
    store("critic", 5)

    first = operator.get(url("critic"), {"limit": 2}).json()
    second = operator.get(url("critic"), {"limit": 2, "before": first[-1]["session_ended_at"]}).json()

    assert [r["session_id"] for r in first] == ["critic-4", "critic-3"]
    assert [r["session_id"] for r in second] == ["critic-2", "critic-1"]


def test_before_with_an_offset_postgresql_has_no_name_for_still_pages(operator: APIClient) -> None:
    # Found by the fuzzer: ISO 8601 allows -22:40; PostgreSQL refuses offsets past ±15:59 (a 500).
    store("critic", 3)
    newest = operator.get(url("critic"), {"limit": 1}).json()[0]["session_ended_at"]
    far_west = datetime.fromisoformat(newest).astimezone(timezone(-timedelta(hours=22, minutes=40)))

    response = operator.get(url("critic"), {"before": far_west.isoformat()})

    assert response.status_code == 200
    assert [r["session_id"] for r in response.json()] == ["critic-1", "critic-0"]


def test_unknown_agent_is_an_empty_list(operator: APIClient) -> None:
    store("critic", 2)

    response = operator.get(url("nobody"))

    assert response.status_code == 200
    assert response.json() == []


def test_agent_label_with_spaces_is_400_naming_agent(operator: APIClient) -> None:
    response = operator.get(url("the%20critic"))

    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["agent"]
    assert "label" in body["agent"][0]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"before": "yesterday"}, "before"),
        ({"before": "2026-03-01T00:00:00"}, "before"),
    ],
)
def test_bad_paging_is_400_naming_the_parameter(operator: APIClient, query: dict[str, Any], field: str) -> None:
    response = operator.get(url("critic"), query)

    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_no_token_is_401(anonymous: APIClient) -> None:
    assert anonymous.get(url("critic")).status_code == 401


def test_agent_token_is_403(agent: APIClient) -> None:
    assert agent.get(url("critic")).status_code == 403


def test_reading_drift_is_not_audited(operator: APIClient) -> None:
    store("critic", 2)
    before = AuditEvent.objects.count()

    assert operator.get(url("critic")).status_code == 200

    assert AuditEvent.objects.count() == before


def test_one_query_whatever_the_number_of_reports(
    operator: APIClient, django_assert_num_queries: Callable[..., Any]
) -> None:
    store("critic", 12)
    operator.get(url("critic"))  # the token is cached after its first use

    # Expect 1 query: the agent's reports, newest first, limited.
    with django_assert_num_queries(1):
        response = operator.get(url("critic"))

    assert len(response.json()) == 12


def test_body_is_exactly_what_openapi_documents(operator: APIClient) -> None:
    store("critic", 6)
    schema = APIClient().get("/api/schema/?format=json").json()
    documented = schema["paths"]["/admin/v1/reasoning/agents/{agent}/drift"]["get"]["responses"]["200"]
    node = documented["content"]["application/json"]["schema"]

    assert "$ref" in node["items"]
    assert_matches_schema(schema, node, operator.get(url("critic")).json())
