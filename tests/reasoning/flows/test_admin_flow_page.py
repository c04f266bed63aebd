"""GET /dashboard/admin/reasoning/<flow_id>: the operator's flow DAG page."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from pytest_django import DjangoAssertNumQueries

from audit.models import AuditEvent
from patients.models import Patient
from reasoning.models import ReasoningFlow, ReasoningStep
from tests import factories
from tests.html import Element, doc, parse

pytestmark = pytest.mark.django_db

# Written into every step's private fields: none of it may reach the page.
INPUT_SECRET = "INPUT-SECRET-7731"
OUTPUT_SECRET = "OUTPUT-SECRET-9912"
PII_SECRET = "PII-SECRET-5521"
COT_SECRET = "COT-SECRET-4410"
RATIONALE = "RATIONALE-3302 picked the newer guideline"

MakeFlow = Callable[..., uuid.UUID]


def page_url(flow_id: object, page: object = None) -> str:
    return f"/dashboard/admin/reasoning/{flow_id}" + (f"?page={page}" if page is not None else "")


def html(response: Any) -> str:
    return str(response.content.decode())


def svg_of(page: Element) -> Element:
    """The step graph."""
    return page.one("svg", "dag-graph")


def node_positions(svg: Element) -> list[int]:
    """The positions of the graph's step nodes, in document order."""
    return [
        int(node.attrs["data-position"])
        for node in svg.select("a", "dag-node")
        if node.attrs.get("href", "").startswith("#step-")
    ]


def ends(elements: list[Element]) -> list[tuple[int, int]]:
    """The (parent, child) positions of graph edges or stubs, sorted."""
    return sorted((int(el.attrs["data-parent"]), int(el.attrs["data-child"])) for el in elements)


def links(element: Element) -> list[tuple[str, str]]:
    """The (href, text) of each link in ``element``."""
    return [(link.attrs["href"], link.text) for link in element.select("a")]


def metadata(page: Element) -> dict[str, Element]:
    """The flow's Metadata panel: each term to its definition."""
    return page.one("section", aria_labelledby="facts-heading").one("dl").definitions()


def recorded_at(definition: Element) -> datetime:
    """The moment in a definition's ``<time>`` (its machine-readable datetime)."""
    return datetime.fromisoformat(definition.one("time").attrs["datetime"])


def timeline_positions(page: Element) -> list[int]:
    """The positions of the timeline's step cards, in document order."""
    return [int(card.attrs["id"].removeprefix("step-")) for card in page.select("li", "timeline-step")]


def step_body(position: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "kind": "retrieval" if position % 2 else "llm_prompt",
        "agent": "researcher",
        "summary_text": f"Step number {position} looked at the guideline",
        "rationale": RATIONALE,
        "confidence": 0.9,
        "latency_ms": 100 + position,
        "inputs": {"query": INPUT_SECRET, "name": PII_SECRET},
        "outputs": {"answer": OUTPUT_SECRET},
        "pii_fields": ["name"],
        "reasoning_content": COT_SECRET,
        **extra,
    }


@pytest.fixture
def make_dag(consenting_patient: Patient) -> MakeFlow:
    """A flow of ``count`` steps about the consenting patient: a chain (each step the child of the one
    before) unless ``parents`` maps a position to its parent positions (primary first).
    Closed (completed) unless ``close`` is False."""

    def make(
        count: int = 3,
        *,
        parents: Mapping[int, Sequence[int]] | None = None,
        extra: Mapping[int, dict[str, Any]] | None = None,
        close: bool = True,
    ) -> uuid.UUID:
        items: list[dict[str, Any]] = []
        for position in range(1, count + 1):
            wanted = (parents or {}).get(position, [position - 1] if position > 1 else [])
            ids = [items[p - 1]["id"] for p in wanted]
            item = step_body(position, **(extra or {}).get(position, {}))
            if ids:
                item["parent_step_id"], item["extra_parent_ids"] = ids[0], ids[1:]
            items.append(item)
        return factories.make_flow(
            consenting_patient,
            items,
            close=close,
            trigger_ref="labs/42",
            trace_id="trace-abc-123",
            session_id="session-9",
        )

    return make


# --- Access --------------------------------------------------------------------------


def test_operator_sees_the_page(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag()

    response = operator_client.get(page_url(flow_id))

    assert response.status_code == 200
    assert "lab_result flow" in html(response)


def test_patient_is_403(patient_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag()

    response = patient_client.get(page_url(flow_id))

    assert response.status_code == 403
    body = html(response)
    assert "Operators only" in body
    assert "Step number 1" not in body


def test_anonymous_is_redirected_to_login(make_dag: MakeFlow) -> None:
    flow_id = make_dag()

    response = Client().get(page_url(flow_id))

    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next=/dashboard/admin/reasoning/{flow_id}"


@pytest.mark.parametrize("flow_id", [uuid.UUID(int=7), "not-a-uuid", "12345"])
def test_unknown_or_malformed_flow_is_404_page(operator_client: Client, flow_id: object) -> None:
    response = operator_client.get(page_url(flow_id))

    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    assert "Flow not found" in html(response)
    assert not AuditEvent.objects.filter(action="admin.reasoning.flow.read").exists()


@pytest.mark.parametrize("page", ["0", "-1", "abc", "2", "1.5", "1_0", "", "99999999999999999999"])
def test_bad_page_is_404_page(operator_client: Client, make_dag: MakeFlow, page: str) -> None:
    flow_id = make_dag(3)  # one page only

    response = operator_client.get(page_url(flow_id, page))

    assert response.status_code == 404
    assert "Flow not found" in html(response)


# --- What an operator checks ------------------------------------------------------------


def test_header_and_metadata_show_the_flow(
    operator_client: Client, make_dag: MakeFlow, consenting_patient: Patient
) -> None:
    flow_id = make_dag(3)

    body = html(operator_client.get(page_url(flow_id)))

    page = parse(body)
    assert page.one("h1").one("span", "pill").attrs["data-state"] == "completed"
    assert "recommendation_delivered" in body
    assert "Suggested a follow-up visit" in body
    assert "trace-abc-123" in body
    assert "session-9" in body
    assert str(consenting_patient.pk) in body
    assert "3 steps" in body
    assert "labs/42" in body
    assert "A new lab result arrived" in body
    assert "passed: safe to show the patient" in body  # the summary guard's verdict
    facts = metadata(page)
    assert facts["Outcome confidence"].text == "0.90 (weakest step)"
    assert recorded_at(facts["Closed"]) == ReasoningFlow.objects.get(pk=flow_id).closed_at
    assert re.fullmatch(r"\d+(\.\d)? (ms|s)", facts["Duration"].text)
    # The patient is an opaque id: never their name, MRN or username.
    assert "Ada Lovelace" not in body
    assert "MRN-4455" not in body
    assert "ada.patient" not in body


def test_closed_flow_shows_its_radar_snapshot(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag(3)

    page = doc(operator_client.get(page_url(flow_id)))

    radar = page.one("section", aria_labelledby="radar-heading").one("figure")
    assert radar.classes() == ["radar", "radar-operator", "radar-expanded"]
    assert radar.one("svg").attrs["aria-label"].startswith("Decision dimensions.")


def test_active_flow_has_no_radar_and_says_still_open(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag(2, close=False)

    page = doc(operator_client.get(page_url(flow_id)))

    assert page.one("h1").one("span", "pill").attrs["data-state"] == "active"
    assert not page.select("figure", "radar")
    assert "it is taken when the flow closes" in page.text
    facts = metadata(page)
    assert facts["Closed"].text == "still open"
    assert facts["Summary guard"].text == "not checked yet"


def test_timeline_shows_each_step_with_parents_and_back_refs(operator_client: Client, make_dag: MakeFlow) -> None:
    refs = {
        "llm_call_log_ref": "llm-log-77",
        "experiment_trace_ref": "exp-trace-5",
        "decision_graph_node_ref": "dg-node-3",
        "memory_claim_ref": "claim-12",
    }
    flow_id = make_dag(3, extra={2: refs})

    page = doc(operator_client.get(page_url(flow_id)))

    assert timeline_positions(page) == [1, 2, 3]
    entry = page.by_id("step-2")
    assert entry.one("h3").text == "#2 llm_prompt by researcher"
    assert "Step number 2 looked at the guideline" in entry.text
    facts = entry.one("dl").definitions()
    assert facts["Latency"].text == "102 ms"
    assert facts["Confidence"].text == "0.90"
    assert links(facts["After"]) == [("#step-1", "#1")]
    for label, value in [
        ("LLM call log", "llm-log-77"),
        ("Experiment trace", "exp-trace-5"),
        ("Decision graph node", "dg-node-3"),
        ("Memory claim", "claim-12"),
    ]:
        assert facts[label].one("code").text == value
    assert recorded_at(facts["Recorded"]) == ReasoningStep.objects.get(flow_id=flow_id, position=2).created_at
    # The count, never the text unless asked for: a superuser operator may ask (issue 41).
    assert facts["Raw reasoning"].text == f"{len(COT_SECRET)} characters (shown with Show raw reasoning)"
    assert COT_SECRET not in entry.text
    # Unset back-refs are left out rather than shown empty.
    assert "LLM call log" not in page.by_id("step-3").one("dl").definitions()
    assert page.by_id("step-1").one("dl").definitions()["After"].text == "the trigger (a root step)"


def test_flow_without_steps_says_so(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag(0, close=False)

    response = operator_client.get(page_url(flow_id))

    assert response.status_code == 200
    body = html(response)
    assert "No steps have been recorded for this flow." in body
    assert not parse(body).select("svg", "dag-graph")
    assert "0 steps" in body


def test_rationale_is_tucked_into_a_details_element(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag(1)

    page = doc(operator_client.get(page_url(flow_id)))

    rationale = page.by_id("step-1").one("details", "rationale")
    assert rationale.one("summary").text == "Rationale (operators only)"
    assert rationale.one("p").text == RATIONALE


def test_page_never_shows_inputs_outputs_pii_or_raw_reasoning(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag(3)

    with CaptureQueriesContext(connection) as queries:
        body = html(operator_client.get(page_url(flow_id)))

    for secret in (INPUT_SECRET, OUTPUT_SECRET, PII_SECRET, COT_SECRET):
        assert secret not in body
    # Not even loaded: no query selects those columns.
    for column in ("inputs", "outputs", "inputs_pii", "outputs_pii", "reasoning_content"):
        assert not any(f'."{column}"' in query["sql"] for query in queries.captured_queries), column


# --- The graph ---------------------------------------------------------------------------


def test_graph_has_a_linked_node_with_a_title_per_step(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag(3)

    svg = svg_of(doc(operator_client.get(page_url(flow_id))))

    assert node_positions(svg) == [1, 2, 3]
    node_2 = svg.one("a", "dag-node", data_position="2")
    assert node_2.one("title").text == "#2 llm_prompt by researcher: Step number 2 looked at the guideline"
    assert ends(svg.select("path", "dag-edge")) == [(1, 2), (2, 3)]
    assert not svg.select(cls="dag-edge-merge")


def drawn_scale(svg: Element) -> tuple[float, float]:
    """How much larger than its layout the graph is drawn: (width, height) ratios."""
    _, _, width, height = (float(n) for n in svg.attrs["viewbox"].split())
    return float(svg.attrs["width"]) / width, float(svg.attrs["height"]) / height


def test_narrow_graph_is_drawn_larger_to_use_the_panel_and_shows_each_summary(
    operator_client: Client, make_dag: MakeFlow
) -> None:
    chain = svg_of(doc(operator_client.get(page_url(make_dag(3)))))

    x_scale, y_scale = drawn_scale(chain)
    assert x_scale == pytest.approx(y_scale, rel=0.02)  # the drawing keeps its proportions
    assert x_scale == pytest.approx(1.35, abs=0.01)  # a one-column chain grows, its text stays text-sized
    node = chain.one("a", "dag-node", data_position="2")
    assert node.one("text", "dag-node-summary").text.startswith("Step number 2 looked at")


def test_wide_graph_is_drawn_at_its_own_size_and_scrolls(operator_client: Client, make_dag: MakeFlow) -> None:
    wide = svg_of(doc(operator_client.get(page_url(make_dag(8, parents={p: [] for p in range(1, 9)})))))

    assert drawn_scale(wide) == (1.0, 1.0)


def test_merge_step_draws_merge_edges_and_a_marker(operator_client: Client, make_dag: MakeFlow) -> None:
    # 1 -> 2, 1 -> 3, and 4 merges 2 and 3.
    flow_id = make_dag(4, parents={2: [1], 3: [1], 4: [2, 3]})

    page = doc(operator_client.get(page_url(flow_id)))
    svg = svg_of(page)

    edges = svg.select("path", "dag-edge")
    assert ends([edge for edge in edges if "dag-edge-merge" in edge.classes()]) == [(2, 4), (3, 4)]
    assert ends([edge for edge in edges if "dag-edge-merge" not in edge.classes()]) == [(1, 2), (1, 3)]
    node_4 = svg.one("a", "dag-node", data_position="4")
    assert "dag-node-merge" in node_4.classes()
    assert node_4.one("text", "dag-merge-label").text == "merge"
    assert "(merges #2, #3)" in node_4.one("title").text
    entry = page.by_id("step-4")
    assert links(entry.one("dl").definitions()["After"]) == [("#step-2", "#2"), ("#step-3", "#3")]
    assert entry.one("span", "merge-chip").text == "merge"


# --- Thousands of steps ------------------------------------------------------------------


@pytest.fixture
def long_flow(make_dag: MakeFlow) -> uuid.UUID:
    """250 steps in a chain, except that step 230 also merges step 5 (two pages back)."""
    return make_dag(250, parents={230: [229, 5]})


def test_first_page_shows_steps_1_to_100_and_the_pager(operator_client: Client, long_flow: uuid.UUID) -> None:
    page = doc(operator_client.get(page_url(long_flow)))
    svg = svg_of(page)

    assert timeline_positions(page) == list(range(1, 101))
    assert node_positions(svg) == list(range(1, 101))
    assert "Steps 1\u2013100 of 250" in page.text
    assert [link.attrs["href"] for link in page.select("a", rel="next")] == ["?page=2", "?page=2"]  # top and bottom
    assert not page.select(rel="prev")
    assert "page 1 of 3" in page.text
    assert not svg.select("g", "dag-stub")


def test_last_page_shows_201_to_250_with_stubs_to_earlier_parents(
    operator_client: Client, long_flow: uuid.UUID
) -> None:
    page = doc(operator_client.get(page_url(long_flow, 3)))
    svg = svg_of(page)

    assert timeline_positions(page) == list(range(201, 251))
    assert node_positions(svg) == list(range(201, 251))
    assert "Steps 201\u2013250 of 250" in page.text
    assert [link.attrs["href"] for link in page.select("a", rel="prev")] == ["?page=2", "?page=2"]
    assert not page.select(rel="next")
    # Step 201's parent (200) and step 230's extra parent (5) are on earlier pages: stubs,
    # labelled and linked to the page that holds them.
    assert ends(svg.select("g", "dag-stub")) == [(5, 230), (200, 201)]
    for parent, href in [("200", "?page=2#step-200"), ("5", "?page=1#step-5")]:
        link = svg.one("g", "dag-stub", data_parent=parent).one("a")
        assert link.attrs["href"] == href
        assert link.one("title").text == f"Parent step #{parent} is on an earlier page"
        assert link.one("text", "dag-stub-label").text == f"#{parent}"
    # 230 is a merge.
    assert "dag-edge-merge" in svg.one("g", "dag-stub", data_parent="5").one("line", "dag-edge-stub").classes()
    after = page.by_id("step-230").one("dl").definitions()["After"]
    assert links(after) == [("#step-229", "#229"), ("?page=1#step-5", "#5")]


def test_graph_never_has_more_than_100_nodes(operator_client: Client, long_flow: uuid.UUID) -> None:
    for page in (1, 2, 3):
        svg = svg_of(doc(operator_client.get(page_url(long_flow, page))))
        assert len(svg.select("a", "dag-node")) <= 100


# --- Audit and queries ---------------------------------------------------------------------


def test_read_is_audited_once_with_the_operator_as_actor(
    operator_client: Client, operator_user: Any, long_flow: uuid.UUID
) -> None:
    operator_client.get(page_url(long_flow, 3))

    event = AuditEvent.objects.filter(action="admin.reasoning.flow.read").get()
    assert event.actor == f"user:{operator_user.pk}"
    assert event.target_type == "reasoning.reasoningflow"
    assert event.target_id == str(long_flow)
    assert event.payload == {"step_count": 50, "page": 3}


def test_refused_reads_are_not_audited(patient_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag()

    patient_client.get(page_url(flow_id))
    Client().get(page_url(flow_id))

    assert not AuditEvent.objects.filter(action="admin.reasoning.flow.read").exists()


@pytest.mark.parametrize("count", [5, 250])
def test_query_count_does_not_grow_with_the_steps(
    operator_client: Client, make_dag: MakeFlow, count: int, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    # A merge on the page, so the extra-parent subquery has something to find.
    flow_id = make_dag(count, parents={4: [3, 1]})

    # 1 session, 2 user (the operator gate); read_flow_page_for_admin: 3 savepoint,
    # 4 the flow, 5 the page's steps with their parents' positions (one join, one array
    # subquery), 6 the audit event, 7 release; 8 the number of flows of its turn (the link to
    # the turn page); base.html: 9 the audit chain's lag for the banner (the oldest queued
    # event, two primary keys).
    with django_assert_num_queries(9):
        response = operator_client.get(page_url(flow_id))

    assert response.status_code == 200


def test_a_failed_step_says_so_with_its_model_tool_and_tokens(operator_client: Client, make_dag: MakeFlow) -> None:
    flow_id = make_dag(
        2,
        extra={
            1: {"model": "gpt-4o-mini", "input_tokens": 21, "output_tokens": 34, "cached_tokens": 5},
            2: {"kind": "tool_call", "tool": "lookup_guideline", "outcome": "error", "error_type": "LookupError"},
        },
    )

    page = parse(operator_client.get(page_url(flow_id)).content)

    first, second = page.by_id("step-1"), page.by_id("step-2")
    assert "failed" not in first.one("h3").text
    assert "gpt-4o-mini" in first.text and "21 in (5 cached), 34 out" in " ".join(first.text.split())
    assert "failed: LookupError" in second.one("h3").text and "lookup_guideline" in second.text
    failed_nodes = [node for node in svg_of(page).select("a") if "dag-node-failed" in node.attrs.get("class", "")]
    assert [node.attrs["data-position"] for node in failed_nodes] == ["2"]
