"""The operators' dashboard in headless Chromium: a login lands on it, its charts are drawn
and fit their panels, a chart's table opens, and its link leads to the flow list; at 1280
and 390 px the page does not scroll sideways."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.core.cache import cache
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

DASHBOARD = "/dashboard/admin/reasoning/"
CHARTS = ("hourly", "daily", "durations", "rates", "steps", "tokens")


@pytest.fixture(autouse=True)
def _no_cached_dashboard() -> None:
    # The cache is a database table that a transactional test's flush leaves alone.
    cache.clear()


def seed_flow(agent: str, *, aborted: bool = False, steps: int = 2) -> uuid.UUID:
    flow, _ = services.start_flow({"trigger_type": "claim_review", "agent": agent}, actor=ACTOR)
    services.add_steps(
        flow.pk,
        [
            {
                "kind": "llm_prompt",
                "agent": agent,
                "summary_text": "Asked the model about the claim",
                "model": "gpt-4o-mini-2024-07-18",
                "input_tokens": 1200,
                "output_tokens": 300,
                "reasoning_tokens": 150,
            }
            for _ in range(steps)
        ],
        actor=ACTOR,
    )
    if aborted:
        services.close_flow(flow.pk, state="aborted", actor=ACTOR, abort_reason="tool_error")
    else:
        services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type="claim_created")
    return flow.pk


def seed_month() -> None:
    for days in (0, 2, 9, 20):
        with time_machine.travel(timezone.now() - timedelta(days=days, hours=1)):
            seed_flow("critic", steps=3)
            seed_flow("researcher-with-a-rather-long-agent-name", aborted=days == 2, steps=1)


def test_an_operator_lands_on_the_dashboard_and_follows_it_to_the_flow_list(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    seed_month()

    log_in(page, *OPERATOR)

    assert page.url.endswith(DASHBOARD), page.url
    expect(page.locator("h1")).to_have_text("Dashboard")
    for chart in CHARTS:
        svg = page.locator(f"#chart-{chart} svg[role=img]")
        expect(svg).to_be_visible()
        # The drawing takes its panel's width (viewBox + width: 100%).
        svg_width = svg.evaluate("svg => svg.getBoundingClientRect().width")
        panel_width = page.locator(f"#chart-{chart}").evaluate("figure => figure.clientWidth")
        assert svg_width > 0.8 * panel_width, (chart, svg_width, panel_width)
    expect(page.locator("#chart-daily rect.chart-bar")).to_have_count(5)  # 4 days, one with two states
    expect(page.locator('[data-total="flows"]')).to_have_text("8")
    assert_no_sideways_scroll(page)
    screenshot(page, "desktop")

    rates = page.locator("#chart-rates")
    rates.get_by_text("Table").click()
    expect(rates.locator('tr[data-row="critic"]')).to_contain_text("0 %")
    expect(rates.locator('tr[data-row="researcher-with-a-rather-long-agent-name"]')).to_contain_text("25 %")

    page.set_viewport_size(PHONE)
    assert_no_sideways_scroll(page)
    # Tick labels stay legible on a phone: at least 8 CSS px high.
    tick_height = page.locator("#chart-hourly text.chart-tick").first.evaluate("t => t.getBoundingClientRect().height")
    assert tick_height >= 8, tick_height
    screenshot(page, "phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.locator("nav.dashboard-links").get_by_role("link", name="Flows").click()
    expect(page.locator("h1")).to_have_text("Flows")
    expect(page.locator("tr[data-flow]")).to_have_count(8)
    assert page_errors == []


def test_before_any_flow_it_says_there_is_nothing_to_chart(page: Page, screenshot: Screenshot) -> None:
    seed_operator()
    log_in(page, *OPERATOR)

    expect(page.locator("#dashboard-empty")).to_contain_text("No flows yet")
    expect(page.locator("svg.chart-svg")).to_have_count(0)
    page.set_viewport_size(PHONE)
    assert_no_sideways_scroll(page)
    screenshot(page, "empty-phone")
