"""/dashboard/admin/reasoning/agents: one row per agent (reasoning.agents.list_page).

Sessions are planted through the services (open, step, close, record the outcome), so the
numbers are the ones an operator would count; drift reports are planted with chosen levels.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from reasoning.agents.list_page import spark_points
from reasoning.models import DriftReport
from reasoning.outcomes import services as outcomes_services
from reasoning.recording import services as recording_services
from tests.factories import make_flow
from tests.html import Element, parse

pytestmark = pytest.mark.django_db

PAGE = "/dashboard/admin/reasoning/agents"
ACTOR = "test:agents-page"
UNKNOWN = object()  # record no outcome at all
_ended = itertools.count()


def plant(agent: str, session: str, confidence: float, outcome: object = UNKNOWN) -> None:
    """One closed decision of ``agent`` in ``session``; its outcome recorded unless UNKNOWN."""
    flow, _ = recording_services.start_flow(
        {"trigger_type": "claim_review", "agent": agent, "session_id": session}, actor=ACTOR
    )
    recording_services.add_steps(
        flow.pk,
        [{"kind": "verdict", "agent": agent, "summary_text": "Kept the claim", "confidence": confidence}],
        actor=ACTOR,
    )
    recording_services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type="claim_created")
    if outcome is not UNKNOWN:
        assert outcome is None or isinstance(outcome, bool)
        outcomes_services.record_outcome(flow.pk, "checked", outcome, actor=ACTOR)


def report(agent: str, session: str, level: str) -> None:
    DriftReport.objects.create(
        agent=agent,
        session_id=session,
        session_ended_at=datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=next(_ended)),
        baseline_sessions=5,
        decisions=1,
        level=level,
    )


def rows(client: Client) -> dict[str, Element]:
    response = client.get(PAGE)
    assert response.status_code == 200, response.content
    return {
        row.attrs["data-agent"]: row
        for row in parse(response.content).by_id("agents").select("tr")
        if "data-agent" in row.attrs
    }


def cell(row: Element, name: str) -> str:
    return row.one("td", data_cell=name).text


def test_only_operators_may_open_it(
    patient_client: Client, outsider_client: Client, client: Client, operator_client: Client
) -> None:
    assert operator_client.get(PAGE).status_code == 200
    assert patient_client.get(PAGE).status_code == 403
    assert outsider_client.get(PAGE).status_code == 403
    anonymous = client.get(PAGE)
    assert anonymous.status_code == 302
    assert anonymous["Location"] == f"/accounts/login/?next={PAGE}"


def test_a_post_is_refused(operator_client: Client) -> None:
    assert operator_client.post(PAGE).status_code == 405


def test_each_agent_shows_its_sessions_decisions_accuracy_and_confidence(operator_client: Client) -> None:
    # alpha: two sessions; 2 right, 1 wrong, 1 unknown (null), 1 never recorded -> accuracy 2/3.
    plant("alpha", "a-1", 0.9, True)
    plant("alpha", "a-1", 0.7, False)
    plant("alpha", "a-2", 0.8, True)
    plant("alpha", "a-2", 0.6, None)
    plant("alpha", "", 0.5)  # a decision outside any session counts, the session does not
    plant("beta", "b-1", 0.4)

    found = rows(operator_client)

    assert list(found) == ["alpha", "beta"]
    alpha, beta = found["alpha"], found["beta"]
    assert (cell(alpha, "sessions"), cell(alpha, "decisions")) == ("2", "5")
    assert cell(alpha, "accuracy") == "67 %"
    assert cell(alpha, "confidence") == "0.70"
    assert (cell(beta, "sessions"), cell(beta, "decisions"), cell(beta, "accuracy")) == ("1", "1", "—")
    assert cell(beta, "confidence") == "0.40"


def test_each_name_links_to_the_agent_page(operator_client: Client) -> None:
    plant("alpha", "a-1", 0.9)
    plant("beta", "b-1", 0.9)

    link = rows(operator_client)["alpha"].one("a").attrs["href"]

    assert link == "/dashboard/admin/reasoning/agents/alpha"
    assert parse(operator_client.get(link).content).one("h1").text == "Agent alpha"


@pytest.mark.parametrize(
    ("level", "pill"),
    [
        ("normal", "pill-healthy"),
        ("watch", "pill-warn"),
        ("alert", "pill-critical"),
        ("investigate", "pill-critical"),
        ("insufficient_baseline", "pill-neutral"),
    ],
)
def test_the_latest_drift_level_is_a_coloured_pill(operator_client: Client, level: str, pill: str) -> None:
    plant("alpha", "a-1", 0.9)
    plant("alpha", "a-2", 0.9)
    report("alpha", "a-1", "investigate" if level == "normal" else "normal")
    report("alpha", "a-2", level)  # ended later: this one shows

    shown = rows(operator_client)["alpha"].one("td", data_cell="drift").one("span")

    assert shown.attrs["data-level"] == level
    assert pill in shown.classes()
    assert shown.text == level.replace("_", " ")


def test_an_agent_without_a_report_says_so(operator_client: Client) -> None:
    plant("alpha", "a-1", 0.9)

    assert cell(rows(operator_client)["alpha"], "drift") == "no report yet"


def test_the_sparkline_draws_accuracy_and_confidence_of_the_sessions_oldest_first(operator_client: Client) -> None:
    plant("alpha", "a-1", 1.0, True)
    plant("alpha", "a-2", 0.5, False)
    plant("alpha", "a-3", 0.0)  # no judged outcome: accuracy has no point here

    svg = rows(operator_client)["alpha"].one("svg", cls="sparkline")

    assert svg.attrs["role"] == "img"
    assert svg.one("title").text == (
        "Last 3 sessions, oldest first. Accuracy: 100%, 0%, —. Mean confidence: 1.00, 0.50, 0.00."
    )
    # 120 x 32 with 3 units of padding: x at 3, 60, 117; 1 at y 3, 0 at y 29.
    assert svg.one("polyline", cls="spark-accuracy").attrs["points"] == "3,3 60,29"
    assert svg.one("polyline", cls="spark-confidence").attrs["points"] == "3,3 60,16 117,29"


def test_spark_points_centre_a_single_value_and_draw_one_point_per_value() -> None:
    assert spark_points([0.5]) == "60,16"
    assert spark_points([]) == ""
    assert len(spark_points([1.0] * 20).split()) == 20


def test_only_the_last_twenty_sessions_are_drawn(operator_client: Client) -> None:
    for number in range(22):
        plant("alpha", f"a-{number:02}", 0.9)

    title = rows(operator_client)["alpha"].one("svg", cls="sparkline").one("title").text

    assert title.startswith("Last 20 sessions")
    assert cell(rows(operator_client)["alpha"], "sessions") == "22"


def test_the_page_reads_in_the_same_queries_whatever_the_number_of_agents_and_sessions(
    operator_client: Client,
) -> None:
    plant("alpha", "a-1", 0.9, True)
    with CaptureQueriesContext(connection) as few:
        rows(operator_client)
    for agent in ("beta", "gamma", "delta"):
        for number in range(4):
            plant(agent, f"{agent}-{number}", 0.8, number % 2 == 0)
            report(agent, f"{agent}-{number}", "watch")

    # Expect 4 queries: the login session, its user, every agent's row in one statement, then
    # the audit-chain lag banner's check (base.html).
    with CaptureQueriesContext(connection) as many:
        assert len(rows(operator_client)) == 4
    assert len(many) == len(few) == 4, [query["sql"][:80] for query in many.captured_queries]


def test_each_agent_shows_its_tokens_and_cost_on_the_list_and_its_page(operator_client: Client) -> None:
    # gpt-4o: $2.5 in, $10 out per million tokens; clinic-llm-7b has no known price.
    for inputs in (100_000, 20_000):
        make_flow(
            steps=[
                {
                    "kind": "llm_prompt",
                    "agent": "critic",
                    "summary_text": "Asked",
                    "model": "gpt-4o",
                    "input_tokens": inputs,
                    "output_tokens": inputs // 10,
                }
            ],
            agent="critic",
        )
    make_flow(
        steps=[
            {
                "kind": "llm_prompt",
                "agent": "triage",
                "summary_text": "Asked",
                "model": "clinic-llm-7b",
                "input_tokens": 500,
                "output_tokens": 50,
            }
        ],
        agent="triage",
    )
    plant("researcher", "s-1", 0.9)

    page = parse(operator_client.get(PAGE).content)

    def cells(agent: str) -> tuple[str, str]:
        row = page.one("tr", data_agent=agent)
        return row.one("td", data_cell="tokens").text, row.one("td", data_cell="cost").text

    assert cells("critic") == ("132,000", "$0.42")  # 120,000 in x $2.5 + 12,000 out x $10 per million
    assert cells("triage") == ("550", "—")  # no known price: no cost, never $0
    assert cells("researcher") == ("—", "—")
    agent = parse(operator_client.get(f"{PAGE}/critic").content)
    assert agent.one("dd", data_total="tokens").text == "120,000 in / 12,000 out"
    assert agent.one("dd", data_total="cost").text == "$0.42"
