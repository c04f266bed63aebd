"""The Research Console: finding and ranking pathway candidates, with their radars."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.test import Client

from pathways.matcher import LABEL_ONLY
from pathways.models import Pathway
from tests.conftest import events
from tests.html import doc
from tests.research_backlog.support import (
    CANDIDATES,
    CONSOLE,
    DEEPER,
    HTMX,
    MATCH_PROXY,
    add_seed_steps,
    candidate_rows,
    console_url,
    form_fields,
    reuse_url,
)

pytestmark = pytest.mark.django_db


def test_query_lists_ranked_candidates_with_what_an_operator_decides_on(
    operator_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"})

    assert response.status_code == 200
    page = doc(response)
    rows = candidate_rows(page)
    expected = [
        ("exact", "#1 labs/potassium", "1.00", "exact_ref", "Exact ref", "3 reuses"),
        ("sibling", "#2 labs/sodium", "0.70", "prefix_ref", "Prefix ref", "1 reuse"),
        ("far", "#3 imaging/xray", "0.30", "trigger_type_only", "Trigger type only", "5 reuses"),
    ]
    assert [row.attrs["data-pathway"] for row in rows] == [str(library[key].pk) for key, *_ in expected]
    for row, (key, heading, score, reason, reason_words, hits) in zip(rows, expected, strict=True):
        pk = str(library[key].pk)
        assert row.one("h3").text == heading
        assert row.one("span", "score").text == score
        assert f"{score} · {reason_words}" in row.text
        assert row.one("span", "reason").attrs["title"] == reason  # the raw label, on hover
        assert row.by_id(f"hits-{pk}").text == hits
        assert row.by_id(f"hits-{pk}").attrs["data-hits"] == str(library[key].hit_count)
        # The inline (compact) radar, and the expanded one behind "Show dimensions".
        summary_radar = row.one("details", "radar-expand").one("summary").one("svg")
        assert summary_radar.attrs["role"] == "img"
        assert summary_radar.attrs["aria-label"].startswith("Decision dimensions.")
        assert len(row.select("svg", role="img")) == 2
        assert len(summary_radar.select("circle")) == 6  # one titled point per axis
        box = row.one("input", type="checkbox")
        assert (box.attrs["name"], box.attrs["value"]) == ("compare", pk)
        button = row.one("button")
        assert button.text == "Reuse pathway"
        assert button.attrs["form"] == f"reuse-{pk}"
        assert page.by_id(f"reuse-{pk}").attrs["action"] == reuse_url(pk)
    assert "strong match" in rows[0].text and "strong match" in rows[1].text
    assert "strong match" not in rows[2].text
    assert "3 candidates for lab_result labs/potassium" in page.by_id("candidates").text
    # The demoted pathway and the other trigger type are not offered.
    shown = {row.attrs["data-pathway"] for row in rows}
    assert str(library["demoted"].pk) not in shown and str(library["other_type"].pk) not in shown
    (event,) = events(MATCH_PROXY)
    assert event.actor == actor
    assert event.payload == {"trigger_type": "lab_result", "count": 3, "top_reason": "exact_ref"}


def test_candidates_partial_lists_the_same_candidates(operator_client: Client, library: dict[str, Pathway]) -> None:
    response = operator_client.get(
        CANDIDATES, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}, headers=HTMX
    )

    assert response.status_code == 200
    fragment = doc(response)
    assert fragment.one("section").attrs["id"] == "candidates"
    assert not fragment.select("html")  # a fragment, not a page
    assert [row.one("span", "score").text for row in candidate_rows(fragment)] == ["1.00", "0.70", "0.30"]
    assert len(events(MATCH_PROXY)) == 1
    # The address bar gets the console's own URL with the query (a reload shows the same
    # candidates), and the previous search's comparison is emptied out of band.
    assert response["HX-Push-Url"] == "/dashboard/admin/reasoning/research-console?" + urlencode(
        {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}
    )
    cleared = fragment.by_id("comparison")
    assert cleared.attrs["hx-swap-oob"] == "true"
    assert cleared.text.strip() == ""


def test_bad_trigger_type_is_400_with_the_error_and_no_match(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "not a label!", "trigger_ref": "labs/potassium"})

    assert response.status_code == 400
    page = doc(response)
    error = page.by_id("query-error")
    assert error.attrs["role"] == "alert"
    assert error.text == "trigger_type: " + LABEL_ONLY
    assert page.by_id("trigger_type").attrs["aria-invalid"] == "true"
    assert page.by_id("trigger_type").attrs["value"] == "not a label!"  # kept for correcting
    assert candidate_rows(page) == []
    assert not page.has_id("deeper-research")
    assert events(MATCH_PROXY) == []


def test_a_trigger_type_with_spaces_is_told_what_a_label_is(operator_client: Client) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "user question", "trigger_ref": ""})

    text = doc(response).by_id("query-error").text
    assert "letters, digits and _ . : / - only" in text and "e.g. user_question" in text
    assert "100 characters" not in text


def test_a_trigger_type_too_long_says_so(operator_client: Client) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "a" * 101, "trigger_ref": ""})

    assert doc(response).by_id("query-error").text == "trigger_type: must be at most 100 characters"


def test_the_trigger_type_has_a_message_of_its_own_for_when_it_is_left_empty(operator_client: Client) -> None:
    # static/js/console.js shows it (the browser's own bubble names no field) and points the field at it.
    page = doc(operator_client.get(CONSOLE))

    message = page.by_id("trigger_type-required")
    assert message.text == "Trigger type: enter one to find candidates, for example user_question."
    assert message.attrs["role"] == "alert"
    assert "hidden" in message.attrs
    # Between the field's label and the field.
    (field,) = [div for div in page.one("form", action=CONSOLE).select("div") if div.has_id("trigger_type")]
    assert [(el.tag, el.attrs.get("id", el.attrs.get("for"))) for el in field.iter()][1:] == [
        ("label", "trigger_type"),
        ("p", "trigger_type-required"),
        ("input", "trigger_type"),
    ]


def test_empty_trigger_type_submitted_is_400_required(operator_client: Client) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "", "trigger_ref": ""})

    assert response.status_code == 400
    assert doc(response).by_id("query-error").text == "trigger_type: is required"
    assert events(MATCH_PROXY) == []


def test_candidates_partial_shows_a_bad_trigger_type_without_matching(operator_client: Client) -> None:
    response = operator_client.get(CANDIDATES, {"trigger_type": "not a label!"}, headers=HTMX)

    # 200 so that htmx swaps the error in (it drops 4xx responses by default).
    assert response.status_code == 200
    assert doc(response).by_id("query-error").text == "trigger_type: " + LABEL_ONLY
    assert events(MATCH_PROXY) == []


def test_no_query_shows_the_prompt_and_no_candidates(operator_client: Client, library: dict[str, Pathway]) -> None:
    response = operator_client.get(CONSOLE)

    assert response.status_code == 200
    panel = doc(response).by_id("candidates")
    assert "Enter a trigger type (and a reference, if you have one)" in panel.text
    assert not panel.select("ol")
    assert not panel.select("form")
    assert not panel.has_id("deeper-research")
    assert events(MATCH_PROXY) == []


def test_weak_candidates_only_offer_deeper_research_prefilled(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    # Only trigger_type_only matches (0.30): nothing clears 0.7.
    response = operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "vitals/heart-rate"})

    page = doc(response)
    assert [row.one("span", "score").text for row in candidate_rows(page)] == ["0.30"] * 3
    box = page.by_id("deeper-research")
    assert "Nothing clears the 0.7 reuse threshold" in box.text
    form = box.one("form")
    assert (form.attrs["method"], form.attrs["action"]) == ("post", DEEPER)
    fields = form_fields(form)
    assert fields["trigger_type"] == ["lab_result"]
    assert fields["trigger_ref"] == ["vitals/heart-rate"]
    assert fields["next"] == [console_url("lab_result", "vitals/heart-rate")]
    assert fields["question"] == [
        "Find evidence for lab_result vitals/heart-rate: no pathway in the library scores 0.7 or more."
    ]
    assert box.one("button").text == "Trigger deeper research"


def test_no_match_at_all_says_so_and_offers_deeper_research(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "claim_review"})

    page = doc(response)
    assert candidate_rows(page) == []
    assert "No pathway in the library matches claim_review." in page.by_id("candidates").text
    fields = form_fields(page.by_id("deeper-research").one("form"))
    assert fields["question"] == ["Find evidence for claim_review: no pathway in the library scores 0.7 or more."]
    (event,) = events(MATCH_PROXY)
    assert event.payload == {"trigger_type": "claim_review", "count": 0, "top_reason": None}


@pytest.mark.parametrize(
    ("trigger_ref", "top_score"),
    [("labs/potassium", "1.00"), ("labs/chloride", "0.70")],  # exact; a sibling at exactly the threshold
)
def test_a_strong_candidate_hides_deeper_research(
    operator_client: Client, library: dict[str, Pathway], trigger_ref: str, top_score: str
) -> None:
    page = doc(operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": trigger_ref}))

    assert candidate_rows(page)[0].one("span", "score").text == top_score
    assert not page.has_id("deeper-research")
    assert "Trigger deeper research" not in page.text


def test_each_card_links_its_seed_flow_and_lists_its_steps_behind_a_disclosure(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    exact = library["exact"]
    add_seed_steps(exact, "Reviewed recent lab results", kind="retrieval")
    add_seed_steps(exact, "Compared them with the care guideline", kind="evidence_assembly")

    page = doc(operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}))

    card = page.by_id(f"candidate-{exact.pk}")
    assert card.one("a", "seed-flow").attrs["href"] == f"/dashboard/admin/reasoning/{exact.seed_flow_id}"
    steps = card.one("details", "seed-steps")
    assert "open" not in steps.attrs  # shown on expand
    assert steps.one("summary").text == "2 steps of the seed flow"
    assert [li.text for li in steps.select("li")] == [
        "Retrieval: Reviewed recent lab results",
        "Evidence assembly: Compared them with the care guideline",
    ]
    # The raw kind an operator might search for stays on hover.
    assert [span.attrs["title"] for span in steps.select("span", "step-kind")] == ["retrieval", "evidence_assembly"]
    other = page.by_id(f"candidate-{library['far'].pk}").one("details", "seed-steps")
    assert other.one("summary").text == "0 steps of the seed flow"


def test_the_expanded_radar_has_hide_and_the_thumbnail_lives_in_the_summary(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    page = doc(operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}))

    expand = page.by_id(f"candidate-{library['exact'].pk}").one("details", "radar-expand")
    summary = expand.one("summary")
    # site.css hides the thumbnail and "Show" once the details are open, and shows "Hide".
    assert summary.one("span", "radar-thumb").one("svg")
    assert summary.one("span", "radar-show").text == "Show dimensions"
    assert summary.one("span", "radar-hide").text == "Hide dimensions"
    assert len(expand.select("figure", "radar-expanded")) == 1
