"""GET /dashboard/admin/reasoning/turns/<trace_id>: one agent turn as a graph, for operators."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from pytest_django import DjangoAssertNumQueries

from audit.models import AuditEvent
from tests import factories
from tests.html import doc
from tests.reasoning.turns.test_turns_api import COT_SECRET, TRACE, make_turn

pytestmark = pytest.mark.django_db


def page_url(trace_id: str) -> str:
    return f"/dashboard/admin/reasoning/turns/{trace_id}"


def test_operator_sees_a_labelled_cluster_per_flow_in_time_order(operator_client: Client) -> None:
    turn = make_turn()

    response = operator_client.get(page_url(TRACE))

    assert response.status_code == 200
    svg = doc(response).one("svg", "turn-graph")
    clusters = svg.select("g", "turn-cluster")
    assert [c.attrs["data-flow"] for c in clusters] == [str(f) for f in turn["flows"]]
    labels = [c.one("text", "turn-cluster-label").text for c in clusters]
    assert labels == [
        "1. researcher · lab_result",
        "2. critic · claim",
        "3. researcher · lab_result",
    ]


def test_each_node_links_to_its_step_on_its_flows_page(operator_client: Client) -> None:
    turn = make_turn()

    svg = doc(operator_client.get(page_url(TRACE))).one("svg", "turn-graph")

    nodes = {n.attrs["data-step"]: n.attrs["href"] for n in svg.select("a", "dag-node")}
    researcher, critic, follow_up = turn["flows"]
    assert nodes == {
        str(turn["steps"]["r1"]): f"/dashboard/admin/reasoning/{researcher}#step-1",
        str(turn["steps"]["r2"]): f"/dashboard/admin/reasoning/{researcher}#step-2",
        str(turn["steps"]["r3"]): f"/dashboard/admin/reasoning/{researcher}#step-3",
        str(turn["steps"]["c1"]): f"/dashboard/admin/reasoning/{critic}#step-1",
        str(turn["steps"]["f1"]): f"/dashboard/admin/reasoning/{follow_up}#step-1",
    }


def test_cross_flow_edges_are_drawn_between_clusters(operator_client: Client) -> None:
    turn = make_turn()

    svg = doc(operator_client.get(page_url(TRACE))).one("svg", "turn-graph")

    cross = {
        (p.attrs["data-from"], p.attrs["data-to"], p.attrs["data-reason"])
        for p in svg.select("path", "turn-edge-cross")
    }
    s = {name: str(value) for name, value in turn["steps"].items()}
    assert cross == {(s["r3"], s["c1"], "memory_claim_ref"), (s["c1"], s["f1"], "trigger_ref")}
    # The researcher's own chain and merge stay inside its cluster: r1->r2, r2->r3, r1->r3 (a merge).
    researcher = svg.select("g", "turn-cluster")[0]
    assert len(researcher.select("path", "dag-edge")) == 3
    assert len(researcher.select("path", "dag-edge-merge")) == 2


def test_the_flow_list_links_each_flow_with_agent_trigger_state_and_outcome(operator_client: Client) -> None:
    turn = make_turn()

    page = doc(operator_client.get(page_url(TRACE)))

    rows = page.one("table", "turn-flows").select("tr")[1:]
    assert [r.attrs["data-flow"] for r in rows] == [str(f) for f in turn["flows"]]
    cells = [td.text for td in rows[1].select("td")]
    assert cells[:5] == ["2", "critic", "claim", "completed", "recommendation_delivered"]
    assert rows[1].one("a").attrs["href"] == f"/dashboard/admin/reasoning/{turn['flows'][1]}"


def test_page_never_shows_raw_reasoning(operator_client: Client) -> None:
    make_turn()

    assert COT_SECRET not in operator_client.get(page_url(TRACE)).content.decode()


def test_flow_page_links_to_its_turn_with_the_number_of_flows(operator_client: Client) -> None:
    turn = make_turn()

    page = doc(operator_client.get(f"/dashboard/admin/reasoning/{turn['flows'][1]}"))

    link = page.one("a", "turn-link")
    assert link.attrs["href"] == page_url(TRACE)
    assert link.text == "Open the turn (3 flows)"


def test_flow_page_link_escapes_an_unusual_trace_id(operator_client: Client) -> None:
    flow_id = factories.make_flow(trace_id="run 7/case?12#a")

    link = doc(operator_client.get(f"/dashboard/admin/reasoning/{flow_id}")).one("a", "turn-link")

    assert link.attrs["href"] == "/dashboard/admin/reasoning/turns/run%207/case%3F12%23a"
    assert operator_client.get(link.attrs["href"]).status_code == 200


# --- Access, errors, audit, queries ---------------------------------------------------------


def test_patient_and_outsider_are_403(patient_client: Client, outsider_client: Client) -> None:
    make_turn()

    assert patient_client.get(page_url(TRACE)).status_code == 403
    assert outsider_client.get(page_url(TRACE)).status_code == 403
    assert not AuditEvent.objects.filter(action="admin.reasoning.turn.read").exists()


def test_anonymous_is_sent_to_log_in(db: None) -> None:
    response = Client().get(page_url(TRACE))

    assert response.status_code == 302
    assert "/login" in response["Location"]


@pytest.mark.parametrize("trace_id", ["no-such-turn", "t" * 101])
def test_unknown_or_overlong_trace_is_the_404_page(operator_client: Client, trace_id: str) -> None:
    response = operator_client.get(page_url(trace_id))

    assert response.status_code == 404
    assert doc(response).one("h1").text == "Turn not found"


def test_read_is_audited_with_the_operator_as_actor(operator_client: Client, operator_user: Any) -> None:
    make_turn()

    operator_client.get(page_url(TRACE))

    event = AuditEvent.objects.get(action="admin.reasoning.turn.read")
    assert event.actor == f"user:{operator_user.pk}"
    assert event.payload["flow_count"] == 3


@pytest.mark.parametrize("flows", [1, 6])
def test_query_count_does_not_grow_with_the_flows(
    operator_client: Client, flows: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    for _ in range(flows):
        factories.make_flow(trace_id=TRACE)

    # 1 session, 2 user (the operator gate); read_turn_for_admin: 3 savepoint, 4 the flows,
    # 5 their steps, 6 the audit event, 7 release (no backlog-dispatched flow: no link query);
    # base.html: 8 the audit chain's lag.
    with django_assert_num_queries(8):
        response = operator_client.get(page_url(TRACE))

    assert response.status_code == 200


def test_each_flows_duration_has_its_own_labelled_column_and_the_graph_is_shown_whole(
    operator_client: Client,
) -> None:
    # Reported: "Started 11:43:46 17 ms", a duration with no label; and a fixed-height box that
    # hid the lower clusters of a tall turn.
    make_turn()

    page = doc(operator_client.get(page_url(TRACE)))

    table = page.one("table", "turn-flows")
    headers = [th.text for th in table.select("th")]
    assert headers[-2:] == ["Started", "Duration"]
    for row in table.select("tr")[1:]:
        started, duration = [td.text for td in row.select("td")][-2:]
        assert duration == row.one("td", data_cell="duration").text and duration.split()[-1] in {"ms", "s", "far"}
        assert " " not in started
    assert "dag-whole" in page.one("div", "dag").classes()
