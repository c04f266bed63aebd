"""The flow page's time view: the waterfall (bars from each step's start for its latency, on the
flow's clock), the "blocked for patients" banner and flagged steps, masked inputs and outputs."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.html import Element, doc

pytestmark = pytest.mark.django_db

START = timezone.now().replace(microsecond=0) - timedelta(minutes=10)


def flow_with(agent: APIClient, steps: list[dict[str, Any]], seconds: float = 2.0) -> str:
    """A closed flow that began at START and lasted ``seconds``; each step's ``at`` is its start offset (s)."""
    ids = [str(uuid.uuid4()) for _ in steps]
    bodies = []
    for n, step in enumerate(steps):
        body: dict[str, Any] = {
            "id": ids[n],
            "kind": "retrieval",
            "agent": "researcher",
            "summary_text": f"Step {n + 1} ran",
        }
        body.update({k: v for k, v in step.items() if k not in ("at", "parent", "also")})
        if "at" in step:
            body["started_at"] = (START + timedelta(seconds=step["at"])).isoformat()
        if "parent" in step:
            body["parent_step_id"] = ids[step["parent"] - 1]
        if "also" in step:
            body["extra_parent_ids"] = [ids[p - 1] for p in step["also"]]
        bodies.append(body)
    item = {
        "id": str(uuid.uuid4()),
        "trigger_type": "user_question",
        "agent": "researcher",
        "started_at": START.isoformat(),
        "steps": bodies,
        "close": {
            "flow_state": "completed",
            "outcome_type": "recommendation_delivered",
            "ended_at": (START + timedelta(seconds=seconds)).isoformat(),
        },
    }
    answer = agent.post("/api/reasoning/ingest", {"flows": [item]}, format="json").json()
    assert answer["created"] == 1, answer
    return str(item["id"])


def waterfall(client: Client, flow_id: str) -> Element:
    return doc(client.get(f"/dashboard/admin/reasoning/{flow_id}")).one("svg", "waterfall")


def bars(svg: Element) -> dict[int, Element]:
    return {int(row.attrs["data-position"]): row for row in svg.select("a", "waterfall-row")}


def width(row: Element) -> float:
    return float(row.one("rect", "waterfall-bar").attrs["width"])


def x(row: Element) -> float:
    return float(row.one("rect", "waterfall-bar").attrs["x"])


def test_bars_start_at_each_steps_start_and_last_its_latency(operator_client: Client, agent: APIClient) -> None:
    flow_id = flow_with(
        agent,
        [{"at": 0, "latency_ms": 1000}, {"at": 1.0, "latency_ms": 500}, {"at": 1.25, "latency_ms": 250}],
    )

    rows = bars(waterfall(operator_client, flow_id))

    assert [rows[n].attrs["data-start-ms"] for n in (1, 2, 3)] == ["0", "1000", "1250"]
    assert width(rows[1]) == pytest.approx(2 * width(rows[2]), rel=0.01)
    assert width(rows[2]) == pytest.approx(2 * width(rows[3]), rel=0.01)
    # Step 2 begins where step 1 ends; step 3 halfway through step 2.
    assert x(rows[2]) == pytest.approx(x(rows[1]) + width(rows[1]), rel=0.01)
    assert x(rows[3]) == pytest.approx(x(rows[2]) + width(rows[2]) / 2, rel=0.01)
    card = rows[2].one("title").raw_text()
    assert "#2 retrieval by researcher: Step 2 ran" in card and "takes 500 ms" in card and "+1000 ms" in card


def test_the_axis_spans_the_flow_and_children_sit_under_their_parent(operator_client: Client, agent: APIClient) -> None:
    # 1 (root) → 2 and 4; 3 is another root that began before 2.
    flow_id = flow_with(
        agent,
        [
            {"at": 0, "latency_ms": 100},
            {"at": 0.5, "latency_ms": 100, "parent": 1},
            {"at": 0.2, "latency_ms": 100},
            {"at": 0.3, "latency_ms": 100, "parent": 1},
        ],
        seconds=4,
    )

    svg = waterfall(operator_client, flow_id)

    order = [int(row.attrs["data-position"]) for row in svg.select("a", "waterfall-row")]
    assert order == [1, 4, 2, 3]
    assert axis_labels(svg) == ["0 s", "1 s", "2 s", "3 s", "4 s"]


def axis_labels(svg: Element) -> list[str]:
    return [text.text for text in svg.one("g", "waterfall-axis").select("text")]


def test_a_short_flows_axis_has_one_label_per_tick_and_none_twice(operator_client: Client, agent: APIClient) -> None:
    # Found on a demo flow of 2.4 ms: quarters labelled "0 ms, 0 ms, 1 ms, 1 ms, 2 ms".
    flow_id = flow_with(agent, [{"at": 0, "latency_ms": 1}, {"at": 0.001, "latency_ms": 1}], seconds=0.0024)

    labels = axis_labels(waterfall(operator_client, flow_id))

    assert labels == ["0 ms", "1 ms", "2 ms", "3 ms"]
    assert len(set(labels)) == len(labels)


def test_merges_and_steps_without_latency_are_marked(operator_client: Client, agent: APIClient) -> None:
    flow_id = flow_with(
        agent,
        [{"at": 0, "latency_ms": 100}, {"at": 0.1, "latency_ms": 100}, {"at": 0.3, "parent": 1, "also": [2]}],
    )

    rows = bars(waterfall(operator_client, flow_id))

    assert "waterfall-merge" in rows[3].classes() and "◆" in rows[3].text
    assert rows[3].select("rect", "waterfall-instant")
    assert rows[3].attrs["data-latency-ms"] == ""
    assert "no latency reported" in rows[3].one("title").raw_text()


def test_a_blocked_flow_says_so_and_flags_the_step(operator_client: Client, agent: APIClient) -> None:
    flow_id = flow_with(
        agent,
        [{"at": 0, "latency_ms": 10}, {"at": 0.1, "latency_ms": 10, "summary_text": "Mailed jane.roe@example.com"}],
    )

    page = doc(operator_client.get(f"/dashboard/admin/reasoning/{flow_id}"))

    banner = page.one(cls="banner-blocked")
    assert "Blocked for patients" in banner.text and "email" in banner.text
    assert banner.one("a").attrs["href"] == "#step-2"
    assert "waterfall-blocked" in bars(page.one("svg", "waterfall"))[2].classes()
    assert "blocked: email" in page.by_id("step-2").text
    assert "blocked" not in page.by_id("step-1").text


def test_a_safe_flow_has_no_banner(operator_client: Client, agent: APIClient) -> None:
    flow_id = flow_with(agent, [{"at": 0, "latency_ms": 10}])

    assert not doc(operator_client.get(f"/dashboard/admin/reasoning/{flow_id}")).select(cls="banner-blocked")


def test_inputs_and_outputs_show_keys_and_types_never_values(operator_client: Client, agent: APIClient) -> None:
    flow_id = flow_with(
        agent,
        [
            {
                "at": 0,
                "inputs": {"query": "statins after 75", "top_k": 5, "patient_name": "Zebulon Quixote"},
                "pii_fields": ["patient_name"],
                "outputs": {"hits": [1, 2]},
            }
        ],
    )

    page = doc(operator_client.get(f"/dashboard/admin/reasoning/{flow_id}"))

    data = page.by_id("step-1").one("details", "step-data").text
    assert "input query: string" in data and "input top_k: number" in data and "output hits: array" in data
    assert "PII patient_name: encrypted, never shown" in data
    body = operator_client.get(f"/dashboard/admin/reasoning/{flow_id}").content.decode()
    assert "statins after 75" not in body and "Zebulon" not in body
