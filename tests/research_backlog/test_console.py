"""The Research Console (/dashboard/admin/reasoning/research-console) and its htmx partials.

What an operator sees and checks: who may open each URL, the ranked candidates with their
radars, reusing a pathway (plain form and htmx), comparing two candidates, triggering
deeper research, the backlog panel and its loop-health pill, the claims pending review,
the audit trail each action leaves, that every form works without JavaScript and carries
the CSRF token, and how many queries each URL runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from audit.models import AuditEvent
from pathways.embeddings import HashBucketEmbedding
from pathways.jobs import backfill_embeddings
from pathways.models import Pathway
from research_backlog import services
from research_backlog.models import ClaimReview, ResearchRequest
from tests.factories import QUESTION, make_pathway, make_request, make_review
from tests.html import Element, doc

if TYPE_CHECKING:
    from django.test.client import _MonkeyPatchedWSGIResponse as Response

pytestmark = pytest.mark.django_db

CONSOLE = "/dashboard/admin/reasoning/research-console"
CANDIDATES = f"{CONSOLE}/candidates"
COMPARE = f"{CONSOLE}/compare"
BACKLOG = f"{CONSOLE}/backlog"
REVIEWS = f"{CONSOLE}/reviews"
DEEPER = f"{CONSOLE}/deeper-research"
LOGIN = "/accounts/login/"
HTMX = {"HX-Request": "true"}
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

MATCH_PROXY = "admin.reasoning.pathway.match.proxy"
HIT_PROXY = "admin.reasoning.pathway.hit.proxy"
DEEPER_REQUESTED = "admin.reasoning.research.deeper_requested"
DEEPER_CREATED = "reasoning.research.deeper_request_created"
BACKLOG_READ = "admin.reasoning.research.backlog_read.proxy"
REVIEWS_LISTED = "admin.reasoning.claims_pending_review.listed"
RESOLVED = "reasoning.claims_pending_review.resolved"

# Distinctive free text, so a leak into the audit trail cannot be a coincidence.
NOTE = "Curator Wilhelmina checked the Quixote citation: the dose was transposed."


def reuse_url(pathway_id: object) -> str:
    return f"{CONSOLE}/pathways/{pathway_id}/reuse"


def review_url(review_id: object) -> str:
    return f"{REVIEWS}/{review_id}"


def console_url(trigger_type: str, trigger_ref: str = "", **extra: str) -> str:
    return f"{CONSOLE}?{urlencode({'trigger_type': trigger_type, 'trigger_ref': trigger_ref, **extra})}"


def login_redirect(path: str) -> str:
    return f"{LOGIN}?{urlencode({'next': path}, safe='/')}"


# --- Reading HTML like an operator ----------------------------------------------------


def messages_on(client: Client, url: str = CONSOLE) -> list[str]:
    """The flash messages a page shows (after a plain-form redirect)."""
    page = doc(client.get(url))
    return [li.text for box in page.select("ul", "messages") for li in box.select("li")]


def form_fields(form: Element, *, button: Element | None = None, tick: frozenset[str] = frozenset()) -> dict[str, Any]:
    """What a browser without JavaScript would submit: inputs, ticked boxes, textareas, the button."""
    data: dict[str, list[str]] = {}
    for el in form.iter():
        if el.tag == "input":
            kind = el.attrs.get("type", "text")
            if kind == "checkbox" and "checked" not in el.attrs and el.attrs.get("value") not in tick:
                continue
            if kind in ("hidden", "text", "checkbox") and "name" in el.attrs:
                data.setdefault(el.attrs["name"], []).append(el.attrs.get("value", ""))
        elif el.tag == "textarea" and "name" in el.attrs:
            data.setdefault(el.attrs["name"], []).append(el.raw_text().removeprefix("\n"))
    if button is not None and "name" in button.attrs:
        data[button.attrs["name"]] = [button.attrs.get("value", "")]
    return data


def submit(
    client: Client,
    form: Element,
    *,
    button: Element | None = None,
    tick: frozenset[str] = frozenset(),
    htmx: bool = False,
    **changes: str,
) -> Response:
    """Submit ``form`` to its own action with its own method (changing some fields)."""
    method, action = form.attrs["method"].lower(), form.attrs["action"]
    data = form_fields(form, button=button, tick=tick)
    data.update({name: [value] for name, value in changes.items()})
    headers = HTMX if htmx else {}
    if method == "post":
        return client.post(action, data, headers=headers)
    assert method == "get"
    return client.get(action, data, headers=headers)


def events(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def audit_trail_text() -> str:
    """Every audit event, its payload and the canonical bytes that get hashed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT e::text || ' ' || convert_from(e.canonical, 'UTF8') FROM audit_event AS e")
        return "\n".join(str(row[0]) for row in cursor.fetchall())


def written() -> dict[str, Any]:
    """Both queues, every pathway's hits and every audit event: equal before and after means nothing was written."""
    return {
        "requests": list(ResearchRequest.objects.order_by("pk").values()),
        "reviews": list(ClaimReview.objects.order_by("pk").values()),
        "hits": list(Pathway.objects.order_by("pk").values_list("pk", "hit_count", "last_hit_at")),
        "audit": list(AuditEvent.objects.order_by("id").values_list("id", flat=True)),
    }


def demoted() -> dict[str, Any]:
    return {"demoted_at": timezone.now(), "demotion_reason": Pathway.DemotionReason.COLD}


# --- Fixtures -------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    """Logins are forced; hashing the operator's and patient's passwords need not be slow."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def actor(operator_user: User) -> str:
    return f"user:{operator_user.pk}"


@pytest.fixture
def csrf_client(operator_user: User) -> Client:
    """An operator whose POSTs must carry the CSRF token, as a browser's do."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator_user)
    return client


@pytest.fixture
def clock() -> Iterator[time_machine.Coordinates]:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def library() -> dict[str, Pathway]:
    """lab_result pathways around the query ("lab_result", "labs/potassium"):

    exact   labs/potassium  3 hits  -> 1.00 exact_ref
    sibling labs/sodium     1 hit   -> 0.70 prefix_ref
    far     imaging/xray    5 hits  -> 0.30 trigger_type_only
    plus a demoted exact one and another trigger type, which never match.
    """
    return {
        "exact": make_pathway("lab_result", "labs/potassium", hit_count=3),
        "sibling": make_pathway("lab_result", "labs/sodium", hit_count=1),
        "far": make_pathway("lab_result", "imaging/xray", hit_count=5),
        "demoted": make_pathway("lab_result", "labs/potassium/", hit_count=9, **demoted()),
        "other_type": make_pathway("user_question", "labs/potassium", hit_count=2),
    }


@pytest.fixture
def pending_review() -> ClaimReview:
    entry, _ = services.mark_claim_for_review(claim_id="claim-17", actor="token:critic", source="critic")
    return entry


# --- Who may open each URL ------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    name: str
    method: str
    path: str
    data: dict[str, str]
    ok_status: int


@pytest.fixture
def routes(library: dict[str, Pathway], pending_review: ClaimReview) -> dict[str, Route]:
    exact = library["exact"]
    return {
        route.name: route
        for route in [
            Route("page", "get", CONSOLE, {}, 200),
            Route("candidates", "get", CANDIDATES, {"trigger_type": "lab_result"}, 200),
            Route("compare", "get", COMPARE, {"compare": str(exact.pk)}, 200),
            Route("backlog", "get", BACKLOG, {}, 200),
            Route("reviews", "get", REVIEWS, {}, 200),
            Route("reuse", "post", reuse_url(exact.pk), {}, 302),
            Route("deeper", "post", DEEPER, {"trigger_type": "lab_result", "question": QUESTION}, 302),
            Route("review", "post", review_url(pending_review.pk), {"status": "resolved"}, 302),
        ]
    }


ROUTE_NAMES = ["page", "candidates", "compare", "backlog", "reviews", "reuse", "deeper", "review"]


def call(client: Client, route: Route, method: str | None = None) -> Response:
    if (method or route.method) == "get":
        return client.get(route.path, route.data)
    return client.post(route.path, route.data)


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


# --- The page: finding candidates ------------------------------------------------------


def candidate_rows(page: Element) -> list[Element]:
    return page.by_id("candidates").select("li", "candidate")


def test_query_lists_ranked_candidates_with_what_an_operator_decides_on(
    operator_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"})

    assert response.status_code == 200
    page = doc(response)
    rows = candidate_rows(page)
    expected = [
        ("exact", "#1 labs/potassium", "1.00", "exact_ref", "3 reuses"),
        ("sibling", "#2 labs/sodium", "0.70", "prefix_ref", "1 reuse"),
        ("far", "#3 imaging/xray", "0.30", "trigger_type_only", "5 reuses"),
    ]
    assert [row.attrs["data-pathway"] for row in rows] == [str(library[key].pk) for key, *_ in expected]
    for row, (key, heading, score, reason, hits) in zip(rows, expected, strict=True):
        pk = str(library[key].pk)
        assert row.one("h3").text == heading
        assert row.one("span", "score").text == score
        assert f"{score} · {reason}" in row.text
        assert row.by_id(f"hits-{pk}").text == hits
        assert row.by_id(f"hits-{pk}").attrs["data-hits"] == str(library[key].hit_count)
        # The inline (compact) radar, and the expanded one behind "Show dimensions".
        summary_radar = row.one("summary").one("svg")
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
    assert error.text == "trigger_type: must be a label of at most 100 characters"
    assert page.by_id("trigger_type").attrs["aria-invalid"] == "true"
    assert page.by_id("trigger_type").attrs["value"] == "not a label!"  # kept for correcting
    assert candidate_rows(page) == []
    assert not page.has_id("deeper-research")
    assert events(MATCH_PROXY) == []


def test_empty_trigger_type_submitted_is_400_required(operator_client: Client) -> None:
    response = operator_client.get(CONSOLE, {"trigger_type": "", "trigger_ref": ""})

    assert response.status_code == 400
    assert doc(response).by_id("query-error").text == "trigger_type: is required"
    assert events(MATCH_PROXY) == []


def test_candidates_partial_shows_a_bad_trigger_type_without_matching(operator_client: Client) -> None:
    response = operator_client.get(CANDIDATES, {"trigger_type": "not a label!"}, headers=HTMX)

    # 200 so that htmx swaps the error in (it drops 4xx responses by default).
    assert response.status_code == 200
    assert doc(response).by_id("query-error").text == "trigger_type: must be a label of at most 100 characters"
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


# --- Reuse ----------------------------------------------------------------------------


def reuse_form_on_page(client: Client, pathway: Pathway, query: dict[str, str]) -> Element:
    page = doc(client.get(CONSOLE, query))
    button = page.by_id(f"candidate-{pathway.pk}").one("button", form=f"reuse-{pathway.pk}")
    return page.by_id(button.attrs["form"])


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
    assert "Reused the pathway: it now has 4 reuses." in [li.text for li in page.one("ul", "messages").select("li")]
    assert page.by_id(f"hits-{exact.pk}").text.startswith("4 reuses, last ")


def test_reuse_form_without_the_csrf_token_is_refused(csrf_client: Client, library: dict[str, Pathway]) -> None:
    form = reuse_form_on_page(csrf_client, library["exact"], {"trigger_type": "lab_result"})
    before = written()

    response = csrf_client.post(form.attrs["action"], {"next": CONSOLE})

    assert response.status_code == 403
    assert written() == before


def test_reuse_by_htmx_returns_the_hits_fragment(csrf_client: Client, library: dict[str, Pathway]) -> None:
    sibling = library["sibling"]
    page = doc(csrf_client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}))
    button = page.by_id(f"candidate-{sibling.pk}").one("button")
    assert button.attrs["hx-target"] == f"#hits-{sibling.pk}"
    included = page.one(id=button.attrs["hx-include"].removeprefix("#"))

    # htmx posts the included hidden form (with its CSRF token) to hx-post.
    response = csrf_client.post(button.attrs["hx-post"], form_fields(included), headers=HTMX)

    assert response.status_code == 200
    hits = doc(response).one("span", "hits")
    assert hits.attrs["id"] == f"hits-{sibling.pk}"
    assert hits.attrs["data-hits"] == "2"
    assert hits.text == "2 reuses · reused just now"
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
    hits = doc(response).one("span", "hits")
    assert hits.attrs["id"] == f"hits-{stale.pk}"
    assert hits.attrs["role"] == "alert"
    assert hits.text == "Demoted: it can no longer be reused"
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


# --- Compare --------------------------------------------------------------------------


@pytest.fixture
def rivals() -> tuple[Pathway, Pathway]:
    """Two candidates whose radars differ: a demoted, never-reused one and an established one."""
    with time_machine.travel(NOW - timedelta(days=200), tick=False):
        weak = make_pathway("lab_result", "labs/old-panel", **demoted())
    strong = make_pathway("lab_result", "labs/new-panel", hit_count=12, last_hit_at=timezone.now())
    return weak, strong


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


@pytest.mark.parametrize("count", [1, 3])
def test_compare_needs_exactly_two(operator_client: Client, library: dict[str, Pathway], count: int) -> None:
    ids = [str(p.pk) for p in library.values()][:count]

    response = operator_client.get(COMPARE, {"compare": ids}, headers=HTMX)

    assert response.status_code == 200
    fragment = doc(response)
    assert fragment.one("p", role="alert").text == "Tick exactly two candidates to compare them."
    assert not fragment.select("svg")


EXACT = "<the exact candidate>"  # stands for library["exact"].pk in the cases below


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


# --- Deeper research ------------------------------------------------------------------


def deeper_form_on_page(client: Client) -> Element:
    page = doc(client.get(CONSOLE, {"trigger_type": "lab_result", "trigger_ref": "vitals/heart-rate"}))
    return page.by_id("deeper-research").one("form")


def test_deeper_research_by_plain_form_queues_a_request_and_audits_both_events(
    csrf_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    form = deeper_form_on_page(csrf_client)

    response = submit(csrf_client, form, question=QUESTION)

    assert response.status_code == 302
    assert response["Location"] == console_url("lab_result", "vitals/heart-rate")
    row = ResearchRequest.objects.get()
    assert (row.status, row.reason, row.source, row.requested_by) == (
        "pending",
        "operator_requested",
        "research_console",
        actor,
    )
    assert (row.trigger_type, row.trigger_ref, row.question) == ("lab_result", "vitals/heart-rate", QUESTION)
    (requested,) = events(DEEPER_REQUESTED)
    (created,) = events(DEEPER_CREATED)
    for event in (requested, created):
        assert (event.actor, event.target_id) == (actor, str(row.pk))
        assert event.payload["reason"] == "operator_requested"
        assert event.payload["source"] == "research_console"
    assert created.payload["question_chars"] == len(QUESTION)
    assert QUESTION not in audit_trail_text()
    page = doc(csrf_client.get(response["Location"]))
    assert [li.text for li in page.one("ul", "messages").select("li")] == [
        "Deeper research requested: it is in the backlog as pending."
    ]
    assert page.by_id("backlog").one("li", data_status="pending").one("strong").text == "1"


def test_deeper_research_form_without_the_csrf_token_is_refused(
    csrf_client: Client, library: dict[str, Pathway]
) -> None:
    form = deeper_form_on_page(csrf_client)
    data = form_fields(form)
    del data["csrfmiddlewaretoken"]
    before = written()

    response = csrf_client.post(form.attrs["action"], data)

    assert response.status_code == 403
    assert written() == before


def test_deeper_research_accepts_a_browser_textarea_with_crlf(csrf_client: Client, library: dict[str, Pathway]) -> None:
    question = "Which potassium target applies?\r\nThe patient is 83 and on dialysis.\r\n"

    response = submit(csrf_client, deeper_form_on_page(csrf_client), question=question)

    assert response.status_code == 302
    assert ResearchRequest.objects.get().question == question.strip()


def test_deeper_research_by_htmx_answers_with_the_queued_note_and_the_backlog_oob(
    csrf_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    form = deeper_form_on_page(csrf_client)
    assert form.attrs["hx-post"] == form.attrs["action"]
    assert form.attrs["hx-target"] == "#deeper-research"

    response = submit(csrf_client, form, htmx=True, question=QUESTION)

    assert response.status_code == 200
    row = ResearchRequest.objects.get()
    fragment = doc(response)
    note = fragment.by_id("deeper-research")
    assert note.attrs["role"] == "status"
    assert f"The question is in the backlog as pending (request {row.pk})." in note.text
    backlog = fragment.by_id("backlog")
    assert backlog.attrs["hx-swap-oob"] == "true"
    assert backlog.one("li", data_status="pending").one("strong").text == "1"
    assert len(events(DEEPER_REQUESTED)) == len(events(DEEPER_CREATED)) == 1
    assert events(BACKLOG_READ)[-1].payload == {"total": 1, "loop_health": "healthy"}


@pytest.mark.parametrize(
    ("question", "problem"),
    [
        ("", "question: This field may not be blank."),
        ("   \r\n  ", "question: This field may not be blank."),
        ("Ring the bell \x07 twice", "question: Must be text without control characters."),
        ("Escape \x1b[31m red", "question: Must be text without control characters."),
        ("q" * 2001, "question: Ensure this field has no more than 2000 characters."),
    ],
)
def test_deeper_research_rejects_a_bad_question_by_htmx_with_400(
    operator_client: Client, library: dict[str, Pathway], question: str, problem: str
) -> None:
    form = deeper_form_on_page(operator_client)
    before = written()

    response = submit(operator_client, form, htmx=True, question=question)

    assert response.status_code == 400
    box = doc(response).by_id("deeper-research")
    assert [p.text for p in box.select("p", "error")] == [problem]
    assert box.one("form").attrs["hx-post"] == DEEPER  # the form comes back to correct and resend
    assert written() == before


def test_deeper_research_rejects_a_bad_question_by_plain_form_with_a_message(
    operator_client: Client, library: dict[str, Pathway]
) -> None:
    form = deeper_form_on_page(operator_client)
    before = written()

    response = submit(operator_client, form, question="Ring the bell \x07")

    assert response.status_code == 302
    assert response["Location"] == console_url("lab_result", "vitals/heart-rate")
    assert written() == before
    assert messages_on(operator_client, response["Location"]) == ["question: Must be text without control characters."]


def test_deeper_research_rejects_a_tampered_trigger_type(operator_client: Client) -> None:
    before = written()

    response = operator_client.post(DEEPER, {"trigger_type": "not a label!", "question": QUESTION}, headers=HTMX)

    assert response.status_code == 400
    assert "trigger_type:" in doc(response).by_id("deeper-research").text
    assert written() == before


# --- The backlog panel ----------------------------------------------------------------


def chips(panel: Element) -> dict[str, str]:
    return {li.attrs["data-status"]: li.one("strong").text for li in panel.select("li", "chip")}


def facts(panel: Element) -> dict[str, str]:
    dl = panel.one("dl", "facts")
    terms, values = dl.select("dt"), dl.select("dd")
    return {dt.text: dd.text for dt, dd in zip(terms, values, strict=True)}


def test_backlog_panel_shows_counts_ages_and_recent_failures(
    clock: time_machine.Coordinates, operator_client: Client, actor: str
) -> None:
    make_request(created_at=NOW - timedelta(minutes=50))
    make_request(created_at=NOW - timedelta(minutes=5), retry_count=1)
    make_request(status="dispatched", created_at=NOW - timedelta(hours=1), dispatched_at=NOW - timedelta(minutes=12))
    make_request(status="completed", completed_at=NOW - timedelta(hours=1))
    make_request(
        trigger_type="lab_result",
        status="failed_voluntary",
        completed_at=NOW - timedelta(hours=2),
        failure_reason="vendor_timeout",
    )
    make_request(
        trigger_type="claim_review",
        status="failed_after_retries",
        completed_at=NOW - timedelta(minutes=30),
        failure_reason="stale_after_retries",
        retry_count=3,
    )
    make_request(status="failed_voluntary", completed_at=NOW - timedelta(hours=30), failure_reason="too_old_to_show")

    response = operator_client.get(BACKLOG, headers=HTMX)

    assert response.status_code == 200
    panel = doc(response).by_id("backlog")
    assert chips(panel) == {
        "pending": "2",
        "dispatched": "1",
        "completed": "1",
        "failed_voluntary": "2",
        "failed_after_retries": "1",
    }
    assert facts(panel) == {
        "Oldest pending": "50 min",
        "Oldest dispatched": "12 min",
        "Retries": "0: 5 · 1: 1 · 3: 1",
    }
    assert "Recent failures (2 in 24 h)" in panel.text
    rows = [[td.text for td in tr.select("td")] for tr in panel.one("tbody").select("tr")]
    assert rows == [
        ["30 minutes ago", "claim_review", "failed_after_retries", "stale_after_retries"],
        ["2 hours ago", "lab_result", "failed_voluntary", "vendor_timeout"],
    ]
    assert "too_old_to_show" not in panel.text
    assert QUESTION not in response.content.decode()
    pill = panel.one("span", "pill")
    assert "pill-healthy" in pill.classes() and pill.text == "healthy"
    (event,) = events(BACKLOG_READ)
    assert (event.actor, event.payload) == (actor, {"total": 7, "loop_health": "healthy"})


def test_empty_backlog_panel(operator_client: Client) -> None:
    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    assert set(chips(panel).values()) == {"0"}
    assert list(chips(panel)) == ["pending", "dispatched", "completed", "failed_voluntary", "failed_after_retries"]
    assert facts(panel) == {"Oldest pending": "none waiting", "Oldest dispatched": "none waiting", "Retries": "none"}
    assert "Recent failures (0 in 24 h)" in panel.text
    assert not panel.select("table")


@pytest.mark.parametrize(
    ("age", "shown"),
    [
        (timedelta(seconds=45), "45 s"),
        (timedelta(minutes=20, seconds=59), "20 min"),
        (timedelta(hours=1, minutes=5), "1 h 5 min"),
        (timedelta(days=2, hours=3, minutes=59), "2 d 3 h"),
    ],
)
def test_oldest_pending_age_reads_naturally(
    clock: time_machine.Coordinates, operator_client: Client, age: timedelta, shown: str
) -> None:
    make_request(created_at=NOW - age)

    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    assert facts(panel)["Oldest pending"] == shown


def place_failures(count: int) -> None:
    for n in range(count):
        make_request(status="failed_voluntary", completed_at=NOW - timedelta(hours=n + 1), failure_reason="vendor_down")


@pytest.mark.parametrize(
    ("pending_age", "dispatched_age", "failures", "verdict", "because"),
    [
        (timedelta(minutes=59), timedelta(minutes=14), 4, "healthy", ""),
        (None, timedelta(minutes=15), 0, "warn", "oldest_dispatched_over_15m"),
        (None, None, 5, "warn", "recent_failures_at_least_5"),
        (None, timedelta(minutes=25), 0, "critical", "oldest_dispatched_over_25m"),
        (timedelta(hours=1), None, 0, "critical", "oldest_pending_over_1h"),
        (timedelta(hours=2), timedelta(minutes=16), 5, "critical", "oldest_pending_over_1h"),
    ],
)
def test_loop_health_pill_follows_the_thresholds(
    clock: time_machine.Coordinates,
    operator_client: Client,
    pending_age: timedelta | None,
    dispatched_age: timedelta | None,
    failures: int,
    verdict: str,
    because: str,
) -> None:
    if pending_age is not None:
        make_request(created_at=NOW - pending_age)
    if dispatched_age is not None:
        make_request(status="dispatched", created_at=NOW - timedelta(hours=3), dispatched_at=NOW - dispatched_age)
    place_failures(failures)

    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    pill = panel.one("span", "pill")
    assert [c for c in pill.classes() if c.startswith("pill-")] == [f"pill-{verdict}"]
    assert pill.text == verdict
    because_line = [p.text for p in panel.select("p", "muted") if p.text.startswith("Because:")]
    if because:
        assert len(because_line) == 1 and because in because_line[0]
    else:
        assert because_line == []
    assert events(BACKLOG_READ)[0].payload["loop_health"] == verdict


def test_critical_lists_every_reason(clock: time_machine.Coordinates, operator_client: Client) -> None:
    make_request(created_at=NOW - timedelta(hours=2))
    make_request(status="dispatched", created_at=NOW - timedelta(hours=3), dispatched_at=NOW - timedelta(minutes=16))
    place_failures(5)

    panel = doc(operator_client.get(BACKLOG)).by_id("backlog")

    assert [p.text for p in panel.select("p", "muted") if p.text.startswith("Because:")] == [
        "Because: oldest_pending_over_1h, oldest_dispatched_over_15m, recent_failures_at_least_5."
    ]


# --- Claims pending review ------------------------------------------------------------


def pending_ids(panel: Element) -> list[str]:
    return [li.attrs["data-claim"] for li in panel.select("li", "card")]


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
            review_url(review_id),
            review_url(review_id),
        )
        assert form.attrs["hx-target"] == "#reviews"
        assert form.one("textarea").attrs["name"] == "note"
        buttons = [(b.text, b.attrs["name"], b.attrs["value"]) for b in form.select("button")]
        assert buttons == [("Resolve", "status", "resolved"), ("Dismiss", "status", "dismissed")]
    assert "3 hours ago" in panel.select("li", "card")[0].text
    # Resolved more than a day ago: not in the strip.
    assert panel.by_id("recently-resolved").text == "Nothing resolved in the last 24 hours."
    (event,) = events(REVIEWS_LISTED)
    assert (event.actor, event.payload) == (actor, {"pending_count": 3, "recent_count": 0})


def test_no_pending_reviews(operator_client: Client) -> None:
    panel = doc(operator_client.get(REVIEWS)).by_id("reviews")

    assert "No claims are waiting for review." in panel.text
    assert not panel.select("form")


def review_form_on_page(client: Client, entry: ClaimReview) -> Element:
    return doc(client.get(CONSOLE)).by_id(f"review-{entry.pk}").one("form")


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
    assert [li.text for li in panel.by_id("recently-resolved").select("li")] == ["resolved: claim-17, 0 minutes ago"]
    assert NOTE not in page.text  # the note is stored, not shown in the strip


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
    assert panel.by_id("recently-resolved").one("li").text.startswith(f"{status}: claim-17")
    assert not panel.select("p", "error")
    pending_review.refresh_from_db()
    assert (pending_review.status, pending_review.resolution_note, pending_review.resolved_by) == (status, NOTE, actor)
    (event,) = events(RESOLVED)
    assert (event.actor, event.payload["status"]) == (actor, status)
    assert NOTE not in audit_trail_text()


def test_resolving_again_by_htmx_is_409_already(operator_client: Client, pending_review: ClaimReview) -> None:
    services.resolve_claim_review(pending_review.pk, status="resolved", note="first", actor="user:someone")
    resolved_before = events(RESOLVED)

    response = operator_client.post(review_url(pending_review.pk), {"status": "dismissed", "note": NOTE}, headers=HTMX)

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

    response = operator_client.post(review_url(pending_review.pk), {"status": "resolved", "next": CONSOLE})

    assert response.status_code == 302
    assert written() == before
    assert messages_on(operator_client) == ["Someone already resolved or dismissed that claim."]


@pytest.mark.parametrize(
    "body",
    [{"status": "approved"}, {"status": ""}, {}, {"status": "pending"}, {"status": "resolved", "note": "n" * 2001}],
)
def test_bad_status_or_note_is_400(operator_client: Client, pending_review: ClaimReview, body: dict[str, str]) -> None:
    response = operator_client.post(review_url(pending_review.pk), body, headers=HTMX)

    assert response.status_code == 400
    assert doc(response).by_id("reviews").one("p", "error").text == (
        "Choose Resolve or Dismiss, and keep the note under 2000 characters."
    )
    pending_review.refresh_from_db()
    assert pending_review.status == "pending"
    assert events(RESOLVED) == []


def test_bad_status_by_plain_form_shows_the_error(operator_client: Client, pending_review: ClaimReview) -> None:
    response = operator_client.post(review_url(pending_review.pk), {"status": "approved"})

    assert response.status_code == 302
    assert messages_on(operator_client) == ["Choose Resolve or Dismiss, and keep the note under 2000 characters."]
    pending_review.refresh_from_db()
    assert pending_review.status == "pending"


@pytest.mark.parametrize("review_id", [str(uuid.UUID(int=9)), "not-a-uuid"])
def test_unknown_review_is_404(operator_client: Client, pending_review: ClaimReview, review_id: str) -> None:
    before = written()

    response = operator_client.post(review_url(review_id), {"status": "resolved"}, headers=HTMX)

    assert response.status_code == 404
    assert written() == before


def test_a_note_with_crlf_and_tabs_is_kept(operator_client: Client, pending_review: ClaimReview) -> None:
    note = "Checked the source.\r\n\tThe dose was transposed."

    response = operator_client.post(review_url(pending_review.pk), {"status": "resolved", "note": note}, headers=HTMX)

    assert response.status_code == 200
    pending_review.refresh_from_db()
    assert pending_review.resolution_note == note
    assert "transposed" not in json.dumps([e.payload for e in AuditEvent.objects.all()])


# --- Works without JavaScript ----------------------------------------------------------


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
                assert (target.attrs["method"], target.attrs["action"]) == ("post", el.attrs["hx-post"])
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


# --- Queries --------------------------------------------------------------------------

# 1 session, 2 operator (user).
AUTH = 2
# base.html on full operator pages (not fragments): 1 the audit chain's lag for the banner
# (the oldest queued event, two primary keys).
CHAIN_LAG = 1
# match(): 1 the structural candidates in one UNION ALL (the trigger type's most reused,
# the ref and its ancestors, its siblings, its children); 2 SAVEPOINT, 3 set_config
# (hnsw.ef_search, hnsw.iterative_scan), 4 the nearest embeddings (raw), 5 RELEASE;
# candidate_radars(): 6 every radar input of the final candidates in one statement
# (their fields, seed metrics, verdicts, aborted siblings), 7 family maturity; the match
# audit: 8 SAVEPOINT, 9 the event with its chainer queue row, 10 RELEASE.
CANDIDATES_QUERIES = 10
# backlog_status(): 1 counts by status, 2 counts by retries, 3 oldest pending, 4 oldest
# dispatched, 5 recent failure count, 6 recent failure rows; the read audit: 7 SAVEPOINT,
# 8 the event, 9 RELEASE.
BACKLOG_QUERIES = 9
# claims_pending_review(): 1 the oldest pending, 2 their count, 3 the recent resolutions;
# the listing audit: 4 SAVEPOINT, 5 the event, 6 RELEASE.
REVIEWS_QUERIES = 6
# The compare partial: 1 the two pathways; candidate_radars(): 2 their radar inputs,
# 3 family maturity. (Reading a comparison is not audited.)
COMPARE_QUERIES = 3

QUERY = {"trigger_type": "lab_result", "trigger_ref": "labs/test-0"}


def make_candidates(count: int, *, embedded: bool = False) -> list[Pathway]:
    """``count`` lab_result pathways that all match QUERY (one exact, the rest siblings)."""
    rows = [make_pathway("lab_result", f"labs/test-{n}", hit_count=n) for n in range(count)]
    if embedded:  # candidates then also come back from the HNSW query, with a cosine
        backfill_embeddings(HashBucketEmbedding())
    return rows


@pytest.mark.parametrize(("size", "reviews"), [(2, 1), (8, 20)])
def test_page_with_a_query_query_count(
    operator_client: Client, django_assert_num_queries: DjangoAssertNumQueries, size: int, reviews: int
) -> None:
    make_candidates(size)
    for n in range(reviews):
        make_review(f"claim-{n}")

    # AUTH 2 + CANDIDATES 10 + BACKLOG 9 + REVIEWS 6 + CHAIN_LAG 1 = 28, however many candidates or claims.
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
    make_candidates(size, embedded=embedded)

    # AUTH 2 + CANDIDATES 10 = 12: no query per candidate.
    with django_assert_num_queries(AUTH + CANDIDATES_QUERIES):
        response = operator_client.get(CANDIDATES, QUERY, headers=HTMX)

    rows = candidate_rows(doc(response))
    assert len(rows) == size
    assert ("+semantic" in rows[0].text) is embedded


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
