"""GET /admin/v1/reasoning/flows/{id} (the full DAG, audited) and the flow list."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from audit.models import AuditEvent
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

LIST_URL = "/admin/v1/reasoning/flows"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def detail_url(flow_id: str) -> str:
    return f"{LIST_URL}/{flow_id}"


def ids(response: Any) -> list[str]:
    return [item["id"] for item in response.json()]


# --- Detail ---------------------------------------------------------------------------


def test_read_returns_the_flow_with_its_steps_in_write_order(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    first = add_step(agent, flow["id"], kind="retrieval", summary_text="Retrieved labs")
    second = add_step(agent, flow["id"], kind="llm_prompt", parent_step_id=first["id"])
    third = add_step(agent, flow["id"], kind="verdict", parent_step_id=second["id"])

    response = operator.get(detail_url(flow["id"]))

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == flow["id"]
    assert body["trigger_type"] == "user_question"
    assert body["flow_state"] == "active"
    assert body["step_count"] == 3
    assert [s["id"] for s in body["steps"]] == [first["id"], second["id"], third["id"]]
    assert [s["position"] for s in body["steps"]] == [1, 2, 3]
    assert [s["kind"] for s in body["steps"]] == ["retrieval", "llm_prompt", "verdict"]
    assert [s["parent_step_id"] for s in body["steps"]] == [None, first["id"], second["id"]]


def test_read_shows_back_refs_rationale_and_metrics_of_a_step(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    refs = {
        "llm_call_log_ref": "llm-call-7781",
        "experiment_trace_ref": "exp-12/trace-3",
        "decision_graph_node_ref": "node:44",
        "memory_claim_ref": "claim-9",
        "span_id": "00f067aa0ba902b7",
    }
    add_step(
        agent,
        flow["id"],
        rationale="Guidelines changed in 2024, so recent sources were preferred.",
        confidence=0.87,
        latency_ms=120,
        inputs={"query_kind": "labs"},
        outputs={"hits": 3},
        **refs,
    )

    (step,) = operator.get(detail_url(flow["id"])).json()["steps"]

    for name, value in refs.items():
        assert step[name] == value
    assert step["rationale"] == "Guidelines changed in 2024, so recent sources were preferred."
    assert step["confidence"] == pytest.approx(0.87)
    assert step["latency_ms"] == 120
    assert step["inputs"] == {"query_kind": "labs"}
    assert step["outputs"] == {"hits": 3}
    assert step["summary_text"] == "Retrieved guidelines"
    assert step["agent"] == "researcher"


def test_read_of_a_flow_without_steps_has_an_empty_step_list(operator: APIClient, flow: dict[str, Any]) -> None:
    response = operator.get(detail_url(flow["id"]))

    assert response.status_code == 200
    assert response.json()["steps"] == []


def test_read_totals_the_model_usage_its_steps_reported(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    add_step(agent, flow["id"], kind="retrieval")  # no model call: counts nothing
    add_step(agent, flow["id"], kind="llm_prompt", model="gpt-4o", input_tokens=1200, output_tokens=300)
    add_step(
        agent,
        flow["id"],
        kind="llm_prompt",
        model="o3-mini",
        input_tokens=800,
        output_tokens=50,
        reasoning_tokens=900,
        cached_tokens=600,
    )

    tokens = operator.get(detail_url(flow["id"])).json()["tokens"]

    assert tokens == {
        "steps": 2,
        "input_tokens": 2000,
        "output_tokens": 350,
        "reasoning_tokens": 900,
        "cached_tokens": 600,
        "models": ["gpt-4o", "o3-mini"],
        # gpt-4o: 1,200 x $2.5 + 300 x $10; o3-mini: 200 x $1.1 + 600 cached x $0.55 + 50 x $4.4 (per million)
        "cost_usd": 0.00677,
    }


def test_read_of_a_flow_whose_steps_reported_no_usage_says_unknown_not_zero(
    agent: APIClient, operator: APIClient, flow: dict[str, Any]
) -> None:
    add_step(agent, flow["id"], kind="retrieval")

    tokens = operator.get(detail_url(flow["id"])).json()["tokens"]

    assert tokens == {
        "steps": 0,
        "input_tokens": None,
        "output_tokens": None,
        "reasoning_tokens": None,
        "cached_tokens": None,
        "models": [],
        "cost_usd": None,
    }


def test_read_audits_admin_flow_read(operator: APIClient, flow: dict[str, Any]) -> None:
    operator.get(detail_url(flow["id"]))

    (event,) = AuditEvent.objects.filter(action="admin.reasoning.flow.read")
    assert event.target_id == flow["id"]
    assert event.actor == "token:operator"


def test_read_unknown_flow_is_404_and_not_audited(operator: APIClient) -> None:
    response = operator.get(detail_url(str(uuid.uuid4())))

    assert response.status_code == 404
    assert not AuditEvent.objects.filter(action="admin.reasoning.flow.read").exists()


def test_read_malformed_flow_id_is_400(operator: APIClient) -> None:
    response = operator.get(detail_url("not-a-uuid"))

    assert response.status_code == 400
    assert "flow_id" in response.json()


def test_read_with_an_agent_write_only_token_is_403(agent: APIClient, flow: dict[str, Any]) -> None:
    response = agent.get(detail_url(flow["id"]))

    assert response.status_code == 403
    assert not AuditEvent.objects.filter(action="admin.reasoning.flow.read").exists()


def test_read_with_a_read_only_token_is_403(reader: APIClient, flow: dict[str, Any]) -> None:
    assert reader.get(detail_url(flow["id"])).status_code == 403


def test_read_without_token_is_401(anonymous: APIClient, flow: dict[str, Any]) -> None:
    assert anonymous.get(detail_url(flow["id"])).status_code == 401


# --- List -----------------------------------------------------------------------------


def test_list_by_trace_id_returns_only_that_trace_newest_first(agent: APIClient, operator: APIClient) -> None:
    opened: list[dict[str, Any]] = []
    for minutes, trace in [(0, "trace-A"), (1, "trace-B"), (2, "trace-A"), (3, "trace-A")]:
        with time_machine.travel(T0 + timedelta(minutes=minutes), tick=False):
            opened.append(open_flow(agent, trace_id=trace))

    response = operator.get(LIST_URL, {"trace_id": "trace-A"})

    assert response.status_code == 200
    assert ids(response) == [opened[3]["id"], opened[2]["id"], opened[0]["id"]]
    assert {item["trace_id"] for item in response.json()} == {"trace-A"}


def test_list_of_an_unknown_trace_is_empty(operator: APIClient, flow: dict[str, Any]) -> None:
    response = operator.get(LIST_URL, {"trace_id": "no-such-trace"})

    assert response.status_code == 200
    assert response.json() == []


def test_list_is_not_audited(operator: APIClient, flow: dict[str, Any]) -> None:
    before = AuditEvent.objects.count()

    response = operator.get(LIST_URL, {"trace_id": flow["trace_id"]})

    assert ids(response) == [flow["id"]]
    assert AuditEvent.objects.count() == before


def test_list_filters_by_flow_state(agent: APIClient, operator: APIClient) -> None:
    active = open_flow(agent)
    completed = open_flow(agent)
    aborted = open_flow(agent)
    agent.patch(
        f"/api/reasoning/flows/{completed['id']}",
        {"flow_state": "completed", "outcome_type": "claim_created"},
        format="json",
    )
    agent.patch(f"/api/reasoning/flows/{aborted['id']}", {"flow_state": "aborted"}, format="json")

    assert ids(operator.get(LIST_URL, {"flow_state": "active"})) == [active["id"]]
    assert ids(operator.get(LIST_URL, {"flow_state": "completed"})) == [completed["id"]]
    assert ids(operator.get(LIST_URL, {"flow_state": "aborted"})) == [aborted["id"]]


def test_list_with_unknown_flow_state_is_400(operator: APIClient) -> None:
    response = operator.get(LIST_URL, {"flow_state": "bogus"})

    assert response.status_code == 400
    assert "flow_state" in response.json()


def test_list_limit_caps_the_number_of_flows(agent: APIClient, operator: APIClient) -> None:
    opened = []
    for minutes in range(3):
        with time_machine.travel(T0 + timedelta(minutes=minutes), tick=False):
            opened.append(open_flow(agent))

    response = operator.get(LIST_URL, {"limit": "2"})

    assert response.status_code == 200
    assert ids(response) == [opened[2]["id"], opened[1]["id"]]


@pytest.mark.parametrize("limit", ["200", "1"])
def test_list_accepts_limits_from_1_to_200(operator: APIClient, flow: dict[str, Any], limit: str) -> None:
    response = operator.get(LIST_URL, {"limit": limit})

    assert response.status_code == 200
    assert ids(response) == [flow["id"]]


@pytest.mark.parametrize("limit", ["0", "201", "-1", "ten"])
def test_list_limit_out_of_bounds_is_400(operator: APIClient, limit: str) -> None:
    response = operator.get(LIST_URL, {"limit": limit})

    assert response.status_code == 400
    assert "limit" in response.json()


def test_list_with_an_agent_write_only_token_is_403(agent: APIClient) -> None:
    assert agent.get(LIST_URL).status_code == 403


def test_list_without_token_is_401(anonymous: APIClient, db: None) -> None:
    assert anonymous.get(LIST_URL).status_code == 401


def test_list_runs_a_fixed_number_of_queries(
    agent: APIClient,
    operator: APIClient,
    django_assert_num_queries: Callable[..., Any],
) -> None:
    for _ in range(3):
        opened = open_flow(agent, trace_id="trace-Q")
        add_step(agent, opened["id"])

    # Expect 2 queries, however many flows match: the token lookup, then the flow list.
    with django_assert_num_queries(2):
        response = operator.get(LIST_URL, {"trace_id": "trace-Q"})

    assert len(response.json()) == 3


def test_read_runs_a_fixed_number_of_queries(
    agent: APIClient,
    operator: APIClient,
    flow: dict[str, Any],
    django_assert_num_queries: Callable[..., Any],
) -> None:
    for _ in range(3):
        add_step(agent, flow["id"])

    # Expect 6 queries, however many steps: the token lookup; SAVEPOINT (the audited read is
    # atomic, nested in the test's transaction); the flow; its steps; the audit event (with
    # its chainer queue row, one statement); RELEASE SAVEPOINT.
    with django_assert_num_queries(6):
        response = operator.get(detail_url(flow["id"]))

    assert len(response.json()["steps"]) == 3


# --- Word search (issue 41, part 3) ---------------------------------------------------------


@pytest.mark.parametrize("common", [500, 1], ids=["rare words: the indexes", "common words: page order"])
def test_q_finds_the_flows_whose_summaries_hold_every_word(
    operator: APIClient, monkeypatch: pytest.MonkeyPatch, common: int
) -> None:
    from reasoning.flows import search
    from tests.factories import make_flow

    monkeypatch.setattr(search, "COMMON_WORD_FLOWS", common)

    by_trigger = str(make_flow(steps=[], trigger_summary="New lab results arrived for review"))
    by_step = str(make_flow(steps=["Compared the lab result with last month's"], trigger_summary="Routine check"))
    make_flow(steps=["Reviewed the lab order"], trigger_summary="A lab order was placed")  # "lab" alone
    make_flow(steps=["Read the results"], trigger_summary="Imaging results arrived")  # "results" alone

    found = ids(operator.get(LIST_URL, {"q": "lab results"}))

    assert sorted(found) == sorted([by_trigger, by_step])


def test_q_finds_a_phrase_and_leaves_out_a_word(operator: APIClient) -> None:
    from tests.factories import make_flow

    exact = str(make_flow(steps=[], trigger_summary="Potassium is high on the new panel"))
    make_flow(steps=[], trigger_summary="High potassium intake was discussed")

    assert ids(operator.get(LIST_URL, {"q": '"potassium is high"'})) == [exact]
    assert ids(operator.get(LIST_URL, {"q": "potassium -discussed"})) == [exact]


def test_q_never_searches_encrypted_content(operator: APIClient) -> None:
    from tests.factories import make_flow

    make_flow(
        steps=[
            {
                "kind": "retrieval",
                "agent": "researcher",
                "summary_text": "Retrieved the chart",
                "inputs": {"patient_name": "Zebulon Marchbanks"},
                "pii_fields": ["patient_name"],
            }
        ]
    )

    assert ids(operator.get(LIST_URL, {"q": "Zebulon"})) == []
