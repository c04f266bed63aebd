"""A patient opens a narrative from "Your decisions" on their profile (headless Chromium)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Screenshot
from tests.browser.test_operator_and_patient import (
    PATIENT,
    PHONE,
    assert_no_sideways_scroll,
    log_in,
    seed_patient_decision,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_patient_opens_a_narrative_from_your_decisions(page: Page, screenshot: Screenshot) -> None:
    _, flow_id = seed_patient_decision()
    log_in(page, *PATIENT)
    page.set_viewport_size(PHONE)

    page.goto("/dashboard/profile")
    decision = page.locator(f'li.decision[data-decision="{flow_id}"]')
    expect(decision).to_contain_text("Ready to read")
    assert_no_sideways_scroll(page)
    screenshot(page, "profile-phone")

    # Turning explanations off and on again updates the list in place (htmx), no reload.
    page.evaluate("window.sameDocument = true")
    page.get_by_role("button", name="Turn off").click()
    expect(decision.get_by_role("link")).to_have_count(0)
    expect(page.locator("#your-decisions")).to_contain_text("Turn on explanations above")
    page.get_by_role("button", name="Turn on").click()
    expect(decision.get_by_role("link")).to_have_count(1)
    assert page.evaluate("window.sameDocument === true")

    decision.get_by_role("link").click()

    expect(page.locator("h1")).to_have_text("How this decision was reached")
    expect(page.get_by_text("not medical advice")).to_have_count(1)
