"""End to end in headless Chromium: what an operator and a patient do in the browser.

Operator: log in, land on the dashboard, go on to the Research Console, find candidates for a trigger, reuse
one (its hit count rises in place), compare two on one radar, resolve a pending claim;
open the pathway library and a flow's DAG page. Patient: read a narrative with its
radar, turn consent off on the profile, get the gentle message instead. On a phone
width, pages do not scroll sideways and keyboard focus is visible.

Data is seeded through the services (real commits: ``live_server`` runs in another
thread, so the tests use transactional database access).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from playwright.sync_api import Page, ViewportSize, expect

from pathways.models import Pathway
from patients.models import Patient
from patients.services import create_patient
from reasoning import tokens as reasoning_tokens
from reasoning.models import ReasoningFlow
from reasoning.recording import services as recording_services
from research_backlog.models import ClaimReview
from research_backlog.services import mark_claim_for_review
from tests.browser.conftest import Screenshot
from tests.factories import make_pathway

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ACTOR = "system:browser-test"
OPERATOR = ("op.browser", "operator-browser-2026")
PATIENT = ("pat.browser", "patient-browser-2026")
DASHBOARD = "/dashboard/admin/reasoning/"
CONSOLE = "/dashboard/admin/reasoning/research-console"
LIBRARY = "/dashboard/admin/reasoning/pathway-library"
PROFILE = "/dashboard/profile"
PHONE: ViewportSize = {"width": 390, "height": 844}

TRIGGER_TYPE = "bp_followup"
EXACT_REF = "bp/visit/1"
# (trigger_ref, hit_count): one exact match and two prefix siblings with different hits.
SEEDED = [(EXACT_REF, 2), ("bp/visit/2", 9), ("bp/visit/3", 4)]
CLAIM_ID = "claim-browser-0001"
OUTCOME = "Recommended a follow-up visit with the care team"
# Axis labels the patient audience sees (reasoning issue 6: plain words for patients).
PATIENT_LABELS = ("Evidence breadth", "Care team agreement", "Caution flags")


# --- Data ---------------------------------------------------------------------------


def seed_pathways() -> list[Pathway]:
    """The three pathways, in the order the matcher must rank them."""
    made = {ref: make_pathway(TRIGGER_TYPE, ref, hit_count=hits) for ref, hits in SEEDED}
    return [made[EXACT_REF], made["bp/visit/2"], made["bp/visit/3"]]


def seed_operator() -> None:
    reasoning_tokens.create_operator(username=OPERATOR[0], password=OPERATOR[1], actor=ACTOR)


def seed_patient_decision(*, abort_reason: str | None = None) -> tuple[Patient, uuid.UUID]:
    """A consenting patient and a closed, guard-passing flow about them (aborted with ``abort_reason``)."""
    patient = create_patient(username=PATIENT[0], password=PATIENT[1], consent=True, actor=ACTOR)
    flow_id = closed_flow(patient_id=patient.pk, abort_reason=abort_reason)
    flow = ReasoningFlow.objects.get(pk=flow_id)
    assert flow.patient_safe_summary is True, flow.summary_guard_rule
    assert flow.dimensions_snapshot, "closing the flow should store its radar snapshot"
    return patient, flow_id


def closed_flow(
    *, patient_id: uuid.UUID | None = None, merge: bool = False, abort_reason: str | None = None
) -> uuid.UUID:
    """A completed flow of three safe steps; with ``merge`` the verdict has two parents; with
    ``abort_reason`` the flow is aborted instead."""
    flow, _ = recording_services.start_flow(
        {
            "trigger_type": "user_question",
            "trigger_ref": f"browser/{uuid.uuid4().hex[:8]}",
            "trigger_summary": "Asked whether a change in blood pressure treatment is needed",
            "agent": "researcher",
            "patient_id": patient_id,
        },
        actor=ACTOR,
    )
    ids = [uuid.uuid4() for _ in range(3)]
    steps: list[dict[str, Any]] = [
        {
            "id": ids[0],
            "kind": "retrieval",
            "agent": "researcher",
            "summary_text": "Retrieved recent readings and current guidelines",
            "confidence": 0.96,
            "latency_ms": 120,
        },
        {
            "id": ids[1],
            "kind": "llm_prompt",
            "agent": "researcher",
            "summary_text": "Compared the readings with the guideline targets",
            "confidence": 0.95,
            "latency_ms": 340,
            "parent_step_id": ids[0],
        },
        {
            "id": ids[2],
            "kind": "verdict",
            "agent": "critic",
            "summary_text": "Concluded that a follow-up visit is the right next step",
            "confidence": 0.97,
            "latency_ms": 90,
            "parent_step_id": ids[1],
        },
    ]
    if merge:
        steps[2]["extra_parent_ids"] = [ids[0]]
    recording_services.add_steps(flow.pk, steps, actor=ACTOR)
    if abort_reason is not None:
        recording_services.close_flow(flow.pk, state="aborted", actor=ACTOR, abort_reason=abort_reason)
        return flow.pk
    recording_services.close_flow(
        flow.pk,
        state="completed",
        actor=ACTOR,
        outcome_type="recommendation_delivered",
        outcome_summary=OUTCOME,
    )
    return flow.pk


# --- Browser helpers ----------------------------------------------------------------


def log_in(page: Page, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.click("main button[type=submit]")
    expect(page.locator("h1")).not_to_have_text("Log in")


def mark_page(page: Page) -> None:
    """Tag the loaded document; ``still_same_page`` then tells an htmx swap from a reload."""
    page.evaluate("window.__browserTestMark = 'same-document'")


def still_same_page(page: Page) -> bool:
    return bool(page.evaluate("window.__browserTestMark === 'same-document'"))


def hits_shown(page: Page, pathway: Pathway) -> int:
    text = page.locator(f"#hits-{pathway.pk}").inner_text()
    found = re.match(r"\s*(\d+) reuses?\b", text)
    assert found, f"hit count text not understood: {text!r}"
    return int(found.group(1))


def assert_no_sideways_scroll(page: Page) -> None:
    widths = page.evaluate(
        """() => ({
            scroll: document.documentElement.scrollWidth,
            inner: window.innerWidth,
            wide: [...document.querySelectorAll('body *')]
                .filter(el => el.getBoundingClientRect().right > window.innerWidth + 1)
                .slice(0, 8)
                .map(el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
                     + (el.getAttribute('class') ? '.' + el.getAttribute('class').trim().split(/\\s+/).join('.') : '')
                     + ' right=' + Math.round(el.getBoundingClientRect().right)),
        })"""
    )
    assert widths["scroll"] <= widths["inner"] + 1, f"page scrolls sideways at {page.url}: {widths}"


def focused_outline(page: Page) -> dict[str, str]:
    return dict(
        page.evaluate(
            """() => {
                const el = document.activeElement;
                const style = getComputedStyle(el);
                return {tag: el.tagName.toLowerCase(), text: (el.innerText || el.value || '').trim().slice(0, 40),
                        style: style.outlineStyle, width: style.outlineWidth};
            }"""
        )
    )


def assert_keyboard_focus_visible(page: Page) -> None:
    """Tab to the first link, then on to the first button: each shows an outline."""
    page.locator("body").focus()
    page.keyboard.press("Tab")
    first = focused_outline(page)
    assert first["tag"] == "a", f"the first Tab stop should be a link: {first}"
    assert first["style"] != "none" and first["width"] != "0px", f"no visible focus on the first link: {first}"
    for _ in range(40):
        page.keyboard.press("Tab")
        current = focused_outline(page)
        if current["tag"] == "button":
            assert current["style"] != "none" and current["width"] != "0px", f"no visible focus on a button: {current}"
            return
    pytest.fail("no button reached by Tab within 40 presses")


# --- Operator -----------------------------------------------------------------------


def test_operator_reuses_compares_and_resolves_on_the_research_console(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    ranked = seed_pathways()
    review, _ = mark_claim_for_review(claim_id=CLAIM_ID, actor=ACTOR, source="critic", trigger_type=TRIGGER_TYPE)

    log_in(page, *OPERATOR)
    # /dashboard/ sends operators on to their dashboard, which links to the Research Console.
    assert page.url.endswith(DASHBOARD), page.url
    page.locator("nav.dashboard-links").get_by_role("link", name="Research Console").click()
    page.wait_for_url(f"**{CONSOLE}")
    expect(page.locator("h1")).to_have_text("Research Console")
    # htmx is served locally by the live server (static/vendor), and it loaded.
    assert page.evaluate("typeof htmx") == "object"
    mark_page(page)

    # Find candidates: exact ref first, then the prefix siblings by hit count.
    page.fill("#trigger_type", TRIGGER_TYPE)
    page.fill("#trigger_ref", EXACT_REF)
    page.get_by_role("button", name="Find candidates").click()
    cards = page.locator("#candidates li.candidate")
    expect(cards).to_have_count(3)
    assert [card.get_attribute("data-pathway") for card in cards.all()] == [str(p.pk) for p in ranked]
    first_card = page.locator(f"#candidate-{ranked[0].pk}")
    expect(first_card).to_contain_text("Exact ref")
    expect(first_card.locator(".score")).to_have_text("1.00")
    expect(page.locator(f"#candidate-{ranked[1].pk}")).to_contain_text("Prefix ref")
    expect(first_card.locator("svg[role=img]").first).to_be_visible()
    assert still_same_page(page), "finding candidates reloaded the page instead of swapping #candidates"
    screenshot(page, "console")

    # Reuse the first: its hit count rises in place, and in the database.
    before = hits_shown(page, ranked[0])
    assert before == SEEDED[0][1]
    first_card.get_by_role("button", name="Reuse pathway").click()
    expect(page.locator(f"#hits-{ranked[0].pk}")).to_contain_text("the last just now")
    assert hits_shown(page, ranked[0]) == before + 1
    ranked[0].refresh_from_db()
    assert ranked[0].hit_count == before + 1
    assert still_same_page(page), "Reuse pathway reloaded the page instead of swapping the hit count"

    # Tick two candidates: both polygons on one radar, six axes ranked, a pick.
    page.locator(f"#compare-{ranked[0].pk}").check()
    expect(page.locator("#comparison")).to_contain_text("Tick one more candidate")
    page.locator(f"#compare-{ranked[1].pk}").check()
    comparison = page.locator("#comparison")
    expect(comparison.locator("polygon.radar-series-a")).to_have_count(1)
    expect(comparison.locator("polygon.radar-series-b")).to_have_count(1)
    legend = comparison.locator("ol.radar-deltas li")
    expect(legend).to_have_count(6)
    deltas = [abs(int(item.get_attribute("data-delta") or "0")) for item in legend.all()]
    assert deltas == sorted(deltas, reverse=True), f"legend not ranked by difference: {deltas}"
    expect(comparison.locator(".radar-pick")).to_contain_text("Pick:")
    comparison.scroll_into_view_if_needed()
    screenshot(page, "comparison")

    # Resolve the pending claim with a note: it moves to "Recently resolved".
    entry = page.locator(f"#review-{review.pk}")
    expect(entry).to_contain_text(CLAIM_ID)
    expect(page.locator("#recently-resolved")).not_to_contain_text(CLAIM_ID)
    entry.locator("textarea").fill("Checked against the source: the claim stands.")
    entry.get_by_role("button", name="Resolve").click()
    expect(page.locator(f"#review-{review.pk}")).to_have_count(0)
    expect(page.locator("#recently-resolved")).to_contain_text(CLAIM_ID)
    expect(page.locator("#reviews")).to_contain_text("No claims are waiting for review.")
    review.refresh_from_db()
    assert review.status == ClaimReview.Status.RESOLVED
    assert review.resolution_note == "Checked against the source: the claim stands."
    assert still_same_page(page), "Resolve reloaded the page instead of swapping #reviews"
    page.locator("#reviews").scroll_into_view_if_needed()
    screenshot(page, "after-resolve")

    assert page_errors == []


def test_operator_opens_the_pathway_library_and_a_flow_dag(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    seed_pathways()
    flow_id = closed_flow(merge=True)

    log_in(page, *OPERATOR)
    response = page.goto(LIBRARY)
    assert response is not None and response.status == 200, response and response.status
    expect(page.locator("h1")).to_have_count(1)
    expect(page.locator("h1")).to_be_visible()
    screenshot(page, "pathway-library")

    response = page.goto(f"/dashboard/admin/reasoning/{flow_id}")
    assert response is not None and response.status == 200, response and response.status
    expect(page.locator("h1")).to_have_count(1)
    expect(page.locator("h1")).to_be_visible()
    screenshot(page, "flow-dag")

    assert page_errors == []


# --- Patient ------------------------------------------------------------------------


def test_patient_reads_the_narrative_then_turns_consent_off(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    patient, flow_id = seed_patient_decision()
    narrative_url = f"/dashboard/reasoning/{flow_id}"

    log_in(page, *PATIENT)
    assert page.url.endswith(PROFILE), page.url

    response = page.goto(narrative_url)
    assert response is not None and response.status == 200, response and response.status
    expect(page.locator("h1")).to_have_text("How this decision was reached")
    expect(page.locator("main")).to_contain_text(OUTCOME)
    radar = page.locator("main svg[role=img]")
    expect(radar).to_have_count(1)
    expect(radar).to_be_visible()
    label = radar.get_attribute("aria-label") or ""
    drawn = radar.locator("text").all_inner_texts()
    assert any(word in label for word in PATIENT_LABELS) or set(PATIENT_LABELS) <= set(drawn), (label, drawn)
    screenshot(page, "narrative")

    page.goto(PROFILE)
    toggle = page.locator("#consent-toggle")
    expect(toggle).to_contain_text("is on")
    screenshot(page, "profile-consent-on")
    mark_page(page)
    toggle.get_by_role("button", name="Turn off").click()
    expect(page.locator("#consent-toggle")).to_contain_text("is now off")
    expect(page.locator("#consent-toggle").get_by_role("button", name="Turn on")).to_be_visible()
    assert still_same_page(page), "the consent toggle reloaded the page instead of swapping the form"
    patient.refresh_from_db()
    assert patient.reasoning_read_consent is False
    screenshot(page, "profile-consent-off")

    response = page.goto(narrative_url)
    assert response is not None and response.status == 403, response and response.status
    expect(page.locator("h1")).to_have_text("Explanations are turned off")
    main = page.locator("main")
    expect(main).to_contain_text("turned on reading")
    expect(main.get_by_role("link", name="your profile")).to_have_attribute("href", PROFILE)
    expect(main).not_to_contain_text(OUTCOME)
    expect(main.locator("svg[role=img]")).to_have_count(0)
    screenshot(page, "no-consent")

    assert page_errors == []


# --- Phone width --------------------------------------------------------------------


def test_console_fits_a_phone_and_shows_keyboard_focus(page: Page, screenshot: Screenshot) -> None:
    seed_operator()
    ranked = seed_pathways()
    mark_claim_for_review(claim_id=CLAIM_ID, actor=ACTOR, source="critic")
    page.set_viewport_size(PHONE)

    log_in(page, *OPERATOR)
    # The fullest console: candidates with radars and an open comparison.
    page.goto(
        f"{CONSOLE}?trigger_type={TRIGGER_TYPE}&trigger_ref={EXACT_REF}&compare={ranked[0].pk}&compare={ranked[1].pk}"
    )
    expect(page.locator("#candidates li.candidate")).to_have_count(3)
    expect(page.locator("#comparison polygon.radar-series-b")).to_have_count(1)
    screenshot(page, "console-phone")
    assert_no_sideways_scroll(page)
    assert_keyboard_focus_visible(page)


def test_patient_sees_an_aborted_flow_as_stopped_before_a_decision(page: Page, screenshot: Screenshot) -> None:
    _, flow_id = seed_patient_decision(abort_reason="tool_error")

    log_in(page, *PATIENT)
    response = page.goto(f"/dashboard/reasoning/{flow_id}")

    assert response is not None and response.status == 200
    expect(page.locator("h1")).to_have_text("Stopped before a decision")
    banner = page.get_by_role("alert")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("This process stopped before reaching a decision. Nothing was recommended.")
    main = page.locator("main")
    expect(main).to_contain_text("What was done before it stopped")
    expect(main).not_to_contain_text("Finished")
    expect(main.locator("svg")).to_have_count(0)
    screenshot(page, "narrative-aborted")


def test_narrative_fits_a_phone_and_shows_keyboard_focus(page: Page, screenshot: Screenshot) -> None:
    _, flow_id = seed_patient_decision()
    page.set_viewport_size(PHONE)

    log_in(page, *PATIENT)
    response = page.goto(f"/dashboard/reasoning/{flow_id}")
    assert response is not None and response.status == 200
    expect(page.locator("main svg[role=img]")).to_have_count(1)
    screenshot(page, "narrative-phone")
    assert_no_sideways_scroll(page)
    assert_keyboard_focus_visible(page)


def test_operator_sees_late_and_failed_close_work_in_banners(page: Page, screenshot: Screenshot) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from reasoning.models import CloseWork
    from tests.factories import make_flow

    seed_operator()
    late, failed = make_flow(), make_flow()
    now = timezone.now()
    CloseWork.objects.create(receiver="pathways.extract", flow_id=late, created_at=now - timedelta(minutes=9))
    CloseWork.objects.create(
        receiver="pathways.extract", flow_id=failed, attempts=10, last_error="RuntimeError", failed_at=now
    )

    log_in(page, *OPERATOR)
    for viewport, name in (({"width": 1280, "height": 800}, "close-work-banners"), (PHONE, "close-work-banners-phone")):
        page.set_viewport_size(viewport)  # type: ignore[arg-type]
        page.goto("/dashboard/admin/reasoning/")
        alerts = page.get_by_role("alert")
        expect(alerts.filter(has_text=re.compile(r"^Work owed"))).to_contain_text("the job worker is not running")
        expect(alerts.filter(has_text="failed after 10 attempts")).to_contain_text("close_work --retry-failed")
        screenshot(page, name)
        assert_no_sideways_scroll(page)


def test_operator_shows_and_hides_a_steps_content_at_desktop_and_phone_widths(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    from audit.models import AuditEvent
    from tests.factories import make_flow

    seed_operator()  # a superuser operator: may read content (Django's rule)
    prompt = "Zebulon asked whether the new creatinine changes his 40 mg dose, and what to watch for next."
    flow_id = make_flow(
        steps=[
            {
                "kind": "llm_prompt",
                "agent": "researcher",
                "summary_text": "Asked the model about the dose",
                "model": "gpt-4o",
                "inputs": {"prompt": prompt, "temperature": 0.2},
                "outputs": {"completion": "Hold the increase until the renal panel is repeated."},
                "pii_fields": ["prompt", "completion"],
            }
        ]
    )
    log_in(page, *OPERATOR)
    for viewport, name in (({"width": 1280, "height": 800}, "flow-content"), (PHONE, "flow-content-phone")):
        page.set_viewport_size(viewport)  # type: ignore[arg-type]
        page.goto(f"/dashboard/admin/reasoning/{flow_id}")
        expect(page.get_by_text(prompt)).to_have_count(0)
        page.get_by_role("link", name="Show content").click()
        expect(page.get_by_text(prompt)).to_be_visible()
        expect(page.get_by_role("link", name="Hide content")).to_be_visible()
        screenshot(page, name)
        assert_no_sideways_scroll(page)
        page.get_by_role("link", name="Hide content").click()
        expect(page.get_by_text(prompt)).to_have_count(0)
    reads = AuditEvent.objects.filter(action="admin.reasoning.flow.content_read", target_id=str(flow_id))
    assert reads.count() == 2  # one per Show content, none for the pages that kept it hidden
    assert page_errors == []
