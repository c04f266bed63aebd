"""/dashboard/admin/reasoning/flows: the operators' flow list, and the search it shares with
GET /admin/v1/reasoning/flows (filters, orders, keyset pages, the summary strip)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from patients.models import Patient
from tests.html import parse

pytestmark = pytest.mark.django_db

PAGE = "/dashboard/admin/reasoning/flows"
SUMMARY = "/dashboard/admin/reasoning/flows/summary"
API = "/admin/v1/reasoning/flows"


def ingest_flow(
    writer: APIClient,
    /,
    *,
    ago: timedelta = timedelta(minutes=5),
    seconds: float | None = 2.0,
    steps: int = 2,
    confidence: float = 0.9,
    summary: str = "Reviewed the evidence",
    step: dict[str, Any] | None = None,
    **fields: Any,
) -> str:
    """One flow through the ingest route, begun ``ago`` and lasting ``seconds`` (None: still open)."""
    started = timezone.now() - ago
    item: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "trigger_type": "user_question",
        "agent": "researcher",
        "started_at": started.isoformat(),
        "steps": [
            {
                "kind": "retrieval",
                "agent": fields.get("agent", "researcher"),
                "summary_text": summary,
                "confidence": confidence,
                **(step or {}),
            }
            for _ in range(steps)
        ],
        **fields,
    }
    if seconds is not None:
        item["close"] = {
            "flow_state": "completed",
            "outcome_type": "recommendation_delivered",
            "ended_at": (started + timedelta(seconds=seconds)).isoformat(),
        }
    answer = writer.post("/api/reasoning/ingest", {"flows": [item]}, format="json").json()
    assert answer["created"] == 1, answer
    return str(item["id"])


def listed(response: Any) -> list[str]:
    """The flow ids of the page's table, in order."""
    assert response.status_code == 200, response.content
    return [row.attrs["data-flow"] for row in parse(response.content).select("tr") if "data-flow" in row.attrs]


def api_ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()]


def one_at_a_time(operator: APIClient, sort: str) -> list[str]:
    """Every flow id the API lists in ``sort`` order, one page of one flow at a time (the cursors)."""
    seen: list[str] = []
    params: dict[str, str] = {"sort": sort, "limit": "1"}
    for _ in range(10):
        response = operator.get(API, params)
        seen += api_ids(response)
        cursor = response.headers.get("X-Next-Cursor")
        if not cursor:
            break
        params["cursor"] = cursor
    return seen


def test_operators_see_the_newest_flows_first_with_their_facts(operator_client: Client, agent: APIClient) -> None:
    older = ingest_flow(agent, ago=timedelta(hours=2), trigger_ref="bench/run-1/case-1")
    newer = ingest_flow(agent, ago=timedelta(minutes=3), seconds=None, steps=1)

    response = operator_client.get(PAGE)

    assert listed(response) == [newer, older]
    page = parse(response.content)
    row = page.one("tr", data_flow=older)
    assert row.one("a", title=older).attrs["href"] == f"/dashboard/admin/reasoning/{older}"
    assert row.one("code").text == uuid.UUID(older).hex[:8]
    assert row.one("button", cls="copy").attrs["data-copy"] == older
    assert "bench/run-1/case-1" in row.text and "completed" in row.text
    assert "2.0 s" in row.text and "2 h ago" in row.text
    open_row = page.one("tr", data_flow=newer).text
    assert "active" in open_row and "so far" in open_row and "3 min ago" in open_row
    summary = parse(operator_client.get(page.one(id="flow-summary").attrs["hx-get"]).content)
    assert summary.one(data_summary="total").text == "2"
    assert summary.one(data_summary="states").text == "1 / 0 / 1"


def test_every_operator_page_links_to_the_list(operator_client: Client) -> None:
    page = parse(operator_client.get("/dashboard/admin/research-console").content)
    assert page.select("a", href=PAGE)


def test_only_operators_may_open_it(patient_client: Client, client: Client) -> None:
    assert patient_client.get(PAGE).status_code == 403
    assert client.get(PAGE).status_code in (302, 403)


def test_filters_combine_and_stay_in_the_url(operator_client: Client, agent: APIClient) -> None:
    critic = ingest_flow(agent, agent="critic", trigger_type="claim_review")
    ingest_flow(agent, agent="critic")
    ingest_flow(agent, agent="researcher", trigger_type="claim_review")

    response = operator_client.get(PAGE, {"agent": "critic", "trigger_type": "claim_review"})

    assert listed(response) == [critic]
    page = parse(response.content)
    assert page.one("input", name="agent").attrs["value"] == "critic"
    assert page.one("input", name="trigger_type").attrs["value"] == "claim_review"


def test_free_text_matches_a_ref_prefix_a_trace_id_prefix_or_a_short_id(
    operator_client: Client, agent: APIClient
) -> None:
    by_ref = ingest_flow(agent, trigger_ref="benchmark/run-7/case-3")
    by_trace = ingest_flow(agent, trace_id="turn-abc-123")
    other = ingest_flow(agent, trigger_ref="chat/1")

    assert listed(operator_client.get(PAGE, {"q": "benchmark/run-7/"})) == [by_ref]
    assert listed(operator_client.get(PAGE, {"q": "turn-abc"})) == [by_trace]
    assert listed(operator_client.get(PAGE, {"q": uuid.UUID(other).hex[:8]})) == [other]
    assert listed(operator_client.get(PAGE, {"q": other})) == [other]


def test_guard_patient_and_period_filters(
    operator_client: Client, agent: APIClient, consenting_patient: Patient
) -> None:
    blocked = ingest_flow(agent, summary="Wrote to jane.roe@example.com")
    with_patient = ingest_flow(agent, patient_id=str(consenting_patient.pk))
    old = ingest_flow(agent, ago=timedelta(days=3))

    assert listed(operator_client.get(PAGE, {"guard": "blocked"})) == [blocked]
    assert listed(operator_client.get(PAGE, {"guard": "blocked:email"})) == [blocked]
    assert listed(operator_client.get(PAGE, {"guard": "blocked:ssn"})) == []
    assert set(listed(operator_client.get(PAGE, {"guard": "safe"}))) == {with_patient, old}
    assert listed(operator_client.get(PAGE, {"has_patient": "true"})) == [with_patient]
    assert old not in listed(operator_client.get(PAGE, {"period": "24h"}))
    assert old in listed(operator_client.get(PAGE, {"period": "7d"}))
    blocked_row = parse(operator_client.get(PAGE, {"guard": "blocked"}).content).one("tr", data_flow=blocked)
    assert "blocked: email" in blocked_row.text
    assert "jane.roe" not in operator_client.get(PAGE).content.decode()  # rule names, never the text


def test_the_failures_filter_finds_flows_with_a_failed_step(operator_client: Client, agent: APIClient) -> None:
    failed = ingest_flow(agent, steps=1, step={"kind": "tool_call", "outcome": "error", "error_type": "Timeout"})
    clean = ingest_flow(agent)

    assert listed(operator_client.get(PAGE, {"failed": "true"})) == [failed]
    assert listed(operator_client.get(PAGE, {"failed": "false"})) == [clean]
    form = parse(operator_client.get(PAGE, {"failed": "true"}).content).one("select", name="failed")
    assert form.one("option", selected="").attrs["value"] == "true"


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("duration", ["long", "mid", "short", "open"]),
        ("steps", ["long", "short", "mid", "open"]),
        ("confidence", ["mid", "short", "long", "open"]),
    ],
)
def test_sorts_page_through_every_flow_once(
    operator: APIClient, agent: APIClient, sort: str, expected: list[str]
) -> None:
    made = {
        "long": ingest_flow(agent, seconds=90, steps=5, confidence=0.8),
        "mid": ingest_flow(agent, seconds=30, steps=1, confidence=0.4),
        "short": ingest_flow(agent, seconds=1, steps=3, confidence=0.6),
        "open": ingest_flow(agent, seconds=None, steps=0),
    }
    names = {flow_id: name for name, flow_id in made.items()}

    assert [names[flow_id] for flow_id in one_at_a_time(operator, sort)] == expected


def test_bad_filters_are_named_on_the_page_and_400_in_the_api(operator_client: Client, operator: APIClient) -> None:
    page = parse(operator_client.get(PAGE, {"sort": "sideways"}).content)
    assert "sort: must be one of newest, duration, steps, confidence" in page.one(role="alert").text

    for params, field in [
        ({"sort": "sideways"}, "sort"),
        ({"guard": "maybe"}, "guard"),
        ({"period": "1y"}, "period"),
        ({"has_patient": "perhaps"}, "has_patient"),
        ({"outcome_type": "not a label"}, "outcome_type"),
        ({"sort": "steps", "cursor": "bm90LWEtY3Vyc29y"}, "cursor"),
    ]:
        response = operator.get(API, params)
        assert response.status_code == 400, params
        assert field in response.json(), (params, response.json())


def test_a_cursor_of_one_sort_is_refused_by_another(operator: APIClient, agent: APIClient) -> None:
    ingest_flow(agent)
    ingest_flow(agent)
    cursor = operator.get(API, {"limit": "1"}).headers["X-Next-Cursor"]

    response = operator.get(API, {"limit": "1", "sort": "duration", "cursor": cursor})

    assert response.status_code == 400
    assert "cursor" in response.json()


def test_the_next_page_link_keeps_the_filters(operator_client: Client, agent: APIClient) -> None:
    made = [ingest_flow(agent, agent="critic", ago=timedelta(minutes=n + 1)) for n in range(55)]
    ingest_flow(agent, agent="researcher")

    first = parse(operator_client.get(PAGE, {"agent": "critic"}).content)
    next_link = first.one("a", rel="next").attrs["href"]
    second = operator_client.get(PAGE + next_link)

    assert "agent=critic" in next_link
    assert len([row for row in first.select("tr") if "data-flow" in row.attrs]) == 50
    assert listed(second) == made[50:]


def test_an_htmx_request_gets_the_results_only(operator_client: Client, agent: APIClient) -> None:
    flow_id = ingest_flow(agent)

    response = operator_client.get(PAGE, {"agent": "researcher"}, HTTP_HX_REQUEST="true")

    assert listed(response) == [flow_id]
    assert b"<html" not in response.content and b"<form" not in response.content


def test_the_summary_strip_covers_the_whole_filtered_set(operator_client: Client, agent: APIClient) -> None:
    for seconds in (1, 2, 3, 4):
        ingest_flow(agent, seconds=seconds)
    ingest_flow(agent, seconds=None)
    ingest_flow(agent, summary="Called 555-123-4567 for the results")

    page = parse(operator_client.get(SUMMARY).content)

    assert page.one(data_summary="total").text == "6"
    assert page.one(data_summary="states").text == "5 / 0 / 1"
    assert page.one(data_summary="blocked").text == "20 %"
    # percentile_cont over the closed flows' durations 1, 2, 2, 3, 4 s.
    assert page.one(data_summary="duration").text == "2.0 s / 3.8 s"


def test_the_summary_follows_the_filters_and_is_cached_for_a_minute(operator_client: Client, agent: APIClient) -> None:
    ingest_flow(agent, agent="critic")
    ingest_flow(agent, agent="researcher")
    page = parse(operator_client.get(PAGE, {"agent": "critic", "sort": "steps"}).content)
    url = page.one(id="flow-summary").attrs["hx-get"]

    assert url == f"{SUMMARY}?agent=critic"  # the order does not change the counts
    assert parse(operator_client.get(url).content).one(data_summary="total").text == "1"
    ingest_flow(agent, agent="critic")
    assert parse(operator_client.get(url).content).one(data_summary="total").text == "1"
    with time_machine.travel(timezone.now() + timedelta(seconds=61)):
        assert parse(operator_client.get(url).content).one(data_summary="total").text == "2"
    assert operator_client.get(SUMMARY, {"guard": "maybe"}).status_code == 400


def test_the_query_count_does_not_grow_with_the_page(operator_client: Client, agent: APIClient) -> None:
    def count(flows: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert len(listed(operator_client.get(PAGE))) == flows
        return len(captured.captured_queries)

    ingest_flow(agent)
    few = count(1)
    for _ in range(30):
        ingest_flow(agent)
    # Expect the same queries for 1 and 31 flows: the session, the user, the page of flows.
    assert count(31) == few


def test_the_flow_page_links_its_trace_to_the_list(operator_client: Client, agent: APIClient) -> None:
    flow_id = ingest_flow(agent, trace_id="turn-xyz")

    page = parse(operator_client.get(f"/dashboard/admin/reasoning/{flow_id}").content)

    assert page.select("a", href=f"{PAGE}?trace_id=turn-xyz")
    assert listed(operator_client.get(PAGE, {"trace_id": "turn-xyz"})) == [flow_id]


def test_labels_wrap_only_at_separators(operator_client: Client, agent: APIClient) -> None:
    ingest_flow(agent, trigger_type="user_question_followup")

    html = operator_client.get(PAGE).content.decode()

    assert "user_<wbr>question_<wbr>followup" in html


# --- Model, tokens and cost (issue 41, parts 2 and 5) ----------------------------------------


def model_call(model: str, inputs: int, outputs: int) -> dict[str, Any]:
    return {"kind": "llm_prompt", "model": model, "input_tokens": inputs, "output_tokens": outputs}


@pytest.fixture
def priced(agent: APIClient) -> dict[str, str]:
    """Four flows: two gpt-4o calls of different sizes, a model without a price, and no model at all."""
    return {
        # 2 steps each: gpt-4o at $2.5 in / $10 out per million tokens.
        "big": ingest_flow(agent, ago=timedelta(minutes=40), step=model_call("gpt-4o", 100_000, 10_000)),  # $0.70
        "small": ingest_flow(agent, ago=timedelta(minutes=30), step=model_call("gpt-4o", 1_000, 100)),  # $0.007
        "private": ingest_flow(agent, ago=timedelta(minutes=20), step=model_call("clinic-llm-7b", 500_000, 1)),
        "none": ingest_flow(agent, ago=timedelta(minutes=10)),
    }


def test_the_list_shows_each_flows_model_tokens_and_cost(operator_client: Client, priced: dict[str, str]) -> None:
    page = parse(operator_client.get(PAGE).content)

    def cells(name: str) -> tuple[str, str, str]:
        row = page.one("tr", data_flow=priced[name])
        return (
            row.one("td", cls="flow-model").text.strip(),
            row.one("td", cls="flow-tokens").text,
            row.one("td", cls="flow-cost").text,
        )

    assert cells("big") == ("gpt-4o", "220,000", "$0.70")
    assert cells("small") == ("gpt-4o", "2,200", "$0.0070")
    assert cells("private") == ("clinic-llm-7b", "1M", "—")  # an unknown price is no cost, never $0
    assert cells("none") == ("—", "—", "—")
    headers = [cell.text for cell in page.one("table", cls="flow-list").one("thead").select("th")]
    assert {"Model", "Tokens", "Cost"} <= set(headers)


@pytest.mark.parametrize(
    ("sort", "expected"),
    [("cost", ["big", "small", "none", "private"]), ("tokens", ["private", "big", "small", "none"])],
)
def test_cost_and_token_sorts_page_through_every_flow_once(
    operator: APIClient, priced: dict[str, str], sort: str, expected: list[str]
) -> None:
    names = {flow_id: name for name, flow_id in priced.items()}
    assert [names[flow_id] for flow_id in one_at_a_time(operator, sort)] == expected
    body = operator.get(API, {"sort": sort, "limit": "1"}).json()[0]
    assert {"model_names", "input_tokens", "output_tokens", "cost_usd"} <= set(body)


def test_the_model_filter_finds_the_flows_that_called_it(
    operator_client: Client, operator: APIClient, priced: dict[str, str]
) -> None:
    assert api_ids(operator.get(API, {"model": "gpt-4o"})) == [priced["small"], priced["big"]]
    assert listed(operator_client.get(PAGE, {"model": "clinic-llm-7b"})) == [priced["private"]]
    assert api_ids(operator.get(API, {"model": "gpt-4"})) == []  # exact, not a prefix


def test_the_user_filter_finds_a_users_flows_by_the_id_it_never_stores(
    operator_client: Client, operator: APIClient, agent: APIClient
) -> None:
    mine = ingest_flow(agent, user_id="patient-portal-user-77")
    ingest_flow(agent, user_id="someone-else")
    ingest_flow(agent)

    assert api_ids(operator.get(API, {"user_id": "patient-portal-user-77"})) == [mine]
    assert listed(operator_client.get(PAGE, {"user_id": "patient-portal-user-77"})) == [mine]
    stored = operator.get(f"/admin/v1/reasoning/flows/{mine}").json()
    assert "patient-portal-user-77" not in str(stored) and len(stored["user_ref"]) == 32


def test_a_custom_range_from_the_pages_fields_in_the_operators_time_zone(
    operator_client: Client, agent: APIClient, settings: Any
) -> None:
    settings.TIME_ZONE = "Europe/Paris"
    with time_machine.travel("2026-11-30T12:00:00+00:00", tick=False):
        early = ingest_flow(agent, ago=timedelta(hours=5))  # 07:00 UTC, 08:00 in Paris
        middle = ingest_flow(agent, ago=timedelta(hours=3))  # 10:00 in Paris
        ingest_flow(agent, ago=timedelta(hours=1))  # 12:00 in Paris

        response = operator_client.get(PAGE, {"from": "2026-11-30T08:30", "to": "2026-11-30T11:00"})
        assert listed(response) == [middle]
        page = parse(response.content)
        assert page.one("input", name="from").attrs["value"] == "2026-11-30T08:30"
        assert page.one("input", name="to").attrs["value"] == "2026-11-30T11:00"

        assert listed(operator_client.get(PAGE, {"from": "2026-11-30"})) != []  # a date alone: its midnight
        assert early in listed(operator_client.get(PAGE, {"to": "2026-11-30T08:01"}))
        bad = parse(operator_client.get(PAGE, {"from": "yesterday"}).content)
        assert "from:" in bad.one("p", cls="error").text
