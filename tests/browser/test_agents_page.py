"""The agents page in headless Chromium: the dashboard's card leads to it, each row shows its
drift pill and sparkline, a name leads to the agent's flows, and at 1280 and 390 px the page
does not scroll sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from reasoning import services
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
    flow, _ = services.start_flow({"trigger_type": "claim_review", "agent": agent, "session_id": session}, actor=ACTOR)
    services.add_steps(
        flow.pk,
        [{"kind": "verdict", "agent": agent, "summary_text": "Kept the claim", "confidence": confidence}],
        actor=ACTOR,
    )
    services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type="claim_created")
    services.record_outcome(flow.pk, "checked", correct, actor=ACTOR)


def test_an_operator_opens_the_agents_page_and_follows_an_agent_to_its_flows(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    for number in range(6):
        seed_session("critic", f"critic-{number}", 0.9 - 0.05 * number, number % 2 == 0)
        seed_session("researcher-with-a-rather-long-agent-name", f"researcher-{number}", 0.8, True)

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
    expect(page.locator("h1")).to_have_text("Flows")
    expect(page.locator("tr[data-flow]")).to_have_count(6)
    assert page_errors == []
