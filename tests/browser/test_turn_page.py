"""The turn page in headless Chromium: from a flow page follow "Open the turn", see one
cluster per flow, select a node and land on that flow's step; at 1280 and 390 px the page
does not scroll sideways (the graph scrolls inside its panel)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from playwright.sync_api import Page, expect

from reasoning.recording import services
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

TRACE = "browser-turn-0001"
CLAIM = "claim-browser-turn"


def seed_turn() -> list[uuid.UUID]:
    """A researcher's flow writing a claim, a critic's judging it, a researcher's follow-up on the critic's."""
    start = timezone.now() - timedelta(minutes=5)
    flows: list[uuid.UUID] = []
    plans = [
        ("researcher", "user_question", "", ["Retrieved the guideline", "Wrote the claim"]),
        ("critic", "claim", "", ["Judged the claim"]),
        ("researcher", "follow_up", "critic", ["Looked for more evidence", "Summarised the evidence"]),
    ]
    for minute, (agent, trigger, after, summaries) in enumerate(plans):
        with time_machine.travel(start + timedelta(minutes=minute)):
            ref = str(flows[1]) if after == "critic" else ""
            flow, _ = services.start_flow(
                {"trigger_type": trigger, "trigger_ref": ref, "agent": agent, "trace_id": TRACE}, actor=ACTOR
            )
            ids = [uuid.uuid4() for _ in summaries]
            steps = [
                {
                    "id": ids[n],
                    "kind": "verdict" if agent == "critic" else "retrieval",
                    "agent": agent,
                    "summary_text": summary,
                    "parent_step_id": ids[n - 1] if n else None,
                    "memory_claim_ref": CLAIM if (agent, n) in (("researcher", 1), ("critic", 0)) and not ref else "",
                }
                for n, summary in enumerate(summaries)
            ]
            services.add_steps(flow.pk, steps, actor=ACTOR)
            services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type="claim_created")
            flows.append(flow.pk)
    return flows


def test_an_operator_opens_the_turn_from_a_flow_and_follows_a_node(page: Page, screenshot: Screenshot) -> None:
    seed_operator()
    flows = seed_turn()
    log_in(page, *OPERATOR)

    page.goto(f"/dashboard/admin/reasoning/{flows[0]}")
    page.get_by_role("link", name="Open the turn (3 flows)").click()

    expect(page.locator("h1")).to_have_text("Agent turn")
    expect(page.locator("g.turn-cluster")).to_have_count(3)
    expect(page.locator("path.turn-edge-cross")).to_have_count(2)
    labels = page.locator("text.turn-cluster-label").all_text_contents()
    assert labels == [
        "1. researcher · user_question",
        "2. critic · claim",
        "3. researcher · follow_up",
    ]
    assert_no_sideways_scroll(page)
    screenshot(page, "desktop")

    page.locator(f'a.dag-node[data-flow="{flows[2]}"][data-position="2"]').click()
    expect(page).to_have_url(f"{page.url.split('/dashboard')[0]}/dashboard/admin/reasoning/{flows[2]}#step-2")
    expect(page.locator("h1")).to_contain_text("follow_up flow")
    expect(page.locator("#step-2")).to_be_in_viewport()


def test_the_turn_page_fits_a_phone(page: Page, screenshot: Screenshot) -> None:
    seed_operator()
    seed_turn()
    page.set_viewport_size(PHONE)
    log_in(page, *OPERATOR)

    page.goto(f"/dashboard/admin/reasoning/turns/{TRACE}")

    expect(page.locator("g.turn-cluster")).to_have_count(3)
    expect(page.locator("table.turn-flows tbody tr")).to_have_count(3)
    assert_no_sideways_scroll(page)
    screenshot(page, "phone")
