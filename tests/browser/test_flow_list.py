"""The operators' flow list in headless Chromium: filter by agent and date as a person would
(the results follow the form through htmx, the URL keeps the filters), reload, open a flow;
at 1280 and 390 px the page does not scroll sideways."""

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

LIST = "/dashboard/admin/reasoning/flows"


def seed_flow(agent: str, ref: str) -> uuid.UUID:
    flow, _ = services.start_flow({"trigger_type": "claim_review", "trigger_ref": ref, "agent": agent}, actor=ACTOR)
    services.add_steps(
        flow.pk,
        [{"kind": "graph_walk", "agent": agent, "summary_text": "Walked the claim graph", "confidence": 0.9}],
        actor=ACTOR,
    )
    services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type="claim_created")
    return flow.pk


def rows(page: Page) -> list[str]:
    found: list[str] = page.locator("tr[data-flow]").evaluate_all("rows => rows.map(row => row.dataset.flow)")
    return found


def test_an_operator_filters_by_agent_and_date_and_opens_a_flow(page: Page, screenshot: Screenshot) -> None:
    seed_operator()
    with time_machine.travel(timezone.now() - timedelta(days=3)):
        old_critic = seed_flow("critic", "claims/old-claim-with-a-long_reference_name/0001")
    critic = seed_flow("critic", "claims/recent")
    researcher = seed_flow("researcher", "claims/other")
    log_in(page, *OPERATOR)

    page.get_by_role("link", name="Flows").first.click()
    expect(page.locator("h1")).to_have_text("Flows")
    assert rows(page) == [str(researcher), str(critic), str(old_critic)]
    assert_no_sideways_scroll(page)
    screenshot(page, "desktop")

    page.fill("input[name=agent]", "critic")
    page.locator("input[name=agent]").dispatch_event("change")
    expect(page.locator("tr[data-flow]")).to_have_count(2)
    page.select_option("select[name=period]", "24h")
    expect(page.locator("tr[data-flow]")).to_have_count(1)
    assert rows(page) == [str(critic)]
    assert "agent=critic" in page.url and "period=24h" in page.url

    page.reload()
    assert rows(page) == [str(critic)]
    expect(page.locator('[data-summary="total"]')).to_have_text("1")

    page.locator(f'tr[data-flow="{critic}"] a[title="{critic}"]').click()
    expect(page).to_have_url(f"{page.url.split('/dashboard')[0]}/dashboard/admin/reasoning/{critic}")
    expect(page.locator("h1")).to_contain_text("claim_review flow")


def test_the_list_fits_a_phone(page: Page, screenshot: Screenshot) -> None:
    seed_operator()
    for n in range(3):
        seed_flow("critic", f"claims/a-rather-long/reference/that_goes/on_and_on/{n}")
    log_in(page, *OPERATOR)
    page.set_viewport_size(PHONE)

    page.goto(LIST)

    expect(page.locator("tr[data-flow]")).to_have_count(3)
    assert_no_sideways_scroll(page)
    screenshot(page, "phone")


def test_the_waterfall_bars_match_the_latencies(page: Page, screenshot: Screenshot) -> None:
    seed_operator()
    flow, _ = services.start_flow({"trigger_type": "user_question", "agent": "researcher"}, actor=ACTOR)
    began = flow.created_at
    steps = [
        {
            "kind": kind,
            "agent": "researcher",
            "summary_text": f"Ran the {kind} step",
            "latency_ms": latency,
            "started_at": began + timedelta(milliseconds=offset),
        }
        for kind, offset, latency in (("retrieval", 0, 400), ("llm_prompt", 400, 800), ("verdict", 1200, 200))
    ]
    services.add_steps(flow.pk, steps, actor=ACTOR)
    log_in(page, *OPERATOR)

    page.goto(f"/dashboard/admin/reasoning/{flow.pk}")

    widths = page.locator("svg.waterfall rect.waterfall-bar").evaluate_all(
        "bars => bars.map(bar => bar.getBoundingClientRect().width)"
    )
    assert widths[1] == pytest.approx(2 * widths[0], rel=0.02)
    assert widths[0] == pytest.approx(2 * widths[2], rel=0.02)
    svg_width = page.locator("svg.waterfall").evaluate("svg => svg.getBoundingClientRect().width")
    panel_width = page.locator("#waterfall").evaluate("panel => panel.clientWidth")
    assert svg_width > 0.9 * (panel_width - 40)  # the drawing uses the panel's width
    # The step graph (one column here) is drawn larger than its layout, so its text is readable.
    text_height = page.locator("svg.dag-graph text.dag-node-kind").first.evaluate(
        "text => text.getBoundingClientRect().height"
    )
    assert text_height >= 16
    screenshot(page, "desktop")
    page.set_viewport_size(PHONE)
    assert_no_sideways_scroll(page)
    screenshot(page, "phone")
