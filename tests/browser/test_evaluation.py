"""The evaluation page in headless Chromium: reached from the dashboard, its latest runs and
drift chart drawn, its export downloaded; at 1280 and 390 px it does not scroll sideways."""

from __future__ import annotations

import contextlib
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from playwright.sync_api import Page, expect

from reasoning.evaluation import FIXTURES
from tests.browser.conftest import Screenshot
from tests.browser.test_dashboard import seed_flow
from tests.browser.test_operator_and_patient import OPERATOR, PHONE, assert_no_sideways_scroll, log_in, seed_operator

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def record_runs() -> None:
    for name in ("sample-flows-clean.jsonl", "sample-flows-drift.jsonl"):
        with contextlib.suppress(CommandError):  # the drift fixture fails its gate; it is recorded all the same
            call_command("reasoning_signature_check", "--input", str(FIXTURES / name), "--record", stdout=StringIO())
    call_command("reasoning_replay", "--record", stdout=StringIO())


def test_an_operator_reads_the_gates_and_downloads_the_last_day(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    record_runs()
    flow_id = seed_flow("critic")
    log_in(page, *OPERATOR)

    page.locator("nav.dashboard-links").get_by_role("link", name="Evaluation").click()

    expect(page.locator("h1")).to_have_text("Evaluation")
    check = page.locator("section[data-kind=signature_check]")
    expect(check.locator(".pill")).to_have_text("failed")
    expect(check.locator("svg[role=img] g.chart-line")).not_to_have_count(0)
    expect(page.locator("section[data-kind=replay] .pill")).to_have_text("passed")
    assert_no_sideways_scroll(page)
    screenshot(page, "desktop")

    with page.expect_download() as download:
        page.get_by_role("link", name="Download the last 24 hours (JSONL)").click()
    rows = [json.loads(line) for line in open(download.value.path(), encoding="ascii")]  # noqa: SIM115
    assert [row["flow_id"] for row in rows] == [str(flow_id)]

    page.set_viewport_size(PHONE)
    assert_no_sideways_scroll(page)
    screenshot(page, "phone")
    assert page_errors == []
