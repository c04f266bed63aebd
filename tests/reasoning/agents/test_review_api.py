"""``GET /admin/v1/reasoning/agents/{agent}/review``: an agent's incorrect decisions for a 1:1 review."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.outcomes import services as outcomes_services
from reasoning.recording import services as recording_services
from tests.factories import ACTOR, make_flow
from tests.schema_check import assert_matches_schema

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SECRET_THOUGHT = "raw chain of thought nobody may read here"
SECRET_INPUT = "input value nobody may read here"


def url(agent: str = "critic") -> str:
    return f"/admin/v1/reasoning/agents/{agent}/review"


def step(kind: str = "retrieval", **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "agent": "critic", "summary_text": f"A {kind} step", **fields}


def judged(
    correct: bool | None = False,
    *,
    at: datetime = T0,
    steps: Sequence[dict[str, Any]] = (step(),),
    agent: str = "critic",
    trigger_type: str = "lab_result",
) -> str:
    """A closed flow of ``agent`` whose outcome was recorded at ``at`` as ``correct``."""
    flow_id = make_flow(steps=steps, agent=agent, trigger_type=trigger_type)
    with time_machine.travel(at, tick=False):
        outcomes_services.record_outcome(flow_id, "follow_up_not_needed", correct, actor=ACTOR)
    return str(flow_id)


def decisions(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [decision for group in body["groups"] for decision in group["decisions"]]


def only_decision(operator: APIClient) -> dict[str, Any]:
    response = operator.get(url())
    assert response.status_code == 200, response.content
    (decision,) = decisions(response.json())
    return decision


def templates(decision: dict[str, Any]) -> list[str]:
    return [question["template"] for question in decision["questions"]]


# --- What is listed, and in which order -----------------------------------------------------


def test_lists_only_the_agents_incorrect_decisions(operator: APIClient) -> None:
    wrong = judged(False)
    judged(True)
    judged(None)
    make_flow(agent="critic")  # no outcome yet
    judged(False, agent="researcher")

    body = operator.get(url()).json()

    assert body["agent"] == "critic"
    assert [decision["id"] for decision in decisions(body)] == [wrong]


def test_decisions_come_newest_judgement_first(operator: APIClient) -> None:
    # Opened in this order, judged in the reverse one: the judgement orders the review.
    first, second, third = (judged(False, at=T0 + timedelta(hours=h)) for h in (3, 1, 2))

    body = operator.get(url()).json()

    assert [decision["id"] for decision in decisions(body)] == [first, third, second]


def test_groups_by_decision_type_in_the_order_of_their_newest_decision(operator: APIClient) -> None:
    lab_old = judged(False, at=T0, trigger_type="lab_result")
    question = judged(False, at=T0 + timedelta(hours=1), trigger_type="user_question")
    lab_new = judged(False, at=T0 + timedelta(hours=2), trigger_type="lab_result")

    groups = operator.get(url()).json()["groups"]

    assert [(g["decision_type"], g["count"]) for g in groups] == [("lab_result", 2), ("user_question", 1)]
    assert [d["id"] for d in groups[0]["decisions"]] == [lab_new, lab_old]
    assert [d["id"] for d in groups[1]["decisions"]] == [question]


def test_an_agent_without_incorrect_decisions_has_no_groups(operator: APIClient) -> None:
    judged(True)

    response = operator.get(url("nobody"))

    assert response.status_code == 200
    assert response.json() == {"agent": "nobody", "since": None, "groups": []}


@pytest.mark.parametrize(
    ("since", "expected"),
    [
        pytest.param("2026-03-02", ["day2", "day3"], id="a-date-is-its-midnight"),
        pytest.param("2026-03-02T12:00:00Z", ["day2", "day3"], id="inclusive"),
        pytest.param("2026-03-02T12:00:00.000001+00:00", ["day3"], id="after"),
        pytest.param("2026-03-02T13:00:00+02:00", ["day2", "day3"], id="an-offset"),
    ],
)
def test_since_keeps_decisions_judged_at_or_after_it(operator: APIClient, since: str, expected: list[str]) -> None:
    ids = {f"day{n}": judged(False, at=datetime(2026, 3, n, 12, 0, tzinfo=UTC)) for n in (1, 2, 3)}

    body = operator.get(url(), {"since": since}).json()

    assert {d["id"] for d in decisions(body)} == {ids[name] for name in expected}
    assert body["since"] is not None


def test_limit_and_cursor_page_through_every_decision_once(operator: APIClient) -> None:
    made = [judged(False, at=T0 + timedelta(minutes=n)) for n in range(5)]

    seen: list[str] = []
    query: dict[str, Any] = {"limit": 2}
    pages = 0
    while True:
        response = operator.get(url(), query)
        assert response.status_code == 200
        seen += [d["id"] for d in decisions(response.json())]
        pages += 1
        if "X-Next-Cursor" not in response:
            break
        assert 'rel="next"' in response["Link"]
        query = {"limit": 2, "cursor": response["X-Next-Cursor"]}

    assert pages == 3
    assert seen == made[::-1]


# --- Each decision: its timeline, never raw reasoning or inputs -----------------------------


def test_each_decision_carries_its_step_timeline(operator: APIClient) -> None:
    judged(
        steps=[
            step("llm_prompt", confidence=0.9, latency_ms=120, rationale="Compared with the guideline"),
            step("retrieval", started_at="2026-03-01T08:00:00Z"),  # began first
        ]
    )

    decision = only_decision(operator)

    assert [(s["position"], s["kind"]) for s in decision["steps"]] == [(2, "retrieval"), (1, "llm_prompt")]
    prompt = decision["steps"][1]
    assert prompt == {
        "position": 1,
        "kind": "llm_prompt",
        "agent": "critic",
        "summary_text": "A llm_prompt step",
        "rationale": "Compared with the guideline",
        "confidence": 0.9,
        "latency_ms": 120,
        "started_at": None,
    }
    assert decision["outcome"] == "follow_up_not_needed"


def test_the_body_holds_no_raw_reasoning_inputs_or_outputs(operator: APIClient) -> None:
    judged(
        steps=[
            step(
                reasoning_content=SECRET_THOUGHT,
                inputs={"note": SECRET_INPUT},
                outputs={"answer": SECRET_INPUT},
                pii_fields=["note"],
            )
        ]
    )

    response = operator.get(url())

    text = response.content.decode()
    assert response.status_code == 200
    assert SECRET_THOUGHT not in text
    assert SECRET_INPUT not in text
    for key in ("reasoning_content", "inputs", "outputs", "pii_fields"):
        assert f'"{key}"' not in text


# --- Questions ------------------------------------------------------------------------------


def test_a_confident_wrong_decision_asks_about_its_evidence(operator: APIClient) -> None:
    judged(steps=[step(confidence=0.92)])

    (question, *_) = only_decision(operator)["questions"]

    assert question == {
        "template": "high_confidence",
        "text": "Confidence was 0.92 on a decision recorded incorrect: what evidence supported it?",
    }


def test_confidence_below_the_threshold_is_not_asked_about(operator: APIClient) -> None:
    judged(steps=[step(confidence=0.79)])

    assert "high_confidence" not in templates(only_decision(operator))


def test_no_retrieval_step_asks_what_the_decision_was_based_on(operator: APIClient) -> None:
    judged(steps=[step("llm_prompt"), step("decision")])

    decision = only_decision(operator)

    assert decision["questions"][0] == {
        "template": "no_retrieval",
        "text": "No retrieval step preceded the verdict (step #2, decision): what was the decision based on?",
    }


def test_a_retrieval_step_is_not_asked_about(operator: APIClient) -> None:
    judged(steps=[step("retrieval"), step("decision")])

    assert "no_retrieval" not in templates(only_decision(operator))


def test_the_slowest_step_is_asked_about_when_slow(operator: APIClient) -> None:
    judged(steps=[step(latency_ms=300), step("llm_prompt", latency_ms=4200), step("decision", latency_ms=4200)])

    (question,) = only_decision(operator)["questions"]

    assert question == {
        "template": "slowest_step",
        "text": "Step #2 (llm_prompt) took 4.2 s, the slowest: did it time out or retry?",
    }


def test_a_quick_flow_is_not_asked_about_its_slowest_step(operator: APIClient) -> None:
    judged(steps=[step(latency_ms=1999), step("decision")])

    assert "slowest_step" not in templates(only_decision(operator))


def merged_flow(operator: APIClient, branches: int) -> dict[str, Any]:
    """A flow of ``branches`` retrievals merged by a decision step, judged incorrect."""
    flow_id = make_flow(steps=[], agent="critic", close=False)
    firsts = [recording_services.add_step(flow_id, step(), actor=ACTOR)[0].pk for _ in range(branches)]
    recording_services.add_step(
        flow_id,
        step("decision", parent_step_id=firsts[0], extra_parent_ids=firsts[1:]),
        actor=ACTOR,
    )
    recording_services.close_flow(flow_id, state="completed", actor=ACTOR, outcome_type="answered")
    outcomes_services.record_outcome(flow_id, "wrong_answer", False, actor=ACTOR)
    return only_decision(operator)


def test_merged_branches_ask_which_carried_the_decision(operator: APIClient) -> None:
    decision = merged_flow(operator, 3)

    assert decision["questions"] == [
        {"template": "merged_branches", "text": "Step #4 merged 3 branches: which branch carried the decision?"}
    ]


def test_a_single_parent_is_not_a_merge(operator: APIClient) -> None:
    decision = merged_flow(operator, 1)

    assert templates(decision) == ["generic"]


def test_at_most_three_questions_in_the_templates_order(operator: APIClient) -> None:
    flow_id = make_flow(steps=[], agent="critic", close=False)
    a = recording_services.add_step(flow_id, step("llm_prompt", confidence=0.95, latency_ms=5000), actor=ACTOR)[0]
    b = recording_services.add_step(flow_id, step("tool_call", confidence=0.9), actor=ACTOR)[0]
    recording_services.add_step(
        flow_id,
        step("decision", confidence=0.9, parent_step_id=a.pk, extra_parent_ids=[b.pk]),
        actor=ACTOR,
    )
    recording_services.close_flow(flow_id, state="completed", actor=ACTOR, outcome_type="answered")
    outcomes_services.record_outcome(flow_id, "wrong_answer", False, actor=ACTOR)

    # All four templates apply; the fourth (merged_branches) is left out.
    assert templates(only_decision(operator)) == ["high_confidence", "no_retrieval", "slowest_step"]


def test_the_generic_question_when_no_template_applies(operator: APIClient) -> None:
    judged(steps=[step("retrieval", confidence=0.5, latency_ms=10)])

    assert only_decision(operator)["questions"] == [
        {
            "template": "generic",
            "text": "The decision was recorded incorrect: which step first went wrong, and what would have made it "
            "right?",
        }
    ]


def test_questions_never_quote_a_summary(operator: APIClient) -> None:
    judged(steps=[step("llm_prompt", summary_text="Weighed the potassium result", confidence=0.9, latency_ms=4000)])

    decision = only_decision(operator)

    assert len(decision["questions"]) == 3
    assert all("potassium" not in question["text"] for question in decision["questions"])


# --- Audit ----------------------------------------------------------------------------------


def test_reading_the_review_is_audited_with_the_agent_and_counts(operator: APIClient) -> None:
    judged(steps=[step(confidence=0.9)])
    judged(trigger_type="user_question")

    operator.get(url(), {"limit": 1})

    event = AuditEvent.objects.get(action="admin.reasoning.agent.review_read")
    assert (event.target_type, event.target_id) == ("reasoning.agent", "critic")
    assert event.payload == {
        "agent": "critic",
        "flow_count": 1,
        "group_count": 1,
        "question_count": 1,
        "next_page": True,
    }


def test_the_review_read_is_a_routine_read() -> None:
    from audit.actions import ROUTINE_READS

    assert "admin.reasoning.agent.review_read" in ROUTINE_READS


# --- Errors ---------------------------------------------------------------------------------


def test_agent_label_with_spaces_is_400_naming_agent(operator: APIClient) -> None:
    response = operator.get(url("the%20critic"))

    assert response.status_code == 400
    assert list(response.json()) == ["agent"]
    assert not AuditEvent.objects.filter(action="admin.reasoning.agent.review_read").exists()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"since": "last week"}, "since"),
        ({"since": "2026-03-01T09:00:00"}, "since"),
        ({"since": "2026-02-30"}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
    ],
)
def test_bad_query_is_400_naming_the_parameter(operator: APIClient, query: dict[str, Any], field: str) -> None:
    judged()

    response = operator.get(url(), query)

    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert not AuditEvent.objects.filter(action="admin.reasoning.agent.review_read").exists()


def test_no_token_is_401(anonymous: APIClient) -> None:
    assert anonymous.get(url()).status_code == 401


def test_agent_token_is_403(agent: APIClient) -> None:
    assert agent.get(url()).status_code == 403


# --- Cost and shape -------------------------------------------------------------------------


@pytest.mark.parametrize("flows", [1, 4])
def test_queries_do_not_grow_with_the_flows_shown(
    operator: APIClient, django_assert_num_queries: Callable[..., Any], flows: int
) -> None:
    for n in range(flows):
        judged(at=T0 + timedelta(minutes=n), steps=[step(), step("decision")])
    operator.get(url("nobody"))  # the token is cached after its first use

    # Expect 5 queries, however many flows: SAVEPOINT (the audited read is atomic, nested in the
    # test's transaction); the page of flows; all their steps; the audit event (with its
    # chainer queue row, one statement); RELEASE SAVEPOINT.
    with django_assert_num_queries(5):
        response = operator.get(url())

    assert len(decisions(response.json())) == flows


def test_body_is_exactly_what_openapi_documents(operator: APIClient) -> None:
    judged(steps=[step(confidence=0.9, latency_ms=2500), step("decision", started_at="2026-03-01T09:30:00Z")])
    schema = APIClient().get("/api/schema/?format=json").json()
    documented = schema["paths"]["/admin/v1/reasoning/agents/{agent}/review"]["get"]["responses"]["200"]
    node = documented["content"]["application/json"]["schema"]

    body = operator.get(url(), {"since": "2026-01-01"}).json()

    assert decisions(body)
    assert_matches_schema(schema, node, body)
    uuid.UUID(decisions(body)[0]["id"])
