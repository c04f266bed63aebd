"""The Research Console in headless Chromium, as an operator uses it: tick two candidates and
the comparison is in view; a third tick is refused with a message; a reuse is undone; the
expanded radar hides again; at 1280 and 390 px the page does not scroll sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from audit.models import AuditEvent
from pathways.models import Pathway
from reasoning.recording import services as recording_services
from research_backlog.models import ResearchRequest
from research_backlog.services import mark_claim_for_review, resolve_claim_review
from tests.browser.conftest import DESKTOP, Screenshot
from tests.browser.test_operator_and_patient import (
    ACTOR,
    CONSOLE,
    OPERATOR,
    PHONE,
    assert_no_sideways_scroll,
    hits_shown,
    log_in,
    mark_page,
    seed_operator,
    still_same_page,
)
from tests.factories import make_flow, make_pathway
from tests.research_backlog.support import add_seed_steps

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TRIGGER_TYPE = "lab_result"
QUERY = f"{CONSOLE}?trigger_type={TRIGGER_TYPE}&trigger_ref=labs/potassium"


def seed_library() -> list[Pathway]:
    """Six candidates (one exact, five siblings), enough that the list runs past one screen."""
    rows = [make_pathway(TRIGGER_TYPE, "labs/potassium", hit_count=2)]
    rows += [make_pathway(TRIGGER_TYPE, f"labs/panel-{n}", hit_count=9 - n) for n in range(5)]
    for row in rows:
        add_seed_steps(row, "Reviewed recent lab results", kind="retrieval")
        add_seed_steps(row, "Compared them with the care guideline", kind="evidence_assembly")
    return rows


def seed_reviews() -> None:
    """A claim waiting, from a guard-passing Critic flow, and one resolved with a note."""
    flow_id = make_flow(
        agent="critic", trigger_type="claim_check", trigger_summary="Checked a drafted claim about sleep", close=False
    )
    recording_services.close_flow(
        flow_id,
        state="completed",
        actor=ACTOR,
        outcome_type="claim_rejected",
        outcome_summary="Found no independent source for the claim",
        outcome_metrics={"verdict": "reject", "claim_id": "claim-sleep-1", "rejection_reason": "insufficient_support"},
    )
    mark_claim_for_review(claim_id="claim-sleep-1", actor=ACTOR, source="critic_auto_enqueue", source_flow_id=flow_id)
    done, _ = mark_claim_for_review(claim_id="claim-done-2", actor=ACTOR, source="critic")
    resolve_claim_review(done.pk, status="dismissed", note="Duplicate of claim-sleep-1.", actor=ACTOR)


def in_view(page: Page, selector: str) -> bool:
    """The element's top edge is on screen (between the top of the window and its bottom)."""
    return bool(
        page.evaluate(
            """(selector) => {
                const el = document.querySelector(selector);
                if (!el) return false;
                const box = el.getBoundingClientRect();
                return box.height > 0 && box.top >= 0 && box.top < window.innerHeight;
            }""",
            selector,
        )
    )


def test_two_ticks_bring_the_comparison_into_view_and_a_third_is_refused(
    page: Page, screenshot: Screenshot, page_errors: list[str]
) -> None:
    seed_operator()
    first, second, third, *_ = seed_library()
    log_in(page, *OPERATOR)
    page.goto(QUERY)
    expect(page.locator("#candidates li.candidate")).to_have_count(6)
    mark_page(page)
    assert not in_view(page, "#comparison"), "the test needs the comparison to start below the fold"

    page.locator(f"#compare-{first.pk}").check()
    expect(page.locator("#comparison")).to_contain_text("Tick one more candidate")
    page.locator(f"#compare-{second.pk}").check()

    comparison = page.locator("#comparison section")
    expect(comparison.locator("polygon.radar-series-b")).to_have_count(1)
    page.wait_for_function(
        """() => { const el = document.querySelector('#comparison section');
                   if (!el) return false; const box = el.getBoundingClientRect();
                   return box.top >= 0 && box.top < window.innerHeight; }"""
    )
    assert in_view(page, "#comparison section")
    screenshot(page, "comparison-in-view")

    # A third tick: refused next to the box, the box stays clear, the chart is untouched.
    keys = comparison.locator(".radar-keys").inner_text()
    page.locator(f"#compare-{third.pk}").scroll_into_view_if_needed()
    page.locator(f"#compare-{third.pk}").click()
    message = page.locator("#compare-limit")
    expect(message).to_be_visible()
    expect(message).to_have_text("Compare two at a time: untick one first.")
    expect(page.locator(f"#candidate-{third.pk} #compare-limit")).to_have_count(1)
    assert in_view(page, "#compare-limit")
    expect(page.locator(f"#compare-{third.pk}")).not_to_be_checked()
    assert comparison.locator(".radar-keys").inner_text() == keys
    screenshot(page, "third-tick-refused")

    # Untick one, and the third may join.
    page.locator(f"#compare-{first.pk}").uncheck()
    expect(message).to_be_hidden()
    page.locator(f"#compare-{third.pk}").check()
    expect(page.locator("#comparison .radar-keys")).to_contain_text(third.trigger_ref)
    assert still_same_page(page), "comparing reloaded the page instead of swapping #comparison"
    assert page_errors == []


def test_the_no_javascript_compare_form_lands_on_the_comparison(page: Page) -> None:
    seed_operator()
    first, second, *_ = seed_library()
    log_in(page, *OPERATOR)

    # What the noscript "Compare the two ticked" button submits: the form's GET, to #comparison.
    page.goto(f"{QUERY}&compare={first.pk}&compare={second.pk}#comparison")

    expect(page.locator("#comparison polygon.radar-series-a")).to_have_count(1)
    assert in_view(page, "#comparison")


def test_an_operator_reuses_a_pathway_then_undoes_it(page: Page, page_errors: list[str]) -> None:
    seed_operator()
    first, *_ = seed_library()
    log_in(page, *OPERATOR)
    page.goto(QUERY)
    mark_page(page)
    card = page.locator(f"#candidate-{first.pk}")
    expect(card).to_contain_text("Counts this reuse and strengthens the pathway.")
    before = hits_shown(page, first)

    card.get_by_role("button", name="Reuse pathway").click()
    expect(card.locator(".reused")).to_contain_text("Reused just now.")
    assert hits_shown(page, first) == before + 1
    first.refresh_from_db()
    assert first.hit_count == before + 1

    card.get_by_role("button", name="Undo").click()
    expect(card.locator(".reused")).to_have_text("Reuse undone: it no longer counts.")
    expect(card.get_by_role("button", name="Reuse pathway")).to_be_visible()
    assert hits_shown(page, first) == before
    first.refresh_from_db()
    assert first.hit_count == before
    assert AuditEvent.objects.filter(action="admin.reasoning.pathway.reuse_undone").count() == 1
    assert still_same_page(page), "Undo reloaded the page instead of swapping the card's actions"
    assert page_errors == []


def test_the_expanded_radar_hides_again_and_drops_its_thumbnail(page: Page) -> None:
    seed_operator()
    first, *_ = seed_library()
    log_in(page, *OPERATOR)
    page.goto(QUERY)
    expand = page.locator(f"#candidate-{first.pk} details.radar-expand")
    thumbnail = expand.locator("summary .radar-thumb svg")
    expect(thumbnail).to_be_visible()

    expand.get_by_text("Show dimensions").click()
    expect(expand.locator("figure.radar-expanded")).to_be_visible()
    expect(thumbnail).to_be_hidden()
    hide = expand.get_by_text("Hide dimensions")
    expect(hide).to_be_visible()

    hide.click()
    expect(expand.locator("figure.radar-expanded")).to_be_hidden()
    expect(thumbnail).to_be_visible()


def test_the_seed_flow_steps_open_and_the_link_goes_to_the_flow(page: Page) -> None:
    seed_operator()
    first, *_ = seed_library()
    log_in(page, *OPERATOR)
    page.goto(QUERY)
    card = page.locator(f"#candidate-{first.pk}")

    card.get_by_text("2 steps of the seed flow").click()
    expect(card.locator("details.seed-steps li")).to_have_text(
        ["Retrieval: Reviewed recent lab results", "Evidence assembly: Compared them with the care guideline"]
    )
    card.get_by_role("link", name="Open the seed flow").click()
    page.wait_for_url(f"**/dashboard/admin/reasoning/{first.seed_flow_id}")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_the_fullest_console_fits_the_width(page: Page, screenshot: Screenshot, viewport: dict[str, int]) -> None:
    seed_operator()
    first, second, *_ = seed_library()
    seed_reviews()
    page.set_viewport_size({"width": viewport["width"], "height": viewport["height"]})
    log_in(page, *OPERATOR)

    page.goto(f"{QUERY}&compare={first.pk}&compare={second.pk}")
    expect(page.locator("#comparison polygon.radar-series-b")).to_have_count(1)
    card = page.locator(f"#candidate-{first.pk}")
    card.get_by_role("button", name="Reuse pathway").click()
    expect(card.get_by_role("button", name="Undo")).to_be_visible()
    card.locator("details.seed-steps summary").click()
    card.get_by_text("Show dimensions").click()
    expect(page.locator("#reviews blockquote.claim-text")).to_have_text("Checked a drafted claim about sleep")
    expect(page.locator("#recently-resolved .resolution-note")).to_have_text("Duplicate of claim-sleep-1.")

    screenshot(page, f"console-{viewport['width']}")
    assert_no_sideways_scroll(page)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
def test_an_empty_trigger_type_is_named_next_to_the_field(
    page: Page, screenshot: Screenshot, page_errors: list[str], viewport: dict[str, int]
) -> None:
    seed_operator()
    page.set_viewport_size({"width": viewport["width"], "height": viewport["height"]})
    log_in(page, *OPERATOR)
    page.goto(CONSOLE)
    searches: list[str] = []
    page.on("request", lambda request: searches.append(request.url) if "/candidates" in request.url else None)

    page.get_by_role("button", name="Find candidates").click()

    message = page.locator("#trigger_type-required")
    expect(message).to_be_visible()
    expect(message).to_have_text("Trigger type: enter one to find candidates, for example user_question.")
    field = page.locator("#trigger_type")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field).to_have_attribute("aria-describedby", "trigger_type-required")
    expect(field).to_be_focused()
    # Right above the field, within its width's reach: between its label and the box.
    said, box = message.bounding_box(), field.bounding_box()
    assert said is not None and box is not None
    assert 0 <= box["y"] - (said["y"] + said["height"]) < 16, (said, box)
    assert said["x"] < box["x"] + box["width"] and box["x"] < said["x"] + said["width"], (said, box)
    assert in_view(page, "#trigger_type-required")
    assert searches == [], "an empty trigger type was searched for"
    screenshot(page, f"empty-trigger-type-{viewport['width']}")
    assert_no_sideways_scroll(page)

    # Typing clears it, and the search goes ahead.
    field.fill(TRIGGER_TYPE)
    expect(message).to_be_hidden()
    expect(field).not_to_have_attribute("aria-invalid", "true")
    page.get_by_role("button", name="Find candidates").click()
    expect(page.locator("#candidates")).to_contain_text(f"No pathway in the library matches {TRIGGER_TYPE}")
    assert page_errors == []


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280", "390"])
@pytest.mark.parametrize("question", ["", "   \n  "], ids=["empty", "whitespace"])
def test_a_blank_question_is_refused_by_the_server_and_named_on_the_page(
    page: Page, screenshot: Screenshot, page_errors: list[str], viewport: dict[str, int], question: str
) -> None:
    seed_operator()
    page.set_viewport_size({"width": viewport["width"], "height": viewport["height"]})
    log_in(page, *OPERATOR)
    page.goto(QUERY)  # no pathway at all: the panel offers deeper research
    refusals: list[int] = []
    page.on(
        "response", lambda response: refusals.append(response.status) if "/deeper-research" in response.url else None
    )

    page.locator("#question").fill(question)
    page.get_by_role("button", name="Trigger deeper research").click()

    message = page.locator("#deeper-research-error-question")
    expect(message).to_have_text("question: This field may not be blank.")
    expect(message).to_be_visible()
    assert refusals == [400]
    expect(page.locator("#question")).to_have_attribute("aria-describedby", "deeper-research-error-question")
    assert ResearchRequest.objects.count() == 0
    assert not AuditEvent.objects.filter(action__startswith="admin.reasoning.research.deeper").exists()
    message.scroll_into_view_if_needed()
    screenshot(page, f"blank-question-{viewport['width']}")
    assert_no_sideways_scroll(page)
    assert page_errors == []
