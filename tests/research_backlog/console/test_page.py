"""The Research Console page itself: who may open each URL, that every form works without
JavaScript and carries the CSRF token, and how many queries each URL runs."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from pathways.models import Pathway
from research_backlog.models import ClaimReview
from tests.factories import make_request, make_review
from tests.html import doc
from tests.research_backlog.support import (
    AUTH,
    BACKLOG,
    BACKLOG_QUERIES,
    CANDIDATES,
    CANDIDATES_QUERIES,
    CHAIN_LAG,
    COMPARE,
    COMPARE_QUERIES,
    CONSOLE,
    HTMX,
    QUERY,
    REVIEWS,
    REVIEWS_QUERIES,
    ROUTE_NAMES,
    Route,
    call,
    candidate_rows,
    console_url,
    login_redirect,
    make_candidates,
    submit,
    written,
)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", ROUTE_NAMES)
def test_operator_is_served(operator_client: Client, routes: dict[str, Route], name: str) -> None:
    response = call(operator_client, routes[name])

    assert response.status_code == routes[name].ok_status, response.content
    if response.status_code == 302:
        assert response["Location"] == CONSOLE  # no next: back to the console


@pytest.mark.parametrize("name", ROUTE_NAMES)
def test_patient_session_is_403_and_nothing_is_written(
    patient_client: Client, routes: dict[str, Route], name: str
) -> None:
    before = written()

    response = call(patient_client, routes[name])

    assert response.status_code == 403
    assert "Operators only" in response.content.decode()
    assert written() == before


@pytest.mark.parametrize("name", ROUTE_NAMES)
def test_anonymous_is_sent_to_login_with_next(routes: dict[str, Route], name: str) -> None:
    route = routes[name]
    before = written()

    response = Client().generic(route.method.upper(), route.path)

    assert response.status_code == 302
    # A form's POST-only URL is no place to land after logging in (it would be a 405).
    landing = route.path if route.method == "get" else "/dashboard/"
    assert response["Location"] == login_redirect(landing)
    assert written() == before


def test_anonymous_next_keeps_the_query() -> None:
    url = console_url("lab_result", "labs/potassium")

    response = Client().get(url)

    assert response.status_code == 302
    assert response["Location"] == login_redirect(url)
    assert "%3Ftrigger_type%3Dlab_result%26trigger_ref%3Dlabs%252Fpotassium" in response["Location"]


@pytest.mark.parametrize("name", ROUTE_NAMES)
def test_wrong_method_is_405_and_writes_nothing(operator_client: Client, routes: dict[str, Route], name: str) -> None:
    route = routes[name]
    before = written()

    response = call(operator_client, route, method="post" if route.method == "get" else "get")

    assert response.status_code == 405
    assert written() == before


def test_head_of_a_post_route_is_405(operator_client: Client, routes: dict[str, Route]) -> None:
    assert operator_client.head(routes["reuse"].path).status_code == 405


def test_every_form_and_htmx_control_has_a_plain_fallback(
    operator_client: Client, library: dict[str, Pathway], pending_review: ClaimReview
) -> None:
    responses = [
        operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "vitals/heart-rate"}),
        operator_client.get(CANDIDATES, {"trigger_type": "lab_result"}, headers=HTMX),
        operator_client.get(BACKLOG, headers=HTMX),
        operator_client.get(REVIEWS, headers=HTMX),
    ]
    seen_forms = 0
    for response in responses:
        assert response.status_code == 200
        page = doc(response)
        for form in page.select("form"):
            seen_forms += 1
            method, action = form.attrs.get("method"), form.attrs.get("action", "")
            assert method in ("get", "post"), form.attrs
            assert action.startswith("/"), form.attrs
            if method == "post":
                assert len(form.select("input", name="csrfmiddlewaretoken")) == 1, form.attrs
            for verb in ("hx-get", "hx-post"):
                if verb in form.attrs and form.attrs.get("id") != "compare-form":
                    assert form.attrs[verb] in (action, CANDIDATES), form.attrs
        for el in page.iter():
            if el.tag == "form" or not ({"hx-get", "hx-post"} & set(el.attrs)):
                continue
            # A control htmx drives must also work plainly: a link, or a button of a real form.
            if el.tag == "a":
                assert el.attrs["href"].startswith(CONSOLE)
            else:
                assert el.tag == "button", el.attrs
                target = page.by_id(el.attrs["form"])
                # (Undo posts the card's reuse form to its own address: the button's formaction.)
                action = el.attrs.get("formaction", target.attrs["action"])
                assert (target.attrs["method"], action) == ("post", el.attrs["hx-post"])
    assert seen_forms >= 8  # find, compare, 3 reuse, deeper research, logout, the review
    page = doc(responses[0])
    find = page.one("form", hx_get=CANDIDATES)
    assert (find.attrs["method"], find.attrs["action"]) == ("get", CONSOLE)
    assert {el.attrs["name"] for el in find.select("input")} == {"trigger_type", "trigger_ref"}


def test_find_form_submitted_plainly_lists_candidates(operator_client: Client, library: dict[str, Pathway]) -> None:
    find = doc(operator_client.get(CONSOLE)).one("form", hx_get=CANDIDATES)

    response = submit(operator_client, find, trigger_type="lab_result", trigger_ref="labs/potassium")

    assert response.status_code == 200
    assert [row.one("h3").text for row in candidate_rows(doc(response))] == [
        "#1 labs/potassium",
        "#2 labs/sodium",
        "#3 imaging/xray",
    ]


@pytest.mark.parametrize(("size", "reviews"), [(2, 1), (8, 20)])
def test_page_with_a_query_query_count(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries, size: int, reviews: int
) -> None:
    make_candidates(size, steps=3)
    for n in range(reviews):
        make_review(f"claim-{n}")

    # AUTH 2 + CANDIDATES 12 + BACKLOG 9 + REVIEWS 6 + CHAIN_LAG 1 = 30, however many candidates,
    # seed steps or claims.
    with django_assert_num_queries(AUTH + CANDIDATES_QUERIES + BACKLOG_QUERIES + REVIEWS_QUERIES + CHAIN_LAG):
        response = operator_client.get(CONSOLE, QUERY)

    assert response.status_code == 200
    page = doc(response)
    assert len(candidate_rows(page)) == size
    assert len(page.by_id("reviews").select("li", "card")) == reviews


@pytest.mark.parametrize("reviews", [1, 20])
def test_page_without_a_query_query_count(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries, reviews: int
) -> None:
    for n in range(reviews):
        make_review(f"claim-{n}")
    make_request(status="failed_voluntary", completed_at=timezone.now(), failure_reason="vendor_down")

    # AUTH 2 + BACKLOG 9 + REVIEWS 6 + CHAIN_LAG 1 = 18, however many claims wait.
    with django_assert_num_queries(AUTH + BACKLOG_QUERIES + REVIEWS_QUERIES + CHAIN_LAG):
        response = operator_client.get(CONSOLE)

    assert len(doc(response).by_id("reviews").select("li", "card")) == reviews


@pytest.mark.parametrize("size", [2, 8])
@pytest.mark.parametrize("embedded", [False, True])
def test_candidates_partial_query_count(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries, size: int, embedded: bool
) -> None:
    make_candidates(size, embedded=embedded, steps=3)

    # AUTH 2 + CANDIDATES 12 = 14: no query per candidate, nor per card's steps.
    with django_assert_num_queries(AUTH + CANDIDATES_QUERIES):
        response = operator_client.get(CANDIDATES, QUERY, headers=HTMX)

    rows = candidate_rows(doc(response))
    assert len(rows) == size
    assert ("+semantic" in rows[0].text) is embedded
    assert all(len(row.one("details", "seed-steps").select("li")) == 3 for row in rows)


def test_compare_partial_query_count(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    first, second = make_candidates(2)

    with django_assert_num_queries(AUTH + COMPARE_QUERIES):  # 5
        response = operator_client.get(COMPARE, {"compare": [str(first.pk), str(second.pk)]}, headers=HTMX)

    assert "Pick:" in doc(response).text


@pytest.mark.parametrize("failures", [0, 12])
def test_backlog_partial_query_count(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries, failures: int
) -> None:
    for _ in range(failures):
        make_request(status="failed_voluntary", completed_at=timezone.now(), failure_reason="vendor_down")

    with django_assert_num_queries(AUTH + BACKLOG_QUERIES):  # 11, however many failures
        response = operator_client.get(BACKLOG, headers=HTMX)

    # The table shows the 10 latest (plus its header row).
    assert len(doc(response).by_id("backlog").select("tr")) == (min(failures, 10) + 1 if failures else 0)


@pytest.mark.parametrize("reviews", [1, 20])
def test_reviews_partial_query_count(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries, reviews: int
) -> None:
    for n in range(reviews):
        make_review(f"claim-{n}")
    make_review("claim-done", status="resolved", resolved_at=timezone.now())

    with django_assert_num_queries(AUTH + REVIEWS_QUERIES):  # 8, however many claims wait
        response = operator_client.get(REVIEWS, headers=HTMX)

    panel = doc(response).by_id("reviews")
    assert len(panel.select("li", "card")) == reviews
    assert len(panel.by_id("recently-resolved").select("li")) == 1
