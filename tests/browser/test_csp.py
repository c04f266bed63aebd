"""In headless Chromium, under the real Content-Security-Policy: no page breaks a directive.

Every main page is opened (home, login, the operator pages, a flow and a turn, the Research
Console, /api/docs/ with Swagger UI drawn, the Django admin, the patient's profile and a
narrative) and an htmx swap is made on the flow list and the profile. The test fails on any
``securitypolicyviolation`` event, any console message about the Content Security Policy or
the Permissions-Policy (an unrecognized feature is logged as an error), any script error and
any same-site request that failed (a CSP-blocked one fails with ERR_BLOCKED_BY_CSP).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from playwright.sync_api import BrowserContext, ConsoleMessage, Page, expect

from patients.services import create_patient
from reasoning import tokens
from reasoning.models import ReasoningFlow
from tests.browser.test_operator_and_patient import closed_flow, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ACTOR = "system:browser-test"
OPERATOR = ("op.csp", "operator-csp-2026")
PATIENT = ("pat.csp", "patient-csp-2026")

# Runs in every document before its own scripts (Playwright injects it over the DevTools
# protocol, which the page's policy does not govern) and reports each violation at once.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  window.__reportCspViolation(
    `${event.effectiveDirective} blocked ${event.blockedURI || "inline"} at ${event.sourceFile}:${event.lineNumber}`
    + ` (${event.sample || ""}) on ${document.location.pathname}`
  );
});
"""


@pytest.fixture
def violations(context: BrowserContext) -> Iterator[list[str]]:
    seen: list[str] = []
    context.expose_function("__reportCspViolation", lambda text: seen.append(str(text)))
    context.add_init_script(REPORT_VIOLATIONS)
    yield seen


@pytest.fixture
def policy_messages(page: Page) -> list[str]:
    seen: list[str] = []

    def read(message: ConsoleMessage) -> None:
        text = message.text
        if "Content Security Policy" in text or "Content-Security-Policy" in text or "Permissions-Policy" in text:
            seen.append(f"{message.type}: {text} ({page.url})")

    page.on("console", read)
    return seen


def visit(page: Page, path: str) -> None:
    response = page.goto(path)
    assert response is not None and response.status < 400, f"{path}: {response and response.status}"
    assert response.headers.get("content-security-policy"), f"{path} has no CSP"
    page.wait_for_load_state("networkidle")


def assert_clean(violations: list[str], policy_messages: list[str], page_errors: list[str]) -> None:
    assert not violations, "\n".join(violations)
    assert not policy_messages, "\n".join(policy_messages)
    assert not page_errors, "\n".join(page_errors)


def test_operator_pages_api_docs_and_admin_keep_to_the_policy(
    page: Page, violations: list[str], policy_messages: list[str], page_errors: list[str]
) -> None:
    tokens.create_operator(username=OPERATOR[0], password=OPERATOR[1], actor=ACTOR)
    flow_id = closed_flow()
    trace_id = ReasoningFlow.objects.get(pk=flow_id).trace_id

    visit(page, "/")  # anonymous: on to the login page
    expect(page).to_have_url("/accounts/login/?next=/dashboard/")
    log_in(page, *OPERATOR)
    for path in (
        "/dashboard/admin/reasoning/",
        "/dashboard/admin/reasoning/agents",
        "/dashboard/admin/reasoning/agents/researcher",
        "/dashboard/admin/reasoning/evaluation",
        f"/dashboard/admin/reasoning/{flow_id}",
        f"/dashboard/admin/reasoning/turns/{trace_id}",
        "/dashboard/admin/reasoning/research-console",
        "/dashboard/admin/reasoning/pathway-library",
    ):
        visit(page, path)

    # An htmx swap: the flow list refreshes its results as a filter changes.
    visit(page, "/dashboard/admin/reasoning/flows")
    with page.expect_response(lambda response: "flow_state=completed" in response.url):
        page.select_option("select[name=flow_state]", "completed")
    expect(page.locator("#flow-results")).to_contain_text(str(flow_id)[:8])

    # Swagger UI: its bundle, its init script (a file: ?script) and the schema it fetches.
    visit(page, "/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Reasoning Flow Tracker API")
    first = page.locator(".opblock-summary").first
    first.click()
    expect(page.locator(".opblock.is-open").first).to_be_visible()

    for path in (
        "/admin/",
        "/admin/reasoning/reasoningflow/",
        f"/admin/reasoning/reasoningflow/{flow_id}/change/",
        "/admin/audit/auditevent/",
        "/admin/reasoning/apitoken/add/",
    ):
        visit(page, path)

    assert_clean(violations, policy_messages, page_errors)


def test_patient_pages_keep_to_the_policy(
    page: Page, violations: list[str], policy_messages: list[str], page_errors: list[str]
) -> None:
    patient = create_patient(username=PATIENT[0], password=PATIENT[1], consent=True, actor=ACTOR)
    flow_id: uuid.UUID = closed_flow(patient_id=patient.pk)

    visit(page, "/accounts/login/")
    log_in(page, *PATIENT)
    visit(page, f"/dashboard/reasoning/{flow_id}")
    expect(page.locator("main")).to_contain_text("follow-up visit")
    visit(page, "/dashboard/profile")
    # An htmx swap: the consent toggle replaces itself.
    with page.expect_response(lambda response: response.url.endswith("/dashboard/profile/consent")):
        page.click("#consent-toggle button[type=submit]")
    expect(page.locator("#consent-toggle button[type=submit]")).to_have_text("Turn on")

    assert_clean(violations, policy_messages, page_errors)
