"""/dashboard/admin/reasoning/: the operators' dashboard (reasoning.dashboard, core.charts).

Flows are planted through the ingest route at chosen times under a frozen clock, so the
hourly and daily buckets are known; the charts are read through their table fallbacks and
their SVG bars' titles, as an operator (or a screen reader) would read them.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from tests.html import Element, parse

pytestmark = pytest.mark.django_db

PAGE = "/dashboard/admin/reasoning/"
# The frozen "now" of these tests: 14:30 UTC on a Monday.
NOW = datetime(2026, 11, 30, 14, 30, tzinfo=UTC)
BLOCKED_SUMMARY = "Wrote to jane.roe@example.com"  # the guard refuses an e-mail address


def ingest(
    writer: APIClient,
    /,
    *,
    at: datetime,
    seconds: float | None = 2.0,
    state: str = "completed",
    steps: list[dict[str, Any]] | None = None,
    agent: str = "researcher",
    summary: str = "Reviewed the evidence",
) -> str:
    """One flow through the ingest route, opened ``at``, closed ``seconds`` later (None: still open)."""
    item: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "trigger_type": "user_question",
        "agent": agent,
        "started_at": at.isoformat(),
        "steps": steps if steps is not None else [{"kind": "retrieval", "agent": agent, "summary_text": summary}],
    }
    if seconds is not None:
        close: dict[str, Any] = {"flow_state": state, "ended_at": (at + timedelta(seconds=seconds)).isoformat()}
        if state == "aborted":
            close["abort_reason"] = "tool_error"
        else:
            close["outcome_type"] = "recommendation_delivered"
        item["close"] = close
    answer = writer.post("/api/reasoning/ingest", {"flows": [item]}, format="json").json()
    assert answer["created"] == 1, answer
    return str(item["id"])


def dashboard(client: Client) -> Element:
    response = client.get(PAGE)
    assert response.status_code == 200, response.content
    return parse(response.content)


def table(page: Element, chart: str) -> dict[str, list[str]]:
    """A chart's table fallback: each row's cells (after the first) by its first cell."""
    figure = page.one("figure", data_chart=chart)
    return {
        row.attrs["data-row"]: [cell.text for cell in row.select("td")]
        for row in figure.one("details").select("tr")
        if "data-row" in row.attrs
    }


def bar_titles(page: Element, chart: str) -> list[str]:
    figure = page.one("figure", data_chart=chart)
    return [rect.one("title").text for rect in figure.select("rect", cls="chart-bar")]


@pytest.fixture
def frozen() -> Any:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


# --- Who may see it ------------------------------------------------------------------


def test_only_operators_may_open_it(
    patient_client: Client, outsider_client: Client, client: Client, operator_client: Client
) -> None:
    assert operator_client.get(PAGE).status_code == 200
    assert patient_client.get(PAGE).status_code == 403
    assert outsider_client.get(PAGE).status_code == 403
    anonymous = client.get(PAGE)
    assert anonymous.status_code == 302
    assert anonymous["Location"] == f"/accounts/login/?next={PAGE}"


def test_it_links_to_the_operator_pages_and_leads_the_nav(operator_client: Client) -> None:
    page = dashboard(operator_client)

    links = page.one("nav", cls="dashboard-links")
    hrefs = [a.attrs["href"] for a in links.select("a")]
    assert hrefs == [
        "/dashboard/admin/reasoning/research-console",
        "/dashboard/admin/reasoning/flows",
        "/dashboard/admin/reasoning/pathway-library",
        "/dashboard/admin/reasoning/evaluation",
        "/dashboard/admin/reasoning/agents",
    ]
    account = page.one("nav", aria_label="Account")
    first = account.select("a")[0]
    assert (first.text, first.attrs["href"]) == ("Dashboard", PAGE)


def test_a_login_lands_an_operator_here(operator_client: Client) -> None:
    response = operator_client.get("/dashboard/")

    assert response.status_code == 302
    assert response["Location"] == PAGE


# --- What the charts say -------------------------------------------------------------


def test_with_no_flows_it_says_so_instead_of_drawing_empty_axes(operator_client: Client) -> None:
    page = dashboard(operator_client)

    assert "No flows yet" in page.one(id="dashboard-empty").text
    assert page.select("svg", cls="chart-svg") == []
    assert page.select("figure", cls="chart") == []


def test_abort_and_guard_blocked_rates_by_agent(operator_client: Client, agent: APIClient, frozen: Any) -> None:
    for _ in range(3):
        ingest(agent, at=NOW - timedelta(hours=2), agent="alpha")
    ingest(agent, at=NOW - timedelta(hours=2), agent="alpha", state="aborted")
    ingest(agent, at=NOW - timedelta(days=3), agent="beta", summary=BLOCKED_SUMMARY)
    ingest(agent, at=NOW - timedelta(days=3), agent="beta")
    ingest(agent, at=NOW - timedelta(minutes=10), agent="beta", seconds=None)  # active: not in the rates

    page = dashboard(operator_client)

    rates = table(page, "rates")
    # Agent | flows, closed, aborted, abort rate, blocked, blocked rate
    assert rates["alpha"] == ["4", "4", "1", "25 %", "0", "0 %"]
    assert rates["beta"] == ["3", "2", "0", "0 %", "1", "50 %"]
    titles = bar_titles(page, "rates")
    assert "alpha · abort rate: 25 %" in titles and "beta · guard-blocked rate: 50 %" in titles
    # Each agent links to its flows of the same 30 days on the flow list (durations are there).
    link = page.one("figure", data_chart="rates").one("tr", data_row="alpha").one("a").attrs["href"]
    assert link == (
        "/dashboard/admin/reasoning/flows?agent=alpha&created_after=2026-11-01T00%3A00%3A00%2B00%3A00"
        "&created_before=2026-12-01T00%3A00%3A00%2B00%3A00"
    )
    flows = parse(operator_client.get(link).content).select("tr")
    assert len([row for row in flows if "data-flow" in row.attrs]) == 4
    assert page.one(data_total="flows").text == "7"
    assert page.one(data_total="states").text == "5 / 1 / 1"
    assert page.one(data_total="abort-rate").text == "17 %"  # 1 of 6 closed
    assert page.one(data_total="blocked-rate").text == "17 %"


def test_hourly_buckets_count_flows_by_state_and_empty_hours_are_zero(
    operator_client: Client, agent: APIClient, frozen: Any
) -> None:
    ingest(agent, at=datetime(2026, 11, 30, 13, 10, tzinfo=UTC))
    ingest(agent, at=datetime(2026, 11, 30, 13, 50, tzinfo=UTC), state="aborted")
    ingest(agent, at=datetime(2026, 11, 30, 11, 5, tzinfo=UTC))
    ingest(agent, at=datetime(2026, 11, 30, 14, 20, tzinfo=UTC), seconds=None)
    ingest(agent, at=datetime(2026, 11, 29, 14, 20, tzinfo=UTC))  # 24 h 10 min ago: before the first hour

    page = dashboard(operator_client)

    hours = table(page, "hourly")
    assert len(hours) == 24
    assert next(iter(hours)) == "Nov 29, 15:00" and list(hours)[-1] == "Nov 30, 14:00"
    # Completed, aborted, active, total.
    assert hours["Nov 30, 13:00"] == ["1", "1", "0", "2"]
    assert hours["Nov 30, 12:00"] == ["0", "0", "0", "0"]
    assert hours["Nov 30, 11:00"] == ["1", "0", "0", "1"]
    assert hours["Nov 30, 14:00"] == ["0", "0", "1", "1"]
    assert sorted(bar_titles(page, "hourly")) == sorted(
        ["11:00 · completed: 1", "13:00 · completed: 1", "13:00 · aborted: 1", "14:00 · active: 1"]
    )
    days = table(page, "daily")
    assert len(days) == 30
    assert days["2026-11-30"] == ["2", "1", "1", "4"]
    assert days["2026-11-29"] == ["1", "0", "0", "1"]


def test_days_are_the_operators_days(
    operator_client: Client, agent: APIClient, frozen: Any, settings: Settings
) -> None:
    settings.TIME_ZONE = "America/New_York"
    ingest(agent, at=datetime(2026, 11, 30, 3, 30, tzinfo=UTC))  # 22:30 on the 29th in New York

    page = dashboard(operator_client)

    days = table(page, "daily")
    assert days["2026-11-29"] == ["1", "0", "0", "1"]
    assert days["2026-11-30"] == ["0", "0", "0", "0"]
    assert "Nov 29, 22:00" in table(page, "hourly")  # 14:30 UTC is 09:30 in New York
    assert list(table(page, "hourly"))[-1] == "Nov 30, 09:00"


def test_duration_percentiles_per_day(operator_client: Client, agent: APIClient, frozen: Any) -> None:
    day = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
    ingest(agent, at=day, seconds=2)
    ingest(agent, at=day, seconds=4, state="aborted")
    ingest(agent, at=day, seconds=None)  # still open: no duration

    page = dashboard(operator_client)

    durations = table(page, "durations")
    # Closed flows, p50, p95 (percentile_cont over 2 s and 4 s).
    assert durations["2026-11-28"] == ["2", "3.0 s", "3.9 s"]
    assert durations["2026-11-27"] == ["0", "—", "—"]
    figure = page.one("figure", data_chart="durations")
    points = {
        line.attrs["data-series"]: [c.one("title").text for c in line.select("circle")]
        for line in figure.select("g", cls="chart-line")
    }
    assert points == {"p50": ["2026-11-28 · p50: 3.0 s"], "p95": ["2026-11-28 · p95: 3.9 s"]}


def test_steps_per_flow_histogram(operator_client: Client, agent: APIClient, frozen: Any) -> None:
    def steps(n: int) -> list[dict[str, Any]]:
        return [{"kind": "retrieval", "agent": "researcher", "summary_text": "Read the notes"} for _ in range(n)]

    for n in (1, 2, 3, 5, 130):
        ingest(agent, at=NOW - timedelta(hours=1), steps=steps(n))
    ingest(agent, at=NOW - timedelta(hours=1), steps=steps(4), seconds=None)  # active: not counted

    buckets = table(dashboard(operator_client), "steps")

    assert list(buckets) == ["0", "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+"]
    assert {label: cells[0] for label, cells in buckets.items()} == {
        "0": "0",
        "1": "1",
        "2-3": "2",
        "4-7": "1",
        "8-15": "0",
        "16-31": "0",
        "32-63": "0",
        "64+": "1",
    }


def test_tokens_per_agent_and_model(operator_client: Client, agent: APIClient, frozen: Any) -> None:
    def step(who: str, model: str, i: int, o: int, r: int | None = None) -> dict[str, Any]:
        return {
            "kind": "llm_prompt",
            "agent": who,
            "summary_text": "Asked the model",
            "model": model,
            "input_tokens": i,
            "output_tokens": o,
            "reasoning_tokens": r,
        }

    ingest(agent, at=NOW - timedelta(hours=1), steps=[step("researcher", "gpt-x", 100, 20, 5)] * 2)
    ingest(
        agent,
        at=NOW - timedelta(days=2),
        steps=[step("researcher", "small-y", 10, 1), step("critic", "gpt-x", 1000, 300, 50)],
    )

    page = dashboard(operator_client)

    # Agent, model, steps, input, output, reasoning, total; the heaviest first.
    rows = [
        [cell.text for cell in row.iter() if cell.tag in ("th", "td")]
        for row in page.one("figure", data_chart="tokens").one("tbody").select("tr")
    ]
    assert rows == [
        ["critic", "gpt-x", "1", "1000", "300", "50", "1350"],
        ["researcher", "gpt-x", "2", "200", "40", "10", "250"],
        ["researcher", "small-y", "1", "10", "1", "0", "11"],
    ]
    titles = bar_titles(page, "tokens")
    assert "critic · gpt-x · input: 1k" in titles and "researcher · gpt-x · output: 40" in titles


def test_every_chart_is_an_image_with_a_title_and_a_description(
    operator_client: Client, agent: APIClient, frozen: Any
) -> None:
    ingest(
        agent,
        at=NOW - timedelta(hours=1),
        steps=[{"kind": "llm_prompt", "agent": "researcher", "summary_text": "Asked", "model": "m", "input_tokens": 5}],
    )
    ingest(agent, at=NOW - timedelta(hours=1), state="aborted")

    page = dashboard(operator_client)

    svgs = page.select("svg", cls="chart-svg")
    assert len(svgs) == 6
    for svg in svgs:
        assert svg.attrs["role"] == "img"
        assert "width" not in svg.attrs and svg.attrs["viewbox"].startswith("0 0 ")
        title, desc = (page.by_id(ident) for ident in svg.attrs["aria-labelledby"].split())
        assert title.tag == "title" and title.text and desc.tag == "desc" and desc.text
        assert all(rect.one("title").text for rect in svg.select("rect", cls="chart-bar"))
    for figure in page.select("figure", cls="chart"):
        assert figure.one("summary").text == "Table"


def test_cost_per_day_and_by_agent_and_model(operator_client: Client, agent: APIClient, frozen: Any) -> None:
    def call(who: str, model: str, i: int, o: int) -> dict[str, Any]:
        return {
            "kind": "llm_prompt",
            "agent": who,
            "summary_text": "Asked",
            "model": model,
            "input_tokens": i,
            "output_tokens": o,
        }

    # gpt-4o: $2.5 in, $10 out per million tokens; gpt-4o-mini $0.15 and $0.6; clinic-llm-7b has no price.
    ingest(agent, at=NOW - timedelta(hours=1), steps=[call("researcher", "gpt-4o", 100_000, 10_000)])  # $0.35
    ingest(agent, at=NOW - timedelta(days=2), steps=[call("critic", "gpt-4o-mini", 1_000_000, 0)])  # $0.15
    ingest(agent, at=NOW - timedelta(days=2), steps=[call("critic", "clinic-llm-7b", 500, 50)])

    page = dashboard(operator_client)

    days = table(page, "costs")
    assert days["2026-11-30"] == ["1", "$0.35"]
    assert days["2026-11-28"] == ["2", "$0.15"]  # the unpriced flow counts no cost, not $0
    assert days["2026-11-27"] == ["0", "—"]
    by = [
        [cell.text for cell in row.iter() if cell.tag in ("th", "td")]
        for row in page.one("figure", data_chart="cost-by").one("tbody").select("tr")
    ]
    assert by == [
        ["researcher", "gpt-4o", "1", "110,000", "$0.35"],
        ["critic", "gpt-4o-mini", "1", "1M", "$0.15"],
        ["critic", "clinic-llm-7b", "1", "550", "—"],
    ]
    assert "No known price for clinic-llm-7b" in page.one("figure", data_chart="cost-by").text


# --- Cost ----------------------------------------------------------------------------


def test_the_query_count_does_not_grow_with_the_flows(operator_client: Client, agent: APIClient) -> None:
    def count() -> tuple[int, int]:
        cache.clear()
        with CaptureQueriesContext(connection) as captured:
            assert "chart-svg" in operator_client.get(PAGE).content.decode()
        sql = [query["sql"] for query in captured.captured_queries]
        return len(sql), len([q for q in sql if "reasoning_flow" in q or "reasoning_step" in q])

    def plant(n: int) -> None:
        for i in range(n):
            ingest(agent, at=datetime.now(UTC) - timedelta(hours=i, minutes=1), agent=f"agent-{i % 4}")

    plant(4)
    few = count()
    plant(8)
    # Expect the same queries for 4 and 12 flows: the session, the user, the cache read; five
    # aggregates (hours, days, agents, step counts, tokens); the cache write (its count, a
    # savepoint, the key lookup, the insert, the release); the audit-chain lag banner's check.
    assert count() == few
    assert few[1] == 5


def test_a_second_look_within_a_minute_is_served_from_the_cache(
    operator_client: Client, agent: APIClient, frozen: Any
) -> None:
    ingest(agent, at=NOW - timedelta(hours=1))
    assert dashboard(operator_client).one(data_total="flows").text == "1"
    ingest(agent, at=NOW - timedelta(hours=1))

    with CaptureQueriesContext(connection) as captured:
        page = dashboard(operator_client)

    assert page.one(data_total="flows").text == "1"
    touched = [
        q["sql"] for q in captured.captured_queries if "reasoning_flow" in q["sql"] or "reasoning_step" in q["sql"]
    ]
    assert touched == []
    frozen.shift(timedelta(seconds=61))
    assert dashboard(operator_client).one(data_total="flows").text == "2"


def test_a_custom_range_of_days_charts_those_days_only(operator_client: Client, agent: APIClient, frozen: Any) -> None:
    ingest(agent, at=NOW - timedelta(days=40))  # Oct 21
    ingest(agent, at=NOW - timedelta(days=38))  # Oct 23
    ingest(agent, at=NOW - timedelta(hours=1))  # today, outside the range

    response = operator_client.get(PAGE, {"from": "2026-10-20", "to": "2026-10-25"})
    page = parse(response.content)

    days = table(page, "daily")
    assert list(days) == [f"2026-10-{day}" for day in range(20, 26)]
    assert days["2026-10-21"][-1] == "1" and days["2026-10-23"][-1] == "1"
    assert page.one(data_total="flows").text == "2"
    figure = page.one("figure", data_chart="daily")
    assert "Oct 20 to Oct 25, 2026" in figure.text
    # The hours are the range's last day's.
    assert "last 24 hours of Oct 25" in page.one("figure", data_chart="hourly").text
    assert page.one("input", name="from").attrs["value"] == "2026-10-20"

    week = parse(operator_client.get(PAGE, {"days": "7"}).content)
    assert len(table(week, "daily")) == 7 and week.one(data_total="flows").text == "1"


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"from": "2026-11-10", "to": "2026-11-01"}, "to: must not be before from"),
        ({"from": "last week"}, "from: must be a date"),
        ({"days": "12"}, "days: must be one of 7, 30, 90"),
        ({"from": "2024-01-01", "to": "2026-11-01"}, "to: the range may span at most 366 days"),
    ],
)
def test_a_bad_range_is_named_and_the_default_days_shown(
    operator_client: Client, agent: APIClient, frozen: Any, query: dict[str, str], says: str
) -> None:
    ingest(agent, at=NOW - timedelta(hours=1))
    response = operator_client.get(PAGE, query)

    assert response.status_code == 200
    page = parse(response.content)
    assert says in page.one("p", cls="error").text
    assert len(table(page, "daily")) == 30
