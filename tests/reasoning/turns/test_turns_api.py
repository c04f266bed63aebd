"""GET /admin/v1/reasoning/turns/{trace_id}: every flow of one agent turn as one graph."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow
from reasoning.turns.graph import MAX_TURN_FLOWS, MAX_TURN_STEPS
from tests import factories
from tests.factories import NOW

pytestmark = pytest.mark.django_db

TRACE = "turn-7f3a"
COT_SECRET = "COT-SECRET-8812"
CLAIM = "claim-2231"


def turn_url(trace_id: str) -> str:
    return f"/admin/v1/reasoning/turns/{trace_id}"


def step(summary: str, agent: str, **fields: Any) -> dict[str, Any]:
    return {"id": uuid.uuid4(), "kind": "retrieval", "agent": agent, "summary_text": summary, **fields}


def make_turn(trace_id: str = TRACE) -> dict[str, Any]:
    """Three flows of one turn, two agents, a minute apart: the researcher's (a chain and a merge,
    its last step writing a claim), the critic's (judging that claim), and a second researcher flow
    started by the critic's (its trigger_ref is the critic's flow id). Plus a flow of another trace."""
    r1 = step("Retrieved guidelines", "researcher")
    r2 = step("Retrieved labs", "researcher", parent_step_id=r1["id"])
    r3 = step("Wrote the claim", "researcher", parent_step_id=r2["id"], extra_parent_ids=[r1["id"]])
    r3["memory_claim_ref"] = CLAIM
    c1 = step("Judged the claim", "critic", kind="verdict", memory_claim_ref=CLAIM, reasoning_content=COT_SECRET)
    f1 = step("Looked for more evidence", "researcher")
    with time_machine.travel(NOW, tick=False):
        researcher = factories.make_flow(steps=[r1, r2, r3], trace_id=trace_id, agent="researcher")
    with time_machine.travel(NOW + timedelta(minutes=1), tick=False):
        critic = factories.make_flow(steps=[c1], trace_id=trace_id, agent="critic", trigger_type="claim")
    with time_machine.travel(NOW + timedelta(minutes=2), tick=False):
        follow_up = factories.make_flow(steps=[f1], trace_id=trace_id, agent="researcher", trigger_ref=str(critic))
    factories.make_flow(trace_id="another-turn")
    return {
        "flows": [researcher, critic, follow_up],
        "steps": {"r1": r1["id"], "r2": r2["id"], "r3": r3["id"], "c1": c1["id"], "f1": f1["id"]},
    }


def edges(body: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {(e["from"], e["to"], e["kind"], e["reason"]) for e in body["graph"]["edges"]}


def test_turn_returns_every_flow_of_the_trace_in_time_order(operator: APIClient) -> None:
    turn = make_turn()

    response = operator.get(turn_url(TRACE))

    assert response.status_code == 200
    body = response.json()
    assert body["trace_id"] == TRACE
    assert body["truncated"] is False
    assert [flow["id"] for flow in body["flows"]] == [str(f) for f in turn["flows"]]
    assert [flow["agent"] for flow in body["flows"]] == ["researcher", "critic", "researcher"]
    assert [len(flow["steps"]) for flow in body["flows"]] == [3, 1, 1]
    clusters = body["graph"]["clusters"]
    assert [c["flow_id"] for c in clusters] == [str(f) for f in turn["flows"]]
    assert clusters[1] == {
        "flow_id": str(turn["flows"][1]),
        "agent": "critic",
        "trigger_type": "claim",
        "step_ids": [str(turn["steps"]["c1"])],
    }
    nodes = body["graph"]["nodes"]
    assert [n["id"] for n in nodes] == [str(turn["steps"][k]) for k in ("r1", "r2", "r3", "c1", "f1")]
    assert nodes[3]["flow_id"] == str(turn["flows"][1])
    assert {"position", "kind", "agent", "started_at", "created_at"} <= set(nodes[0])


def test_turn_graph_has_parent_merge_and_cross_flow_edges(operator: APIClient) -> None:
    turn = make_turn()
    s = {name: str(value) for name, value in turn["steps"].items()}

    body = operator.get(turn_url(TRACE)).json()

    assert edges(body) == {
        (s["r1"], s["r2"], "parent", "parent_step"),
        (s["r2"], s["r3"], "parent", "parent_step"),
        (s["r1"], s["r3"], "merge", "extra_parent"),
        # The critic judged the claim the researcher wrote.
        (s["r3"], s["c1"], "cross_flow", "memory_claim_ref"),
        # The follow-up flow was started on the critic's flow: its last step -> the follow-up's first.
        (s["c1"], s["f1"], "cross_flow", "trigger_ref"),
    }


def test_a_step_naming_another_flow_of_the_turn_links_to_that_flows_last_step(operator: APIClient) -> None:
    first = factories.make_flow(trace_id=TRACE, agent="researcher")
    factories.make_flow(
        steps=[step("Used the research", "critic", decision_graph_node_ref=str(first).upper())],
        trace_id=TRACE,
        agent="critic",
    )

    body = operator.get(turn_url(TRACE)).json()

    last_of_first = body["flows"][0]["steps"][-1]["id"]
    used = body["flows"][1]["steps"][0]["id"]
    assert (last_of_first, used, "cross_flow", "step_ref") in edges(body)


def test_a_flow_dispatched_from_the_backlog_links_to_the_flow_whose_request_it_answered(operator: APIClient) -> None:
    source = factories.make_flow(trace_id=TRACE, agent="researcher")
    dispatched = factories.make_flow(trace_id=TRACE, agent="researcher", dispatched_from_backlog=True)
    factories.make_request(status="completed", source_flow_id=source, completed_flow_id=dispatched, completed_at=NOW)

    body = operator.get(turn_url(TRACE)).json()

    cross = [(e["from"], e["to"], e["reason"]) for e in body["graph"]["edges"] if e["kind"] == "cross_flow"]
    assert cross == [(body["flows"][0]["steps"][-1]["id"], body["flows"][1]["steps"][0]["id"], "backlog_dispatch")]


def test_refs_within_one_flow_or_to_flows_outside_the_turn_draw_no_cross_flow_edge(operator: APIClient) -> None:
    outside = factories.make_flow(trace_id="another-turn")
    factories.make_flow(
        steps=[
            step("Wrote a claim", "researcher", memory_claim_ref=CLAIM),
            step("Checked the same claim", "researcher", memory_claim_ref=CLAIM),
            step("Named a flow of another turn", "researcher", decision_graph_node_ref=str(outside)),
        ],
        trace_id=TRACE,
        trigger_ref=str(outside),
    )

    body = operator.get(turn_url(TRACE)).json()

    assert [e for e in body["graph"]["edges"] if e["kind"] == "cross_flow"] == []


# --- Raw reasoning -----------------------------------------------------------------------


def test_raw_reasoning_is_left_out_by_default(operator: APIClient) -> None:
    make_turn()

    response = operator.get(turn_url(TRACE))

    assert COT_SECRET not in response.content.decode()
    assert all("reasoning_content" not in s for flow in response.json()["flows"] for s in flow["steps"])
    assert response.json()["flows"][1]["steps"][0]["reasoning_content_chars"] == len(COT_SECRET)


def test_include_reasoning_with_the_cot_scope_adds_it_and_audits_each_flow(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    turn = make_turn()
    reviewer = client_for(make_token("reasoning.admin", "reasoning.cot.read", name="cot-reviewer"))

    response = reviewer.get(turn_url(TRACE), {"include_reasoning": "true"})

    assert response.status_code == 200
    assert response.json()["flows"][1]["steps"][0]["reasoning_content"] == COT_SECRET
    events = AuditEvent.objects.filter(action="admin.reasoning.flow.reasoning_content_read").order_by("id")
    assert [(e.target_id, e.payload) for e in events] == [
        (str(turn["flows"][0]), {"steps_with_reasoning": 0, "via": "turn"}),
        (str(turn["flows"][1]), {"steps_with_reasoning": 1, "via": "turn"}),
        (str(turn["flows"][2]), {"steps_with_reasoning": 0, "via": "turn"}),
    ]
    assert all(e.actor == "token:cot-reviewer" for e in events)
    assert not any(COT_SECRET in str(e.payload) for e in AuditEvent.objects.all())


def test_include_reasoning_without_the_cot_scope_is_403_and_not_audited(operator: APIClient) -> None:
    make_turn()

    response = operator.get(turn_url(TRACE), {"include_reasoning": "true"})

    assert response.status_code == 403
    assert "reasoning.cot.read" in response.json()["detail"]
    assert not AuditEvent.objects.filter(action__startswith="admin.reasoning.turn").exists()
    assert not AuditEvent.objects.filter(action="admin.reasoning.flow.reasoning_content_read").exists()


# --- Audit -----------------------------------------------------------------------------


def test_read_audits_admin_turn_read_with_the_flow_ids_and_counts(operator: APIClient) -> None:
    turn = make_turn()

    operator.get(turn_url(TRACE))

    event = AuditEvent.objects.get(action="admin.reasoning.turn.read")
    assert event.actor == "token:operator"
    assert (event.target_type, event.target_id) == ("reasoning.turn", TRACE)
    assert event.payload == {
        "flow_count": 3,
        "step_count": 5,
        "truncated": False,
        "flow_ids": [str(f) for f in turn["flows"]],
    }
    assert not AuditEvent.objects.filter(action="admin.reasoning.flow.reasoning_content_read").exists()


def test_turn_read_is_a_routine_read() -> None:
    from audit.actions import ROUTINE_READS

    assert "admin.reasoning.turn.read" in ROUTINE_READS


# --- Errors ----------------------------------------------------------------------------


def test_unknown_trace_id_is_404_and_not_audited(operator: APIClient) -> None:
    factories.make_flow(trace_id="another-turn")

    response = operator.get(turn_url("no-such-turn"))

    assert response.status_code == 404
    assert "no-such-turn" in response.json()["detail"]
    assert not AuditEvent.objects.filter(action="admin.reasoning.turn.read").exists()


def test_trace_id_longer_than_100_characters_is_400_naming_the_field(operator: APIClient) -> None:
    response = operator.get(turn_url("t" * 101))

    assert response.status_code == 400
    assert "trace_id" in response.json()


def test_trace_id_with_slashes_is_one_turn(operator: APIClient) -> None:
    factories.make_flow(trace_id="bench/run-7/case-12")

    response = operator.get(turn_url("bench/run-7/case-12"))

    assert response.status_code == 200
    assert len(response.json()["flows"]) == 1


def test_malformed_include_reasoning_is_400(operator: APIClient) -> None:
    make_turn()

    response = operator.get(turn_url(TRACE), {"include_reasoning": "maybe"})

    assert response.status_code == 400
    assert "include_reasoning" in response.json()


def test_unknown_query_parameter_is_400(operator: APIClient) -> None:
    make_turn()

    assert operator.get(turn_url(TRACE), {"agent": "critic"}).status_code == 400


def test_agent_or_reader_token_is_403(agent: APIClient, reader: APIClient) -> None:
    make_turn()

    assert agent.get(turn_url(TRACE)).status_code == 403
    assert reader.get(turn_url(TRACE)).status_code == 403


def test_no_token_is_401(anonymous: APIClient, db: None) -> None:
    make_turn()

    assert anonymous.get(turn_url(TRACE)).status_code == 401


# --- Bounds and queries -------------------------------------------------------------------


def test_a_turn_past_the_flow_bound_shows_the_first_flows_and_says_truncated(operator: APIClient) -> None:
    for minute in range(MAX_TURN_FLOWS + 2):
        with time_machine.travel(NOW + timedelta(minutes=minute), tick=False):
            factories.make_flow(steps=[], close=False, trace_id=TRACE)
    first = list(ReasoningFlow.objects.filter(trace_id=TRACE).order_by("created_at").values_list("id", flat=True))

    body = operator.get(turn_url(TRACE)).json()

    assert body["truncated"] is True
    assert [flow["id"] for flow in body["flows"]] == [str(f) for f in first[:MAX_TURN_FLOWS]]


def test_a_turn_past_the_step_bound_shows_the_first_steps_and_says_truncated(
    operator: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("reasoning.turns.services.MAX_TURN_STEPS", 4)
    turn = make_turn()

    body = operator.get(turn_url(TRACE)).json()

    assert body["truncated"] is True
    assert [n["id"] for n in body["graph"]["nodes"]] == [str(turn["steps"][k]) for k in ("r1", "r2", "r3", "c1")]
    assert [len(flow["steps"]) for flow in body["flows"]] == [3, 1, 0]
    assert MAX_TURN_STEPS == 1000


@pytest.mark.parametrize("flows", [2, 8])
def test_read_runs_a_fixed_number_of_queries_whatever_the_number_of_flows(
    operator: APIClient, flows: int, django_assert_num_queries: Callable[..., Any]
) -> None:
    # A backlog-dispatched flow among them, so the backlog's link query runs in both cases.
    source = factories.make_flow(trace_id=TRACE, steps=[step("Wrote a claim", "researcher", memory_claim_ref=CLAIM)])
    dispatched = factories.make_flow(trace_id=TRACE, dispatched_from_backlog=True)
    factories.make_request(status="completed", source_flow_id=source, completed_flow_id=dispatched, completed_at=NOW)
    for _ in range(flows - 2):
        factories.make_flow(trace_id=TRACE, steps=[step("Judged the claim", "critic", memory_claim_ref=CLAIM)])

    # 1 the token; read_turn_for_admin: 2 savepoint, 3 the flows, 4 their steps, 5 the backlog's
    # links (research_backlog's provider), 6 the audit event (one statement), 7 release.
    with django_assert_num_queries(7):
        response = operator.get(turn_url(TRACE))

    assert response.status_code == 200
    assert len(response.json()["flows"]) == flows
