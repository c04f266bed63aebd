"""The sessions pages in headless Chromium (issue 41, part 4): the nav leads to the sessions, a
session leads to its decisions, a decision to its flow; at 1280 and 390 px no page scrolls sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from reasoning.jobs import compute_drift_reports
from tests.browser.conftest import Screenshot
from tests.browser.test_agents_page import seed_session
from tests.browser.test_operator_and_patient import OPERATOR, PHONE, assert_no_sideways_scroll, log_in, seed_operator

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_follows_the_nav_to_a_session_and_on_to_a_decisions_flow(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    for number in range(6):
        seed_session("critic", f"critic-shift-{number}", 0.9 - 0.05 * number, number % 2 == 0)
    seed_session("researcher", "critic-shift-5", 0.8, True)  # a session shared by two agents
    compute_drift_reports()
    log_in(page, *OPERATOR)

    for viewport, name in (({"width": 1280, "height": 800}, "desktop"), (PHONE, "phone")):
        page.set_viewport_size(viewport)  # type: ignore[arg-type]
        page.goto("/dashboard/admin/reasoning/")
        page.locator("header nav").get_by_role("link", name="Sessions").click()
        expect(page.locator("h1")).to_have_text("Sessions")
        expect(page.locator("tr[data-session]")).to_have_count(6)
        shared = page.locator('tr[data-session="critic-shift-5"]')
        expect(shared.locator('[data-cell="agents"]')).to_have_text("critic, researcher")
        assert_no_sideways_scroll(page)
        screenshot(page, f"sessions-{name}")

        shared.get_by_role("link", name="critic-shift-5").click()
        expect(page.locator("h1")).to_have_text("Session critic-shift-5")
        expect(page.locator("tr[data-flow]")).to_have_count(2)
        assert_no_sideways_scroll(page)
        screenshot(page, f"session-{name}")

        page.locator("tr[data-flow]").first.get_by_role("link").first.click()
        expect(page.locator("h1")).to_contain_text("claim_review flow")
    assert page_errors == []


def test_an_operator_runs_an_access_report_at_desktop_and_phone_widths(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()  # a superuser: may run access reports
    seed_session("critic", "shift-1", 0.8, True)
    log_in(page, *OPERATOR)
    for viewport, name in (({"width": 1280, "height": 800}, "desktop"), (PHONE, "phone")):
        page.set_viewport_size(viewport)  # type: ignore[arg-type]
        page.goto("/dashboard/admin/reasoning/")
        page.locator("header nav").get_by_role("link", name="Access report").click()
        page.get_by_label("Since").fill("2000-01-01")
        page.get_by_role("button", name="Run the report").click()
        expect(page.locator("tr[data-event]").first).to_be_visible()
        expect(page.locator("[data-total=rows]")).to_contain_text("events")
        assert_no_sideways_scroll(page)
        screenshot(page, f"access-report-{name}")
    assert page_errors == []
