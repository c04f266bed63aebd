"""The Research Console: reusing a pathway (plain form and htmx) and comparing two candidates."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client

from pathways.models import Pathway
from tests.conftest import events
from tests.html import doc
from tests.research_backlog.support import (
    COMPARE,
    CONSOLE,
    EXACT,
    HIT_PROXY,
    HTMX,
    candidate_rows,
    console_url,
    form_fields,
    messages_on,
    reuse_form_on_page,
    reuse_url,
    submit,
    written,
)

pytestmark = pytest.mark.django_db


def test_reuse_by_plain_form_bumps_hits_audits_and_returns_to_the_query(
    csrf_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    exact = library["exact"]
    query = {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}
    form = reuse_form_on_page(csrf_client, exact, query)

    response = submit(csrf_client, form)

    assert response.status_code == 302
    assert response["Location"] == console_url("lab_result", "labs/potassium")
    exact.refresh_from_db()
    assert exact.hit_count == 4
    assert exact.last_hit_at is not None
    (event,) = events(HIT_PROXY)
    assert (event.actor, event.target_id, event.payload) == (actor, str(exact.pk), {"hit_count": 4})
    page = doc(csrf_client.get(response["Location"]))
    assert "Reused the pathway: it now has 4 reuses. Undo it from its card within a minute." in [
        li.text for li in page.one("ul", "messages").select("li")
    ]
    assert page.by_id(f"hits-{exact.pk}").text == "4 reuses, the last just now"
    # For the next minute the card offers Undo instead of a second reuse.
    actions = page.by_id(f"reuse-actions-{exact.pk}")
    assert [b.text for b in actions.select("button")] == ["Undo"]


def test_reuse_form_without_the_csrf_token_is_refused(csrf_client: Client, library: dict[str, Pathway]) -> None:
    form = reuse_form_on_page(csrf_client, library["exact"], {"trigger_type": "lab_result"})
    before = written()

    response = csrf_client.post(form.attrs["action"], {"next": CONSOLE})

    assert response.status_code == 403
    assert written() == before


def test_reuse_button_explains_what_a_reuse_does(operator_client: Client, library: dict[str, Pathway]) -> None:
    page = doc(operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}))
    button = page.by_id(f"candidate-{library['exact'].pk}").one("button")

    help_text = page.by_id(button.attrs["aria-describedby"])
    assert help_text.text == "Counts this reuse and strengthens the pathway."


def test_reuse_by_htmx_returns_the_actions_with_undo_and_the_hits_out_of_band(
    csrf_client: Client, library: dict[str, Pathway]
) -> None:
    sibling = library["sibling"]
    page = doc(csrf_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}))
    button = page.by_id(f"candidate-{sibling.pk}").one("button")
    assert button.attrs["hx-target"] == f"#reuse-actions-{sibling.pk}"
    included = page.one(id=button.attrs["hx-include"].removeprefix("#"))

    # htmx posts the included hidden form (with its CSRF token) to hx-post.
    response = csrf_client.post(button.attrs["hx-post"], form_fields(included), headers=HTMX)

    assert response.status_code == 200
    fragment = doc(response)
    actions = fragment.by_id(f"reuse-actions-{sibling.pk}")
    assert actions.one("p", role="status").text.startswith("Reused just now.")
    assert actions.one("button").text == "Undo"
    hits = fragment.one("span", "hits")
    assert (hits.attrs["id"], hits.attrs["hx-swap-oob"]) == (f"hits-{sibling.pk}", "true")
    assert hits.attrs["data-hits"] == "2"
    assert hits.text == "2 reuses, the last just now"
    sibling.refresh_from_db()
    assert sibling.hit_count == 2
    assert len(events(HIT_PROXY)) == 1


@pytest.mark.parametrize("next_url", ["https://evil.example/", "//evil.example/steal", "http://testserver.evil/"])
def test_reuse_refuses_an_off_site_next(operator_client: Client, library: dict[str, Pathway], next_url: str) -> None:
    response = operator_client.post(reuse_url(library["exact"].pk), {"next": next_url})

    assert response.status_code == 302
    assert response["Location"] == CONSOLE
    library["exact"].refresh_from_db()
    assert library["exact"].hit_count == 4  # the reuse itself still counts


def test_reuse_of_a_demoted_pathway_by_htmx_is_409_and_unchanged(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    stale = library["demoted"]
    before = written()

    response = operator_client.post(reuse_url(stale.pk), headers=HTMX)

    assert response.status_code == 409
    actions = doc(response).by_id(f"reuse-actions-{stale.pk}")
    assert actions.one("p", role="alert").text == "Demoted: it can no longer be reused"
    assert not actions.select("button")
    assert written() == before


def test_reuse_of_a_demoted_pathway_by_plain_form_redirects_with_an_error(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    stale = library["demoted"]
    next_url = console_url("lab_result", "labs/potassium")
    before = written()

    response = operator_client.post(reuse_url(stale.pk), {"next": next_url})

    assert response.status_code == 302
    assert response["Location"] == next_url
    assert written() == before
    assert messages_on(operator_client, next_url) == ["That pathway was demoted and can no longer be reused."]
    stale.refresh_from_db()
    assert stale.hit_count == 9


@pytest.mark.parametrize("pathway_id", [str(uuid.UUID(int=7)), "not-a-uuid", "12345"])
@pytest.mark.parametrize("htmx", [False, True])
def test_reuse_of_an_unknown_or_malformed_id_is_404(
    operator_client: Client, library: dict[str, Pathway], pathway_id: str, htmx: bool
) -> None:
    before = written()

    response = operator_client.post(reuse_url(pathway_id), headers=HTMX if htmx else {})

    assert response.status_code == 404
    assert written() == before


def test_compare_partial_draws_both_candidates_with_a_ranked_legend_and_a_pick(
    operator_client: Client, rivals: tuple[Pathway, Pathway]
) -> None:
    weak, strong = rivals

    response = operator_client.get(COMPARE, {"compare": [str(weak.pk), str(strong.pk)]}, headers=HTMX)

    assert response.status_code == 200
    fragment = doc(response)
    svg = fragment.one("svg")
    assert svg.attrs["role"] == "img"
    assert len(svg.select("polygon", "radar-series-a")) == 1
    assert len(svg.select("polygon", "radar-series-b")) == 1
    keys = [span.text for span in fragment.one("p", "radar-keys").select("span")]
    assert keys == ["labs/old-panel", "labs/new-panel"]
    legend = fragment.one("ol", "radar-deltas").select("li")
    axes = ["confidence", "coverage", "maturity", "recency", "consensus", "risk"]
    assert len(legend) == 6
    assert sorted(li.attrs["data-axis"] for li in legend) == sorted(axes)
    # Ranked by absolute difference, ties in the axes' own order.
    order = [(-abs(int(li.attrs["data-delta"])), axes.index(li.attrs["data-axis"])) for li in legend]
    assert order == sorted(order)
    assert int(legend[0].attrs["data-delta"]) != 0
    pick = fragment.one("p", "radar-pick").text
    assert pick.startswith("Pick: labs/new-panel.")


def test_page_shows_the_comparison_without_javascript(operator_client: Client, library: dict[str, Pathway]) -> None:
    page = doc(operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}))
    compare_form = page.by_id("compare-form")
    assert compare_form.one("noscript").one("button").text == "Compare the two ticked"
    ticked = frozenset({str(library["exact"].pk), str(library["far"].pk)})

    response = submit(operator_client, compare_form, tick=ticked)

    assert response.status_code == 200
    page = doc(response)
    comparison = page.by_id("comparison")
    assert len(comparison.select("polygon", "radar-series-a")) == 1
    assert len(comparison.select("polygon", "radar-series-b")) == 1
    assert [span.text for span in comparison.one("p", "radar-keys").select("span")] == [
        "labs/potassium",
        "imaging/xray",
    ]
    assert "Pick:" in comparison.text
    assert len(candidate_rows(page)) == 3  # the candidates are still listed
    # ... with the two boxes still ticked, so the operator can untick one and pick another.
    assert {
        box.attrs["value"]
        for box in page.by_id("compare-form").select("input", type="checkbox")
        if "checked" in box.attrs
    } == ticked
    # The plain form lands on the comparison.
    assert compare_form.attrs["action"] == f"{CONSOLE}#comparison"


def test_compare_with_one_tick_asks_for_another(operator_client: Client, library: dict[str, Pathway]) -> None:
    response = operator_client.get(COMPARE, {"compare": [str(library["exact"].pk)]}, headers=HTMX)

    assert response.status_code == 200
    fragment = doc(response)
    assert fragment.one("p", role="status").text == "Tick one more candidate to compare the two."
    assert not fragment.select("svg")


@pytest.mark.parametrize("count", [3, 5])
@pytest.mark.parametrize("htmx", [False, True])
def test_compare_of_more_than_two_is_400_naming_the_field(
    operator_client: Client, library: dict[str, Pathway], count: int, htmx: bool
) -> None:
    ids = [str(p.pk) for p in library.values()][:count]

    if htmx:
        response = operator_client.get(COMPARE, {"compare": ids}, headers=HTMX)
    else:  # the page without JavaScript: three boxes ticked and "Compare the two ticked"
        response = operator_client.get(CONSOLE, {"trigger_type": "lab_result", "compare": ids})

    assert response.status_code == 400
    comparison = doc(response) if htmx else doc(response).by_id("comparison")
    assert comparison.one("p", role="alert").text == "compare: Compare two at a time: untick one first."
    assert not comparison.select("svg")


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([str(uuid.UUID(int=1)), str(uuid.UUID(int=2))], "Tick two different candidates that exist."),
        ([EXACT, str(uuid.UUID(int=3))], "Tick two different candidates that exist."),
        ([EXACT, EXACT], "Tick two different candidates that exist."),
        ([EXACT, "not-a-uuid"], "Those candidates do not exist."),
        (["not-a-uuid", "also-not"], "Those candidates do not exist."),
        (["", ""], "Those candidates do not exist."),
    ],
)
def test_compare_of_unknown_candidates_says_so(
    operator_client: Client, library: dict[str, Pathway], ids: list[str], message: str
) -> None:
    compare = [str(library["exact"].pk) if value == EXACT else value for value in ids]

    response = operator_client.get(COMPARE, {"compare": compare}, headers=HTMX)

    assert response.status_code == 200
    fragment = doc(response)
    assert fragment.one("p", role="alert").text == message
    assert not fragment.select("svg")


def test_compare_without_ids_is_empty(operator_client: Client) -> None:
    response = operator_client.get(COMPARE, headers=HTMX)

    assert response.status_code == 200
    assert response.content.decode().strip() == ""
