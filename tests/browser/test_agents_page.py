"""The agents pages in headless Chromium: the dashboard's card leads to the list, each row shows
its drift pill and sparkline, a name leads to the agent's page (drift signals against the
baseline, sessions, the review with its questions), that page to the agent's flows, and at
1280 and 390 px neither page scrolls sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from reasoning.jobs import compute_drift_reports
from reasoning.outcomes import services as outcomes_services
from reasoning.recording import services as recording_services
from tests.browser.conftest import Screenshot
from tests.browser.test_operator_and_patient import (
    ACTOR,
    OPERATOR,
    PHONE,
    assert_no_sideways_scroll,
    log_in,
    seed_operator,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def seed_session(agent: str, session: str, confidence: float, correct: bool) -> None:
    flow, _ = recording_services.start_flow(
        {"trigger_type": "claim_review", "agent": agent, "session_id": session}, actor=ACTOR
    )
    recording_services.add_steps(
        flow.pk,
        [{"kind": "verdict", "agent": agent, "summary_text": "Kept the claim", "confidence": confidence}],
        actor=ACTOR,
    )
    recording_services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type="claim_created")
    outcomes_services.record_outcome(flow.pk, "checked", correct, actor=ACTOR)


def test_an_operator_opens_the_agents_page_and_follows_an_agent_to_its_review_and_flows(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    for number in range(6):
        seed_session("critic", f"critic-{number}", 0.9 - 0.05 * number, number % 2 == 0)
        seed_session("researcher-with-a-rather-long-agent-name", f"researcher-{number}", 0.8, True)

    compute_drift_reports()

    log_in(page, *OPERATOR)
    page.locator("nav.dashboard-links").get_by_role("link", name="Agents").click()

    expect(page.locator("h1")).to_have_text("Agents")
    expect(page.locator("tr[data-agent]")).to_have_count(2)
    critic = page.locator('tr[data-agent="critic"]')
    expect(critic.locator('[data-cell="accuracy"]')).to_have_text("50 %")
    expect(critic.locator("svg.sparkline[role=img] polyline")).to_have_count(2)
    assert_no_sideways_scroll(page)
    screenshot(page, "desktop")

    page.set_viewport_size(PHONE)
    assert_no_sideways_scroll(page)
    screenshot(page, "phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    critic.get_by_role("link", name="critic").click()
    expect(page.locator("h1")).to_have_text("Agent critic")
    # Six sessions: the last one is judged against the five before it.
    latest = page.locator("[data-report-session]")
    expect(latest).to_have_text("critic-5")
    expect(page.locator("#drift-signals tr[data-signal]")).to_have_count(5)
    accuracy = page.locator('#drift-signals tr[data-signal="accuracy"]')
    expect(accuracy.locator('[data-cell="value"]')).to_have_text("0%")
    expect(accuracy.locator('[data-cell="baseline"]')).to_have_text("60%")
    expect(accuracy.locator('[data-cell="level"] .pill')).to_have_attribute("data-level", "investigate")
    expect(accuracy.get_by_role("img")).to_be_visible()
    expect(page.locator("#session-list tr[data-session]")).to_have_count(6)
    # Three sessions were judged wrong; each has its questions, and its steps behind a toggle.
    expect(page.locator("#review article[data-flow]")).to_have_count(3)
    first = page.locator("#review article[data-flow]").first
    expect(first.locator("li[data-template]").first).to_contain_text(
        "No retrieval step preceded the verdict (step #1, verdict)"
    )
    expect(first.get_by_text("Kept the claim")).to_be_hidden()
    first.locator("details summary").click()
    expect(first.get_by_text("Kept the claim")).to_be_visible()
    assert_no_sideways_scroll(page)
    screenshot(page, "agent-desktop")
    page.set_viewport_size(PHONE)
    assert_no_sideways_scroll(page)
    screenshot(page, "agent-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.locator("#review form input[name=since]").fill("yesterday")
    page.locator("#review form").get_by_role("button", name="Show").click()
    expect(page.locator("#since-error")).to_contain_text("since: must be an ISO 8601 date")

    page.get_by_role("link", name="All flows of critic").click()
    expect(page.locator("h1")).to_have_text("Flows")
    expect(page.locator("tr[data-flow]")).to_have_count(6)
    assert page_errors == []
