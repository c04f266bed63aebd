"""/dashboard/admin/reasoning/agents/{agent}: one agent's drift, sessions and review
(reasoning.agents.agent_page).

Sessions are planted through the services (open, step, close, record the outcome); drift
reports are planted with chosen signals, as the drift job would store them.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent
from reasoning.agents import agent_page
from reasoning.models import DriftReport
from reasoning.outcomes import services as outcomes_services
from reasoning.recording import services as recording_services
from tests.html import Element, parse

pytestmark = pytest.mark.django_db

ACTOR = "test:agent-page"
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
_hours = itertools.count()


def url(agent: str = "alpha") -> str:
    return f"/dashboard/admin/reasoning/agents/{agent}"


def plant(
    session: str,
    *,
    agent: str = "alpha",
    confidence: float = 0.9,
    correct: bool | None = True,
    trigger_type: str = "claim_review",
    outcome_type: str = "claim_created",
) -> str:
    """One closed decision of ``agent`` in ``session``, its outcome recorded as ``correct``."""
    flow, _ = recording_services.start_flow(
        {"trigger_type": trigger_type, "agent": agent, "session_id": session}, actor=ACTOR
    )
    recording_services.add_steps(
        flow.pk,
        [
            {"kind": "llm_prompt", "agent": agent, "summary_text": "Read the claim", "latency_ms": 4200},
            {
                "kind": "verdict",
                "agent": agent,
                "summary_text": "Kept the claim",
                "rationale": "Two sources agree",
                "confidence": confidence,
            },
        ],
        actor=ACTOR,
    )
    recording_services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type=outcome_type)
    outcomes_services.record_outcome(flow.pk, "checked", correct, actor=ACTOR)
    return str(flow.pk)


def signals(**levels: str) -> dict[str, dict[str, Any]]:
    values = {
        "confidence": (0.62, 0.84),
        "decisions": (4.0, 8.5),
        "escalation_rate": (0.25, 0.1),
        "accuracy": (0.5, 0.9),
        "decision_mix": (0.12, 0.08),
    }
    return {
        name: {"value": value, "baseline": baseline, "level": levels.get(name, "normal")}
        for name, (value, baseline) in values.items()
    }


def report(session: str, level: str = "alert", *, agent: str = "alpha", **levels: str) -> DriftReport:
    return DriftReport.objects.create(
        agent=agent,
        session_id=session,
        session_ended_at=T0 + timedelta(hours=next(_hours)),
        baseline_sessions=20,
        decisions=4,
        level=level,
        signals=signals(**levels),
    )


def page(client: Client, agent: str = "alpha", status: int = 200, **params: str) -> Element:
    response = client.get(url(agent), params)
    assert response.status_code == status, response.content
    return parse(response.content)


def signal_rows(html: Element) -> dict[str, Element]:
    return {
        row.attrs["data-signal"]: row for row in html.by_id("drift-signals").select("tr") if "data-signal" in row.attrs
    }


def session_rows(html: Element) -> dict[str, Element]:
    return {
        row.attrs["data-session"]: row for row in html.by_id("session-list").select("tr") if "data-session" in row.attrs
    }


def cell(row: Element, name: str) -> str:
    return row.one("td", data_cell=name).text


# --- Who may open it, and which agents exist ---------------------------------------------------


def test_only_operators_may_open_it(
    patient_client: Client, outsider_client: Client, client: Client, operator_client: Client
) -> None:
    plant("a-1")

    assert operator_client.get(url()).status_code == 200
    assert patient_client.get(url()).status_code == 403
    assert outsider_client.get(url()).status_code == 403
    anonymous = client.get(url())
    assert anonymous.status_code == 302
    assert anonymous["Location"] == f"/accounts/login/?next={url()}"


def test_a_post_is_refused(operator_client: Client) -> None:
    plant("a-1")

    assert operator_client.post(url()).status_code == 405


@pytest.mark.parametrize("agent", ["nobody", "with%20spaces", "a" * 101, "%00"])
def test_an_agent_without_flows_or_not_a_label_is_the_not_found_page(operator_client: Client, agent: str) -> None:
    plant("a-1")
    before = AuditEvent.objects.count()

    html = page(operator_client, agent, status=404)

    assert html.one("h1").text == "Agent not found"
    assert AuditEvent.objects.count() == before  # nothing was read, nothing audited


def test_the_totals_are_the_agents_row_of_the_agents_page(operator_client: Client) -> None:
    plant("a-1", confidence=0.9, correct=True)
    plant("a-1", confidence=0.7, correct=False)
    plant("a-2", confidence=0.8, correct=None)
    plant("b-1", agent="beta")

    totals = page(operator_client).by_id("agent-totals")

    shown = {dd.attrs["data-total"]: dd.text for dd in totals.select("dd") if "data-total" in dd.attrs}
    assert shown == {
        "sessions": "2",
        "decisions": "3",
        "accuracy": "50 %",
        "confidence": "0.80",
        "tokens": "—",  # no step reported model usage: unknown, not zero
        "cost": "—",
    }
    assert totals.one("a").attrs["href"] == "/dashboard/admin/reasoning/flows?agent=alpha"


# --- Drift ---------------------------------------------------------------------------------------


def test_the_latest_report_shows_each_signal_beside_its_baseline_with_its_level(operator_client: Client) -> None:
    plant("a-1")
    report("a-0", "normal")
    report("a-1", "alert", confidence="watch", decisions="alert")  # ended later: shown

    html = page(operator_client)

    drift = html.by_id("drift")
    assert drift.one("strong", data_report_session="").text == "a-1"
    pill = drift.one("span", data_report_level="")
    assert (pill.attrs["data-level"], pill.text) == ("alert", "alert")
    rows = signal_rows(html)
    assert list(rows) == ["confidence", "decisions", "escalation_rate", "accuracy", "decision_mix"]
    shown = {name: (cell(row, "value"), cell(row, "baseline")) for name, row in rows.items()}
    assert shown == {
        "confidence": ("0.62", "0.84"),
        "decisions": ("4", "8.5"),
        "escalation_rate": ("25%", "10%"),
        "accuracy": ("50%", "90%"),
        "decision_mix": ("0.12", "0.08"),
    }
    levels = {name: row.one("td", data_cell="level").one("span").attrs["data-level"] for name, row in rows.items()}
    assert levels == {
        "confidence": "watch",
        "decisions": "alert",
        "escalation_rate": "normal",
        "accuracy": "normal",
        "decision_mix": "normal",
    }
    assert "pill-critical" in rows["decisions"].one("td", data_cell="level").one("span").classes()


def test_each_signal_reads_out_its_change_and_thresholds(operator_client: Client) -> None:
    plant("a-1")
    report("a-1")

    rows = signal_rows(page(operator_client))

    # confidence fell (0.84 - 0.62) / 0.84 = 26 %; decisions changed |4 - 8.5| / 8.5 = 53 %;
    # escalations rose (0.25 - 0.1) / 0.1 = 150 %; decision_mix is the distance itself.
    changes = {name: row.one("td", data_cell="change").text for name, row in rows.items()}
    assert changes["confidence"].startswith("fall 26%")
    assert "fall ≥ 10% watch, 20% alert, 35% investigate" in changes["confidence"]
    assert changes["decisions"].startswith("change 53%")
    assert changes["escalation_rate"].startswith("rise 150%")
    assert changes["accuracy"].startswith("fall 44%")
    assert changes["decision_mix"].startswith("distance 0.12")
    assert "distance ≥ 0.20 watch, 0.35 alert, 0.50 investigate" in changes["decision_mix"]


def test_a_rise_in_a_signal_that_only_counts_falls_reads_no_fall(operator_client: Client) -> None:
    plant("a-1")
    stored = report("a-1", "normal")
    stored.signals["confidence"] = {"value": 0.95, "baseline": 0.8, "level": "normal"}
    stored.save()

    change = signal_rows(page(operator_client))["confidence"].one("td", data_cell="change").text

    assert change.startswith("no fall")


def test_configured_thresholds_are_the_ones_shown(operator_client: Client, settings: Any) -> None:
    settings.DRIFT_THRESHOLDS = {**settings.DRIFT_THRESHOLDS, "confidence": (0.05, 0.15, 0.3)}
    plant("a-1")
    report("a-1")

    change = signal_rows(page(operator_client))["confidence"].one("td", data_cell="change").text

    assert "fall ≥ 5% watch, 15% alert, 30% investigate" in change


def test_the_bars_put_the_session_beside_the_baseline_on_one_scale(operator_client: Client) -> None:
    plant("a-1")
    report("a-1")

    rows = signal_rows(page(operator_client))

    def widths(name: str) -> tuple[str, str]:
        svg = rows[name].one("svg", cls="signal-bars")
        return svg.one("rect", cls="bar-session").attrs["width"], svg.one("rect", cls="bar-baseline").attrs["width"]

    assert widths("accuracy") == ("80.0", "144.0")  # 0.5 and 0.9 of 160
    assert widths("decisions") == ("75.3", "160.0")  # 4 and 8.5 on 0..8.5
    svg = rows["accuracy"].one("svg", cls="signal-bars")
    assert svg.attrs["role"] == "img"
    assert svg.one("title").text == "Accuracy: this session 50%, baseline 90%"


def test_an_insufficient_baseline_says_why_no_level_is_given(operator_client: Client) -> None:
    plant("a-1")
    DriftReport.objects.create(
        agent="alpha",
        session_id="a-1",
        session_ended_at=T0,
        baseline_sessions=2,
        decisions=1,
        level="insufficient_baseline",
        signals={
            name: {"value": 0.5, "baseline": None, "level": "insufficient_baseline"}
            for name in ("confidence", "decisions", "escalation_rate", "accuracy", "decision_mix")
        },
    )

    drift = page(operator_client).by_id("drift")

    shown = drift.one("span", data_report_level="")
    assert (shown.attrs["data-level"], shown.text) == ("insufficient_baseline", "insufficient baseline")
    assert "at least 5 completed sessions" in drift.text
    assert {cell(row, "baseline") for row in signal_rows(drift).values()} == {"—"}


def test_without_a_report_the_page_says_how_one_is_made(operator_client: Client) -> None:
    plant("a-1")

    drift = page(operator_client).by_id("drift")

    assert "No drift report yet" in drift.text
    assert "manage.py reasoning_drift --agent alpha" in drift.text


def test_an_earlier_report_can_be_picked_from_the_history(operator_client: Client) -> None:
    plant("a-1")
    report("a-1", "investigate")
    report("a-2", "normal")

    html = page(operator_client)
    history = html.by_id("drift-history")
    assert history.one("strong").text == "a-2"  # the latest, shown
    link = history.one("a").attrs["href"]
    assert link == url() + "?report=a-1"

    picked = page(operator_client, report="a-1").by_id("drift")
    assert picked.one("strong", data_report_session="").text == "a-1"


def test_an_unknown_report_falls_back_to_the_latest_and_says_so(operator_client: Client) -> None:
    plant("a-1")
    report("a-1")

    drift = page(operator_client, report="nope").by_id("drift")

    assert drift.one("p", cls="error").text == "No drift report for that session: showing the latest."
    assert drift.one("strong", data_report_session="").text == "a-1"


# --- Sessions ------------------------------------------------------------------------------------


def test_sessions_come_newest_first_with_their_numbers_and_drift_level(operator_client: Client) -> None:
    plant("a-1", confidence=0.9, correct=True)
    plant("a-1", confidence=0.5, correct=False, outcome_type="escalated")
    plant("a-2", confidence=0.8, correct=None)
    plant("b-1", agent="beta")
    report("a-1", "watch")

    rows = session_rows(page(operator_client))

    assert list(rows) == ["a-2", "a-1"]
    first = rows["a-1"]
    assert (cell(first, "decisions"), cell(first, "accuracy"), cell(first, "confidence")) == ("2", "50 %", "0.70")
    assert cell(first, "escalations") == "1"
    assert first.one("td", data_cell="drift").one("span").attrs["data-level"] == "watch"
    assert cell(rows["a-2"], "drift") == "not judged"
    assert cell(rows["a-2"], "accuracy") == "—"
    assert first.one("a").attrs["href"] == "/dashboard/admin/reasoning/flows?session_id=a-1"


def test_a_shared_sessions_row_counts_the_agents_own_decisions_of_the_sessions(operator_client: Client) -> None:
    # Found on the demo: a session shared by several agents showed all of its decisions (1,333) on
    # an agent with 369 in all.
    plant("shared-1", confidence=0.9, correct=True)
    for _ in range(3):
        plant("shared-1", agent="beta")

    (row,) = session_rows(page(operator_client)).values()

    assert cell(row, "decisions") == "1 of 4"


def test_sessions_page_on(operator_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_page, "SESSIONS_PER_PAGE", 2)
    for number in range(5):
        plant(f"a-{number}")

    html = page(operator_client)
    seen = list(session_rows(html))
    while (older := [a for a in html.by_id("sessions").select("a") if a.attrs.get("rel") == "next"]) != []:
        html = parse(operator_client.get(older[0].attrs["href"].split("#")[0]).content)
        seen += list(session_rows(html))

    assert seen == ["a-4", "a-3", "a-2", "a-1", "a-0"]


def test_a_stale_sessions_link_shows_the_newest_and_says_so(operator_client: Client) -> None:
    plant("a-1")

    sessions = page(operator_client, cursor="not-a-cursor").by_id("sessions")

    assert sessions.one("p", cls="error").text == "That page link is out of date: showing the newest sessions."
    assert list(session_rows(sessions)) == ["a-1"]


# --- Review --------------------------------------------------------------------------------------


def test_the_review_lists_incorrect_decisions_by_type_with_their_questions(operator_client: Client) -> None:
    wrong = plant("a-1", confidence=0.92, correct=False)
    other = plant("a-1", confidence=0.3, correct=False, trigger_type="lab_result")
    plant("a-1", correct=True)
    plant("b-1", agent="beta", correct=False)

    review = page(operator_client).by_id("review")

    groups = [group for group in review.select("section") if "data-decision-type" in group.attrs]
    assert [group.attrs["data-decision-type"] for group in groups] == ["lab_result", "claim_review"]
    decision = groups[1].one("article", data_flow=wrong)
    questions = [(li.attrs["data-template"], li.text) for li in decision.select("li") if "data-template" in li.attrs]
    assert questions == [
        ("high_confidence", "Confidence was 0.92 on a decision recorded incorrect: what evidence supported it?"),
        (
            "no_retrieval",
            "No retrieval step preceded the verdict (step #2, verdict): what was the decision based on?",
        ),
        ("slowest_step", "Step #1 (llm_prompt) took 4.2 s, the slowest: did it time out or retry?"),
    ]
    assert decision.one("a").attrs["href"] == f"/dashboard/admin/reasoning/{wrong}"
    steps = decision.one("details").text
    assert "#2 verdict" in steps and "Two sources agree" in steps
    assert groups[0].one("article").attrs["data-flow"] == other


def test_failed_steps_are_counted_by_error_type_with_a_link_to_their_flows(operator_client: Client) -> None:
    plant("s-1")
    flow, _ = recording_services.start_flow({"trigger_type": "user_question", "agent": "alpha"}, actor=ACTOR)
    failing = {"kind": "tool_call", "agent": "alpha", "summary_text": "Called a tool", "outcome": "error"}
    recording_services.add_steps(
        flow.pk,
        [{**failing, "error_type": "Timeout"}, {**failing, "error_type": "Timeout"}, {**failing, "error_type": "500"}],
        actor=ACTOR,
    )
    recording_services.add_steps(flow.pk, [{**failing, "agent": "beta", "error_type": "Other"}], actor=ACTOR)

    html = page(operator_client)

    rows = {
        row.attrs["data-error-type"]: row
        for row in html.by_id("failure-list").select("tr")
        if "data-error-type" in row.attrs
    }
    assert list(rows) == ["Timeout", "500"]  # most first; another agent's are not here
    assert [cell.text for cell in rows["Timeout"].select("td")][1:3] == ["2", "1"]
    link = html.by_id("failures").one("a")
    assert link.attrs["href"] == "/dashboard/admin/reasoning/flows?agent=alpha&failed=true"


def test_an_agent_without_failures_says_so(operator_client: Client) -> None:
    plant("s-1")
    assert "No failed steps recorded for alpha." in page(operator_client).by_id("failures").text


def test_opening_the_page_audits_the_review_read(operator_client: Client) -> None:
    plant("a-1", correct=False)

    page(operator_client)

    event = AuditEvent.objects.filter(action="admin.reasoning.agent.review_read").get()
    assert event.target_id == "alpha"
    assert event.payload == {
        "agent": "alpha",
        "flow_count": 1,
        "group_count": 1,
        "question_count": 3,
        "next_page": False,
    }


def test_since_keeps_decisions_judged_from_then_on(operator_client: Client) -> None:
    plant("a-1", correct=False)

    later = page(operator_client, since="2999-01-01").by_id("review")

    assert [a for a in later.select("article")] == []
    assert "No decision of this agent is recorded incorrect since 2999-01-01." in later.text


def test_an_unreadable_since_is_a_400_naming_the_field_and_reads_no_review(operator_client: Client) -> None:
    plant("a-1", correct=False)

    review = page(operator_client, status=400, since="last tuesday").by_id("review")

    assert review.one("p", cls="error").text.startswith("since: must be an ISO 8601 date")
    assert review.one("input", name="since").attrs["aria-invalid"] == "true"
    assert not AuditEvent.objects.filter(action="admin.reasoning.agent.review_read").exists()


def test_the_review_pages_on(operator_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_page, "REVIEW_DECISIONS", 2)
    wrong = [plant(f"a-{number}", correct=False) for number in range(3)]

    html = page(operator_client)
    first = [article.attrs["data-flow"] for article in html.by_id("review").select("article")]
    (older,) = [a for a in html.by_id("review").select("a") if a.attrs.get("rel") == "next"]
    rest = parse(operator_client.get(older.attrs["href"].split("#")[0]).content).by_id("review")

    assert first == wrong[::-1][:2]
    assert [article.attrs["data-flow"] for article in rest.select("article")] == wrong[:1]


# --- Cost ---------------------------------------------------------------------------------------


def test_the_page_reads_in_the_same_queries_whatever_the_number_of_sessions_and_decisions(
    operator_client: Client,
) -> None:
    plant("a-0", correct=False)
    report("a-0")
    with CaptureQueriesContext(connection) as few:
        page(operator_client)
    for number in range(1, 9):
        plant(f"a-{number}", correct=False)
        plant(f"a-{number}", correct=True)
        report(f"a-{number}", "watch")

    with CaptureQueriesContext(connection) as many:
        html = page(operator_client)

    assert len(session_rows(html)) == 9
    assert len(html.by_id("review").select("article")) == 9
    assert len(many) == len(few), [query["sql"][:80] for query in many.captured_queries]


def test_drift_reports_are_listed_read_only_in_django_admin(admin_client: Client) -> None:
    stored = report("a-1", "watch")

    listing = admin_client.get("/admin/reasoning/driftreport/")
    detail = admin_client.get(f"/admin/reasoning/driftreport/{stored.pk}/change/")

    assert listing.status_code == 200 and "a-1" in listing.content.decode()
    assert detail.status_code == 200 and 'name="_save"' not in detail.content.decode()
    assert admin_client.get("/admin/reasoning/driftreport/add/").status_code == 403
