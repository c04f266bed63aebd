"""The Research Console: the claims pending review."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow
from reasoning.recording import services as recording_services
from research_backlog import services
from research_backlog.models import ClaimReview
from tests.conftest import audit_trail_text, events
from tests.factories import NOW, make_flow, make_review
from tests.html import doc
from tests.research_backlog.support import (
    CONSOLE,
    HTMX,
    LISTED,
    NOTE,
    RESOLVED,
    REVIEWS,
    console_review_url,
    messages_on,
    pending_ids,
    review_form_on_page,
    submit,
    written,
)

pytestmark = pytest.mark.django_db


def test_reviews_list_pending_oldest_first_with_note_and_both_buttons(
    clock: time_machine.Coordinates, operator_client: Client, actor: str
) -> None:
    make_review("claim-b", created_at=NOW - timedelta(hours=1))
    make_review("claim-a", created_at=NOW - timedelta(hours=3))
    make_review("claim-c", created_at=NOW - timedelta(hours=2))
    make_review("claim-done", status="resolved", resolved_at=NOW - timedelta(hours=30))

    response = operator_client.get(REVIEWS, headers=HTMX)

    assert response.status_code == 200
    panel = doc(response).by_id("reviews")
    assert pending_ids(panel) == ["claim-a", "claim-c", "claim-b"]
    assert panel.one("h2").text == "Claims pending review 3"
    for card in panel.select("li", "card"):
        form = card.one("form")
        review_id = card.attrs["id"].removeprefix("review-")
        assert (form.attrs["method"], form.attrs["action"], form.attrs["hx-post"]) == (
            "post",
            console_review_url(review_id),
            console_review_url(review_id),
        )
        assert form.attrs["hx-target"] == "#reviews"
        assert form.one("textarea").attrs["name"] == "note"
        buttons = [(b.text, b.attrs["name"], b.attrs["value"]) for b in form.select("button")]
        assert buttons == [("Resolve", "status", "resolved"), ("Dismiss", "status", "dismissed")]
    # Local time with the zone named, then how long ago.
    assert panel.select("li", "card")[0].one("dl").definitions()["Marked"].text == "2 Mar 2026, 09:00 UTC (3 h ago)"
    # Resolved more than a day ago: not in the strip.
    assert panel.by_id("recently-resolved").text == "Nothing resolved in the last 24 hours."
    (event,) = events(LISTED)
    assert (event.actor, event.payload) == (actor, {"pending_count": 3, "recent_count": 0})


def test_no_pending_reviews(operator_client: Client) -> None:
    panel = doc(operator_client.get(REVIEWS)).by_id("reviews")

    assert "No claims are waiting for review." in panel.text
    assert not panel.select("form")


def test_resolve_by_plain_form_stores_the_note_and_moves_it_to_recently_resolved(
    csrf_client: Client, pending_review: ClaimReview, actor: str
) -> None:
    form = review_form_on_page(csrf_client, pending_review)
    resolve = form.one("button", value="resolved")

    response = submit(csrf_client, form, button=resolve, note=NOTE)

    assert response.status_code == 302
    assert response["Location"] == CONSOLE
    pending_review.refresh_from_db()
    assert (pending_review.status, pending_review.resolution_note, pending_review.resolved_by) == (
        "resolved",
        NOTE,
        actor,
    )
    (event,) = events(RESOLVED)
    assert (event.actor, event.target_id) == (actor, str(pending_review.pk))
    assert event.payload["status"] == "resolved"
    assert event.payload["note_chars"] == len(NOTE)
    assert NOTE not in audit_trail_text()
    page = doc(csrf_client.get(CONSOLE))
    assert [li.text for li in page.one("ul", "messages").select("li")] == ["Resolved the claim."]
    panel = page.by_id("reviews")
    assert pending_ids(panel) == []
    (resolved,) = panel.by_id("recently-resolved").select("li")
    assert resolved.text.startswith("Resolved claim-17, ")
    assert resolved.text.removeprefix("Resolved claim-17, ").startswith(timezone.now().strftime("%-d %b %Y, "))
    assert "UTC (just now)" in resolved.text
    # The note the curator typed is what the next curator reads in the strip (never in the trail).
    assert resolved.one("p", "resolution-note").text == NOTE


def test_review_form_without_the_csrf_token_is_refused(csrf_client: Client, pending_review: ClaimReview) -> None:
    form = review_form_on_page(csrf_client, pending_review)
    before = written()

    response = csrf_client.post(form.attrs["action"], {"status": "resolved", "note": NOTE})

    assert response.status_code == 403
    assert written() == before


@pytest.mark.parametrize("status", ["resolved", "dismissed"])
def test_resolve_or_dismiss_by_htmx_rerenders_the_reviews_panel(
    csrf_client: Client, pending_review: ClaimReview, actor: str, status: str
) -> None:
    other, _ = services.mark_claim_for_review(claim_id="claim-18", actor="token:critic", source="critic")
    form = review_form_on_page(csrf_client, pending_review)

    response = submit(csrf_client, form, button=form.one("button", value=status), htmx=True, note=NOTE)

    assert response.status_code == 200
    panel = doc(response).one("section")
    assert panel.attrs["id"] == "reviews"  # hx-target="#reviews" hx-swap="outerHTML"
    assert pending_ids(panel) == [other.claim_id]
    assert panel.one("h2").text == "Claims pending review 1"
    assert [li.attrs["data-claim"] for li in panel.by_id("recently-resolved").select("li")] == ["claim-17"]
    assert panel.by_id("recently-resolved").one("li").text.startswith(f"{status.capitalize()} claim-17")
    assert panel.by_id("recently-resolved").one("p", "resolution-note").text == NOTE
    assert not panel.select("p", "error")
    pending_review.refresh_from_db()
    assert (pending_review.status, pending_review.resolution_note, pending_review.resolved_by) == (status, NOTE, actor)
    (event,) = events(RESOLVED)
    assert (event.actor, event.payload["status"]) == (actor, status)
    assert NOTE not in audit_trail_text()


def test_resolving_again_by_htmx_is_409_already(operator_client: Client, pending_review: ClaimReview) -> None:
    services.resolve_claim_review(pending_review.pk, status="resolved", note="first", actor="user:someone")
    resolved_before = events(RESOLVED)

    response = operator_client.post(
        console_review_url(pending_review.pk), {"status": "dismissed", "note": NOTE}, headers=HTMX
    )

    assert response.status_code == 409
    panel = doc(response).by_id("reviews")
    assert panel.one("p", "error").text == "Someone already resolved or dismissed that claim."
    pending_review.refresh_from_db()
    assert (pending_review.status, pending_review.resolution_note) == ("resolved", "first")
    assert events(RESOLVED) == resolved_before
    assert NOTE not in audit_trail_text()


def test_resolving_again_by_plain_form_shows_the_error(operator_client: Client, pending_review: ClaimReview) -> None:
    services.resolve_claim_review(pending_review.pk, status="resolved", note="first", actor="user:someone")
    before = written()

    response = operator_client.post(console_review_url(pending_review.pk), {"status": "resolved", "next": CONSOLE})

    assert response.status_code == 302
    assert written() == before
    assert messages_on(operator_client) == ["Someone already resolved or dismissed that claim."]


@pytest.mark.parametrize(
    "body",
    [{"status": "approved"}, {"status": ""}, {}, {"status": "pending"}, {"status": "resolved", "note": "n" * 2001}],
)
def test_bad_status_or_note_is_400(operator_client: Client, pending_review: ClaimReview, body: dict[str, str]) -> None:
    response = operator_client.post(console_review_url(pending_review.pk), body, headers=HTMX)

    assert response.status_code == 400
    assert doc(response).by_id("reviews").one("p", "error").text == (
        "Choose Resolve or Dismiss, and keep the note under 2000 characters."
    )
    pending_review.refresh_from_db()
    assert pending_review.status == "pending"
    assert events(RESOLVED) == []


def test_bad_status_by_plain_form_shows_the_error(operator_client: Client, pending_review: ClaimReview) -> None:
    response = operator_client.post(console_review_url(pending_review.pk), {"status": "approved"})

    assert response.status_code == 302
    assert messages_on(operator_client) == ["Choose Resolve or Dismiss, and keep the note under 2000 characters."]
    pending_review.refresh_from_db()
    assert pending_review.status == "pending"


@pytest.mark.parametrize("review_id", [str(uuid.UUID(int=9)), "not-a-uuid"])
def test_unknown_review_is_404(operator_client: Client, pending_review: ClaimReview, review_id: str) -> None:
    before = written()

    response = operator_client.post(console_review_url(review_id), {"status": "resolved"}, headers=HTMX)

    assert response.status_code == 404
    assert written() == before


def test_a_note_with_crlf_and_tabs_is_kept(operator_client: Client, pending_review: ClaimReview) -> None:
    note = "Checked the source.\r\n\tThe dose was transposed."

    response = operator_client.post(
        console_review_url(pending_review.pk), {"status": "resolved", "note": note}, headers=HTMX
    )

    assert response.status_code == 200
    pending_review.refresh_from_db()
    assert pending_review.resolution_note == note
    assert "transposed" not in json.dumps([e.payload for e in AuditEvent.objects.all()])


def critic_flow(trigger_summary: str, outcome_summary: str, **metrics: str) -> uuid.UUID:
    """A Critic flow that rejected claim-42, closed through the services (so the guard ran)."""
    flow_id = make_flow(agent="critic", trigger_type="claim_check", trigger_summary=trigger_summary, close=False)
    recording_services.close_flow(
        flow_id,
        state="completed",
        actor="token:critic",
        outcome_type="claim_rejected",
        outcome_summary=outcome_summary,
        outcome_metrics={"verdict": "reject", "claim_id": "claim-42", **metrics},
    )
    return flow_id


def test_a_claim_card_shows_the_guarded_claim_the_critics_reason_and_the_source_flow(operator_client: Client) -> None:
    flow_id = critic_flow(
        "Checked a drafted claim about exercise and resting heart rate",
        "Found no independent source for the claim",
        rejection_reason="insufficient_support",
    )
    assert ReasoningFlow.objects.get(pk=flow_id).patient_safe_summary is True
    entry, _ = services.mark_claim_for_review(
        claim_id="claim-42", actor="system:backlog_producer", source="critic_auto_enqueue", source_flow_id=flow_id
    )

    card = doc(operator_client.get(REVIEWS)).by_id(f"review-{entry.pk}")

    assert card.one("blockquote", "claim-text").text == "Checked a drafted claim about exercise and resting heart rate"
    facts = card.one("dl").definitions()
    # The reason in words, with the identifier beside it for a search.
    assert facts["Critic's reason"].text == "Insufficient support insufficient_support"
    assert facts["Critic's finding"].text == "Found no independent source for the claim"
    assert facts["Source"].one("span").text == "Critic auto enqueue"
    assert facts["Source"].one("a", "source-flow").attrs["href"] == f"/dashboard/admin/reasoning/{flow_id}"


def test_a_claim_whose_flow_failed_the_guard_shows_no_text_only_why(operator_client: Client) -> None:
    unsafe = "Checked the claim that Zebulon Quixote, MRN 4455, takes metformin 500mg"
    flow_id = critic_flow(unsafe, "Rejected the metformin 500mg claim for Zebulon Quixote")
    assert ReasoningFlow.objects.get(pk=flow_id).patient_safe_summary is False
    entry, _ = services.mark_claim_for_review(
        claim_id="claim-42", actor="system:backlog_producer", source="critic_auto_enqueue", source_flow_id=flow_id
    )

    response = operator_client.get(REVIEWS)

    card = doc(response).by_id(f"review-{entry.pk}")
    assert not card.select("blockquote")
    assert card.one("p", "claim-withheld").text == (
        "The source flow's summaries did not pass the summary guard, so they are not shown."
    )
    assert "Quixote" not in response.content.decode()
    assert "metformin" not in response.content.decode()
    facts = card.one("dl").definitions()
    assert facts["Critic's reason"].text == "Claim rejected claim_rejected"  # no rejection_reason: the entry's
    assert "Critic's finding" not in facts
    assert facts["Source"].one("a", "source-flow").attrs["href"] == f"/dashboard/admin/reasoning/{flow_id}"


def test_a_claim_without_a_source_flow_says_so(operator_client: Client, pending_review: ClaimReview) -> None:
    card = doc(operator_client.get(REVIEWS)).by_id(f"review-{pending_review.pk}")

    assert card.one("p", "claim-withheld").text == "No source flow was recorded for this claim."
    assert not card.select("a", "source-flow")


def test_recently_resolved_shows_each_note_and_the_source_flow(
    clock: time_machine.Coordinates, operator_client: Client
) -> None:
    flow_id = critic_flow("Checked a drafted claim about sleep", "Found a contradicting source")
    entry, _ = services.mark_claim_for_review(
        claim_id="claim-42", actor="token:critic", source="critic", source_flow_id=flow_id
    )
    services.resolve_claim_review(entry.pk, status="dismissed", note=NOTE, actor="user:someone")
    make_review("claim-quiet", status="resolved", resolved_at=NOW - timedelta(hours=2))

    strip = doc(operator_client.get(REVIEWS)).by_id("recently-resolved")

    first, second = strip.select("li")
    assert first.text.startswith("Dismissed claim-42, 2 Mar 2026, 12:00 UTC (just now)")
    assert first.one("p", "resolution-note").text == NOTE
    assert first.one("a").attrs["href"] == f"/dashboard/admin/reasoning/{flow_id}"
    assert second.text.startswith("Resolved claim-quiet, 2 Mar 2026, 10:00 UTC (2 h ago)")
    assert not second.select("p", "resolution-note")
