"""GET /admin/v1/reasoning/sessions/{session_id} and GET /admin/v1/reasoning/sessions: summaries."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.outcomes import services as outcomes_services
from reasoning.outcomes.sessions import session_summaries
from reasoning.recording import services as recording_services
from tests.factories import ACTOR, make_flow

pytestmark = pytest.mark.django_db

URL = "/admin/v1/reasoning/sessions"
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def step(confidence: float | None = None, kind: str = "retrieval", agent: str = "triage") -> dict[str, Any]:
    return {"kind": kind, "agent": agent, "summary_text": "Reviewed the request", "confidence": confidence}


def decision(
    session_id: str,
    minute: int,
    *,
    agent: str = "triage",
    trigger_type: str = "signal_evaluation",
    steps: Sequence[Mapping[str, Any]] = (),
    outcome_type: str = "recommendation_delivered",
    aborted: bool = False,
    correct: bool | str | None = "none",
) -> uuid.UUID:
    """A flow of ``session_id`` opened ``minute`` minutes after T0 and closed; its outcome
    recorded with ``correct`` unless that is "none" (no outcome)."""
    with time_machine.travel(T0 + timedelta(minutes=minute), tick=False):
        flow_id = make_flow(steps=steps, close=False, session_id=session_id, agent=agent, trigger_type=trigger_type)
        if aborted:
            recording_services.close_flow(flow_id, state="aborted", actor=ACTOR, abort_reason="timeout")
        else:
            recording_services.close_flow(flow_id, state="completed", actor=ACTOR, outcome_type=outcome_type)
    if correct != "none":
        assert not isinstance(correct, str)
        outcomes_services.record_outcome(flow_id, "observed", correct, actor=ACTOR)
    return flow_id


@pytest.fixture
def session() -> str:
    """Five decisions: two judged (one right, one wrong), one recorded as unknown, two escalations."""
    decision("s-1", 0, steps=[step(0.9)], correct=True)
    decision("s-1", 1, steps=[step(0.7), step(0.95)], correct=False)
    decision("s-1", 2, trigger_type="escalation_decision", steps=[step(0.5, kind="escalation")], correct=None)
    decision("s-1", 3, agent="critic", aborted=True)
    decision("s-1", 4, trigger_type="escalation_decision", outcome_type="escalated")
    # Not part of it: another session, and a flow without one.
    decision("s-2", 5, agent="critic", steps=[step(0.1)], correct=False)
    decision("", 6, correct=True)
    return "s-1"


def test_summary_counts_the_session_decisions(operator: APIClient, session: str) -> None:
    response = operator.get(f"{URL}/{session}")

    assert response.status_code == 200, response.content
    assert response.json() == {
        "session_id": "s-1",
        "agent": "triage",
        "agents": ["triage", "critic"],
        "total_decisions": 5,
        "with_outcome": 3,
        "correct": 1,
        "incorrect": 1,
        # correct / (correct + incorrect): the outcome recorded as unknown does not count as wrong.
        "accuracy": 0.5,
        "decision_types": {"escalation_decision": 2, "signal_evaluation": 3},
        "first_at": "2026-03-02T09:00:00Z",
        "last_at": "2026-03-02T09:04:00Z",
        # Of the flows' outcome confidences (each the flow's weakest step): 0.9, 0.7, 0.5.
        "mean_confidence": pytest.approx(0.7),
        "escalations": 2,
        # No step reported model usage: unknown, not zero.
        "input_tokens": None,
        "output_tokens": None,
        "cost_usd": None,
    }


def test_summary_without_judged_outcomes_has_null_accuracy_and_confidence(operator: APIClient) -> None:
    decision("quiet", 0, correct=None)

    body = operator.get(f"{URL}/quiet").json()

    assert (body["with_outcome"], body["accuracy"], body["mean_confidence"]) == (1, None, None)


def test_session_summaries_is_the_shared_contract(session: str) -> None:
    summaries = session_summaries(["s-1", "s-2", "unknown", ""])

    assert set(summaries) == {"s-1", "s-2"}
    assert summaries["s-1"].accuracy == 0.5
    assert summaries["s-2"].agent == "critic"
    assert summaries["s-2"].incorrect == 1


def test_unknown_session_is_404(operator: APIClient, session: str) -> None:
    response = operator.get(f"{URL}/no-such-session")

    assert response.status_code == 404
    assert "detail" in response.json()


def test_session_id_longer_than_100_characters_is_400_naming_it(operator: APIClient) -> None:
    response = operator.get(f"{URL}/{'s' * 101}")

    assert response.status_code == 400
    assert list(response.json()) == ["session_id"]


def test_summary_needs_the_admin_scope(agent: APIClient, anonymous: APIClient, session: str) -> None:
    assert agent.get(f"{URL}/{session}").status_code == 403
    assert anonymous.get(f"{URL}/{session}").status_code == 401


def test_summary_is_not_audited(operator: APIClient, session: str) -> None:
    before = AuditEvent.objects.count()

    operator.get(f"{URL}/{session}")
    operator.get(URL)

    assert AuditEvent.objects.count() == before


# --- The list ------------------------------------------------------------------------------------


@pytest.fixture
def three_sessions() -> list[str]:
    """Sessions whose last decisions are at minutes 9 (b), 5 (a) and 7 (c): newest first b, c, a."""
    decision("a", 0)
    decision("a", 5, agent="critic")
    decision("b", 1)
    decision("b", 9)
    decision("c", 7, agent="correlator")
    return ["b", "c", "a"]


def ids(response: Any) -> list[str]:
    return [summary["session_id"] for summary in response.json()]


def test_list_is_newest_last_decision_first(operator: APIClient, three_sessions: list[str]) -> None:
    response = operator.get(URL)

    assert response.status_code == 200, response.content
    assert ids(response) == three_sessions
    assert response.json()[2]["total_decisions"] == 2
    assert "X-Next-Cursor" not in response


def test_agent_filter_keeps_sessions_the_agent_took_part_in(operator: APIClient, three_sessions: list[str]) -> None:
    response = operator.get(URL, {"agent": "critic"})

    assert ids(response) == ["a"]
    # The summary still covers the whole session, not only the critic's decisions.
    assert response.json()[0]["agents"] == ["critic", "triage"]
    assert response.json()[0]["total_decisions"] == 2


def test_an_empty_agent_filter_keeps_every_session(operator: APIClient, three_sessions: list[str]) -> None:
    # A filter form's empty field, as the schema documents (the fuzzer sent it).
    response = operator.get(URL, {"agent": ""})

    assert response.status_code == 200, response.content
    assert ids(response) == three_sessions


def test_pages_follow_the_cursor_to_the_end(operator: APIClient, three_sessions: list[str]) -> None:
    seen: list[str] = []
    params: dict[str, str] = {"limit": "1"}
    for _ in range(5):
        response = operator.get(URL, params)
        seen += ids(response)
        if "X-Next-Cursor" not in response:
            break
        assert 'rel="next"' in response["Link"]
        params["cursor"] = response["X-Next-Cursor"]

    assert seen == three_sessions


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"agent": "a critic"}, "agent"),
        ({"agent": "x" * 101}, "agent"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"limit": "201"}, "limit"),
    ],
    ids=["agent-sentence", "agent-too-long", "bad-cursor", "limit-zero", "limit-too-big"],
)
def test_bad_query_is_400_naming_the_parameter(operator: APIClient, params: dict[str, str], field: str) -> None:
    response = operator.get(URL, params)

    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]


def test_list_needs_the_admin_scope(agent: APIClient, anonymous: APIClient) -> None:
    assert agent.get(URL).status_code == 403
    assert anonymous.get(URL).status_code == 401


@pytest.mark.parametrize("sessions", [1, 6])
def test_list_runs_one_aggregate_query_whatever_the_number_of_sessions(
    operator: APIClient, django_assert_num_queries: Callable[..., Any], sessions: int
) -> None:
    for n in range(sessions):
        decision(f"s-{n}", n, steps=[step(0.8, kind="escalation")], correct=True)
        decision(f"s-{n}", n + 1, trigger_type="escalation_decision")

    # Expect 2 queries, however many sessions and flows: the token lookup, then the page of
    # sessions with their summaries (one statement).
    with django_assert_num_queries(2):
        response = operator.get(URL)

    assert len(response.json()) == sessions
    assert all(summary["escalations"] == 1 for summary in response.json())


def test_bodies_are_exactly_what_openapi_documents(operator: APIClient, session: str) -> None:
    from tests.schema_check import assert_matches_schema

    schema = APIClient().get("/api/schema/?format=json").json()
    detail = schema["paths"]["/admin/v1/reasoning/sessions/{session_id}"]["get"]["responses"]["200"]
    listed = schema["paths"]["/admin/v1/reasoning/sessions"]["get"]["responses"]["200"]

    assert_matches_schema(schema, detail["content"]["application/json"]["schema"], operator.get(f"{URL}/s-1").json())
    assert_matches_schema(schema, listed["content"]["application/json"]["schema"], operator.get(URL).json())
