"""Model, tokens, cost and time ranges in headless Chromium (issue 41, parts 2 and 5): an operator
sorts the flow list by cost and narrows it to a From/To range, reads a flow's cost, charts the
dashboard's cost over chosen days and narrows the sessions to a window; at 1280 and 390 px no page
scrolls sideways."""

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

DESKTOP = {"width": 1280, "height": 800}
VIEWPORTS = ((DESKTOP, "desktop"), (PHONE, "phone"))


def seed_call(model: str, inputs: int, outputs: int, *, session: str = "", days_ago: int = 0) -> uuid.UUID:
    """A closed flow with one model call (gpt-4o: $2.5 in, $10 out per million tokens)."""
    with time_machine.travel(timezone.now() - timedelta(days=days_ago, minutes=5)):
        flow, _ = services.start_flow(
            {"trigger_type": "user_question", "agent": "triage", "session_id": session}, actor=ACTOR
        )
        step = {"kind": "llm_prompt", "agent": "triage", "summary_text": "Asked the model", "model": model}
        services.add_steps(flow.pk, [{**step, "input_tokens": inputs, "output_tokens": outputs}], actor=ACTOR)
        services.close_flow(flow.pk, state="completed", actor=ACTOR, outcome_type="answered")
    return flow.pk


def rows(page: Page, what: str = "flow") -> list[str]:
    found: list[str] = page.locator(f"tr[data-{what}]").evaluate_all(f"rows => rows.map(row => row.dataset.{what})")
    return found


def test_an_operator_sorts_flows_by_cost_narrows_them_to_a_range_and_reads_one(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    cheap = seed_call("gpt-4o", 1_000, 100)  # $0.0035
    dear = seed_call("gpt-4o", 100_000, 10_000, days_ago=3)  # $0.35
    private = seed_call("clinic-llm-7b", 500, 50, days_ago=1)  # no known price
    log_in(page, *OPERATOR)

    for viewport, name in VIEWPORTS:
        page.set_viewport_size(viewport)  # type: ignore[arg-type]
        page.goto("/dashboard/admin/reasoning/flows")
        assert rows(page) == [str(cheap), str(private), str(dear)]
        expect(page.locator(f'tr[data-flow="{dear}"] td.flow-cost')).to_have_text("$0.35")
        expect(page.locator(f'tr[data-flow="{private}"] td.flow-cost')).to_have_text("—")

        page.select_option("select[name=sort]", "cost")
        expect(page.locator("tr[data-flow]").first).to_have_attribute("data-flow", str(dear))
        assert rows(page) == [str(dear), str(cheap), str(private)]
        assert "sort=cost" in page.url

        two_days_ago = timezone.localtime(timezone.now() - timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
        page.fill("input[name=from]", two_days_ago)
        page.locator("input[name=from]").dispatch_event("change")
        expect(page.locator("tr[data-flow]")).to_have_count(2)
        assert "from=" in page.url
        page.reload()  # the range lives in the URL
        expect(page.locator("tr[data-flow]")).to_have_count(2)
        expect(page.locator("input[name=from]")).to_have_value(two_days_ago)
        assert_no_sideways_scroll(page)
        screenshot(page, f"flows-{name}")

        page.locator(f'tr[data-flow="{cheap}"] a[title="{cheap}"]').click()
        expect(page.locator(".flow-cost")).to_have_text("Cost $0.0035")
        expect(page.locator(".flow-tokens")).to_contain_text("1,000 in / 100 out")
        expect(page.locator(".step-cost")).to_have_text("$0.0035")
        assert_no_sideways_scroll(page)
        screenshot(page, f"flow-{name}")
    assert page_errors == []


def test_an_operator_charts_the_cost_of_chosen_days(page: Page, screenshot: Screenshot, page_errors: list[str]) -> None:
    seed_operator()
    seed_call("gpt-4o", 100_000, 10_000, days_ago=2)
    seed_call("gpt-4o-mini", 1_000_000, 0, days_ago=20)
    log_in(page, *OPERATOR)

    for viewport, name in VIEWPORTS:
        cache.clear()
        page.set_viewport_size(viewport)  # type: ignore[arg-type]
        page.goto("/dashboard/admin/reasoning/")
        costs = page.locator('figure[data-chart="costs"]')
        expect(costs.locator("svg.chart-svg")).to_be_visible()
        expect(page.locator('figure[data-chart="cost-by"]')).to_contain_text("$0.35")

        page.get_by_role("link", name="last 7").click()
        expect(page.locator('[data-total="flows"]')).to_have_text("1")
        assert "days=7" in page.url

        today = timezone.localdate()
        page.fill("input[name=from]", (today - timedelta(days=25)).isoformat())
        page.fill("input[name=to]", (today - timedelta(days=10)).isoformat())
        page.get_by_role("button", name="Show").click()
        expect(page.locator('[data-total="flows"]')).to_have_text("1")
        expect(page.locator('figure[data-chart="daily"]')).to_contain_text(f"{today.year}")
        expect(page.locator('figure[data-chart="cost-by"]')).to_contain_text("$0.15")
        assert_no_sideways_scroll(page)
        screenshot(page, f"dashboard-{name}")
    assert page_errors == []


def test_an_operator_narrows_the_sessions_to_a_window(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    seed_call("gpt-4o", 100_000, 10_000, session="week-old", days_ago=7)
    seed_call("gpt-4o", 1_000, 100, session="recent", days_ago=1)
    log_in(page, *OPERATOR)

    for viewport, name in VIEWPORTS:
        page.set_viewport_size(viewport)  # type: ignore[arg-type]
        page.goto("/dashboard/admin/reasoning/sessions")
        assert rows(page, "session") == ["recent", "week-old"]
        expect(page.locator('tr[data-session="week-old"] [data-cell="cost"]')).to_have_text("$0.35")

        page.select_option("select[name=period]", "24h")
        with page.expect_navigation():  # the form's GET: read the rows of the page it loads, not the old one
            page.get_by_role("button", name="Show").click()
        assert "period=24h" in page.url
        assert rows(page, "session") == []
        page.select_option("select[name=period]", "")
        three_days_ago = timezone.localtime(timezone.now() - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
        page.fill("input[name=from]", three_days_ago)
        with page.expect_navigation():
            page.get_by_role("button", name="Show").click()
        assert "from=" in page.url
        assert rows(page, "session") == ["recent"]
        expect(page.locator("input[name=from]")).to_have_value(three_days_ago)
        assert_no_sideways_scroll(page)
        screenshot(page, f"sessions-{name}")
    assert page_errors == []
