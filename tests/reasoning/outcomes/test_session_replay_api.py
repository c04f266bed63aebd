"""GET /admin/v1/reasoning/sessions/{session_id}/replay: a session's decisions as a timeline."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.outcomes import services as outcomes_services
from reasoning.recording import services as recording_services
from tests.factories import ACTOR, make_flow

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ACTION = "admin.reasoning.session.replay_read"
# Distinctive step text and rationale: the replay shows step kinds only.
STEP_TEXT = "Weighed the triage protocol for Quixote"
RATIONALE = "Chain of thought about Zebulon"


def url(session_id: str) -> str:
    return f"/admin/v1/reasoning/sessions/{session_id}/replay"


def step(kind: str, minute: int) -> dict[str, Any]:
    return {
        "kind": kind,
        "agent": "triage",
        "summary_text": STEP_TEXT,
        "rationale": RATIONALE,
        "reasoning_content": RATIONALE,
        "started_at": (T0 + timedelta(minutes=minute)).isoformat(),
    }


@pytest.fixture
def timeline() -> list[uuid.UUID]:
    """Three decisions of session s-1, opened at minutes 2, 0 and 1 (so the timeline is b, c, a)."""
    flows = []
    for minute, kinds in ((2, ["decision"]), (0, ["retrieval", "escalation"]), (1, [])):
        with time_machine.travel(T0 + timedelta(minutes=minute), tick=False):
            flow_id = make_flow(
                steps=[step(kind, minute) for kind in kinds], close=False, session_id="s-1", agent="triage"
            )
            recording_services.close_flow(flow_id, state="completed", actor=ACTOR, outcome_type="escalated")
        flows.append(flow_id)
    outcomes_services.record_outcome(flows[1], "escalated_correctly", True, actor=ACTOR)
    make_flow(session_id="s-2")
    return [flows[1], flows[2], flows[0]]


def test_replay_lists_the_decisions_in_time_order(operator: APIClient, timeline: list[uuid.UUID]) -> None:
    response = operator.get(url("s-1"))

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["session_id"] == "s-1"
    assert [decision["id"] for decision in body["decisions"]] == [str(flow_id) for flow_id in timeline]
    first = body["decisions"][0]
    assert first["step_kinds"] == ["retrieval", "escalation"]
    assert (first["outcome"], first["outcome_correct"]) == ("escalated_correctly", True)
    assert first["outcome_recorded_at"] is not None
    assert (first["trigger_type"], first["agent"], first["flow_state"]) == ("lab_result", "triage", "completed")
    assert first["created_at"] == "2026-03-02T09:00:00Z"
    assert body["decisions"][1]["step_kinds"] == []
    assert body["decisions"][1]["outcome_correct"] is None


def test_replay_shows_no_step_text_rationale_or_reasoning(operator: APIClient, timeline: list[uuid.UUID]) -> None:
    content = operator.get(url("s-1")).content.decode()

    assert "Quixote" not in content
    assert "Zebulon" not in content
    assert "summary" not in content.replace("patient_safe_summary", "")


def test_replay_is_audited_with_the_flow_count(operator: APIClient, timeline: list[uuid.UUID]) -> None:
    operator.get(url("s-1"))

    (event,) = AuditEvent.objects.filter(action=ACTION)
    assert event.actor == "token:operator"
    assert (event.target_type, event.target_id) == ("reasoning.session", "s-1")
    assert event.payload == {"flow_count": 3, "next_page": False}


def test_replay_pages_follow_the_cursor(operator: APIClient, timeline: list[uuid.UUID]) -> None:
    first = operator.get(url("s-1"), {"limit": "2"})
    second = operator.get(url("s-1"), {"limit": "2", "cursor": first["X-Next-Cursor"]})

    ids = [decision["id"] for response in (first, second) for decision in response.json()["decisions"]]
    assert ids == [str(flow_id) for flow_id in timeline]
    assert "X-Next-Cursor" not in second


def test_unknown_session_is_404_and_not_audited(operator: APIClient, timeline: list[uuid.UUID]) -> None:
    response = operator.get(url("no-such-session"))

    assert response.status_code == 404
    assert not AuditEvent.objects.filter(action=ACTION).exists()


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        (url("s" * 101), {}, "session_id"),
        (url("s-1"), {"cursor": "junk"}, "cursor"),
        (url("s-1"), {"limit": "0"}, "limit"),
    ],
    ids=["long-session-id", "bad-cursor", "bad-limit"],
)
def test_bad_input_is_400_naming_it(
    operator: APIClient, timeline: list[uuid.UUID], path: str, params: dict[str, str], field: str
) -> None:
    response = operator.get(path, params)

    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]


def test_replay_needs_the_admin_scope(agent: APIClient, anonymous: APIClient, timeline: list[uuid.UUID]) -> None:
    assert agent.get(url("s-1")).status_code == 403
    assert anonymous.get(url("s-1")).status_code == 401


def test_body_is_exactly_what_openapi_documents(operator: APIClient, timeline: list[uuid.UUID]) -> None:
    from tests.schema_check import assert_matches_schema

    schema = APIClient().get("/api/schema/?format=json").json()
    documented = schema["paths"]["/admin/v1/reasoning/sessions/{session_id}/replay"]["get"]["responses"]["200"]

    assert_matches_schema(schema, documented["content"]["application/json"]["schema"], operator.get(url("s-1")).json())
