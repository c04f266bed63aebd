"""The Research Console: undoing a reuse (plain form and htmx) within a minute, and only then."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client

from pathways.models import Pathway, PathwayHit
from tests.conftest import events
from tests.factories import NOW, PASSWORD, logged_in
from tests.html import Element, doc
from tests.research_backlog.support import (
    CONSOLE,
    HTMX,
    REUSE_UNDONE,
    console_url,
    form_fields,
    messages_on,
    reuse_form_on_page,
    submit,
    undo_url,
    written,
)

pytestmark = pytest.mark.django_db

QUERY = {"trigger_type": "lab_result", "trigger_ref": "labs/potassium"}


def reuse_plainly(client: Client, pathway: Pathway) -> PathwayHit:
    response = submit(client, reuse_form_on_page(client, pathway, QUERY))
    assert response.status_code == 302
    client.get(response["Location"])  # shows (and so clears) the "Reused" message
    return PathwayHit.objects.get(pathway=pathway, undone_at__isnull=True)


def undo_button(client: Client, pathway: Pathway) -> tuple[Element, Element]:
    """The card's Undo button and the form it submits (the card's hidden reuse form)."""
    page = doc(client.get(CONSOLE, QUERY))
    button = page.by_id(f"reuse-actions-{pathway.pk}").one("button")
    assert button.text == "Undo"
    return button, page.by_id(button.attrs["form"])


@pytest.fixture
def other_operator_client(db: None) -> Client:
    """Oscar, another operator: he may reuse pathways, but not undo Olive's reuse."""
    from reasoning.tokens import create_operator

    user = create_operator(username="oscar.operator", password=PASSWORD, actor="system:test")
    assert isinstance(user, User)
    return logged_in(user)


def test_undo_by_plain_form_takes_the_reuse_back_and_audits_it(
    clock: time_machine.Coordinates, csrf_client: Client, library: dict[str, Pathway], actor: str
) -> None:
    exact = library["exact"]  # 3 reuses, never stamped
    hit = reuse_plainly(csrf_client, exact)
    clock.shift(timedelta(seconds=45))
    button, form = undo_button(csrf_client, exact)

    # Without JavaScript the button posts the card's reuse form (CSRF token, next) to its formaction.
    response = csrf_client.post(button.attrs["formaction"], form_fields(form))

    assert response.status_code == 302
    assert response["Location"] == console_url(**QUERY)
    exact.refresh_from_db()
    assert (exact.hit_count, exact.last_hit_at) == (3, None)
    hit.refresh_from_db()
    assert hit.undone_at == NOW + timedelta(seconds=45)
    (event,) = events(REUSE_UNDONE)
    assert (event.actor, event.target_id) == (actor, str(exact.pk))
    assert event.payload == {"hit_id": str(hit.pk), "hit_count": 3}
    assert messages_on(csrf_client, console_url(**QUERY)) == ["Reuse undone: the pathway is back to 3 reuses."]
    page = doc(csrf_client.get(console_url(**QUERY)))
    assert page.by_id(f"hits-{exact.pk}").text == "3 reuses"
    assert page.by_id(f"reuse-actions-{exact.pk}").one("button").text == "Reuse pathway"


def test_undo_by_htmx_returns_the_reuse_button_and_the_hits_out_of_band(
    clock: time_machine.Coordinates, csrf_client: Client, library: dict[str, Pathway]
) -> None:
    sibling = library["sibling"]
    hit = reuse_plainly(csrf_client, sibling)
    button, form = undo_button(csrf_client, sibling)
    assert button.attrs["hx-post"] == undo_url(hit.pk)
    assert button.attrs["hx-target"] == f"#reuse-actions-{sibling.pk}"

    response = csrf_client.post(button.attrs["hx-post"], form_fields(form), headers=HTMX)

    assert response.status_code == 200
    fragment = doc(response)
    actions = fragment.by_id(f"reuse-actions-{sibling.pk}")
    assert actions.one("p", role="status").text == "Reuse undone: it no longer counts."
    assert actions.one("button").text == "Reuse pathway"
    hits = fragment.by_id(f"hits-{sibling.pk}")
    assert (hits.attrs["hx-swap-oob"], hits.text) == ("true", "1 reuse")
    assert len(events(REUSE_UNDONE)) == 1


@pytest.mark.parametrize("htmx", [False, True])
def test_undo_after_the_minute_is_409_and_changes_nothing(
    clock: time_machine.Coordinates, operator_client: Client, library: dict[str, Pathway], htmx: bool
) -> None:
    exact = library["exact"]
    hit = reuse_plainly(operator_client, exact)
    clock.shift(timedelta(seconds=61))
    before = written()

    response = operator_client.post(undo_url(hit.pk), {"next": CONSOLE}, headers=HTMX if htmx else {})

    message = "Too late to undo: a reuse can be undone within 60 seconds."
    assert written() == before
    if htmx:
        assert response.status_code == 409
        actions = doc(response).by_id(f"reuse-actions-{exact.pk}")
        assert actions.one("p", role="alert").text == message
        assert actions.one("button").text == "Reuse pathway"
    else:
        assert response.status_code == 302
        assert messages_on(operator_client) == [message]
    # Past the minute the card no longer offers Undo.
    page = doc(operator_client.get(CONSOLE, QUERY))
    assert page.by_id(f"reuse-actions-{exact.pk}").one("button").text == "Reuse pathway"


def test_undo_twice_is_409_already_undone(
    clock: time_machine.Coordinates, operator_client: Client, library: dict[str, Pathway]
) -> None:
    hit = reuse_plainly(operator_client, library["exact"])
    assert operator_client.post(undo_url(hit.pk), headers=HTMX).status_code == 200
    before = written()

    response = operator_client.post(undo_url(hit.pk), headers=HTMX)

    assert response.status_code == 409
    assert doc(response).one("p", role="alert").text == "That reuse was already undone."
    assert written() == before
    library["exact"].refresh_from_db()
    assert library["exact"].hit_count == 3


def test_another_operator_cannot_undo_it(
    clock: time_machine.Coordinates,
    operator_client: Client,
    other_operator_client: Client,
    library: dict[str, Pathway],
) -> None:
    hit = reuse_plainly(operator_client, library["exact"])
    # Oscar sees the reuse counted, but no Undo on the card: it is Olive's.
    page = doc(other_operator_client.get(CONSOLE, QUERY))
    assert page.by_id(f"reuse-actions-{library['exact'].pk}").one("button").text == "Reuse pathway"
    before = written()

    response = other_operator_client.post(undo_url(hit.pk), headers=HTMX)

    assert response.status_code == 409
    assert doc(response).one("p", role="alert").text == "Only the operator who reused the pathway can undo that reuse."
    assert written() == before


@pytest.mark.parametrize("hit_id", [str(uuid.UUID(int=5)), "not-a-uuid"])
def test_undo_of_an_unknown_reuse_is_404(operator_client: Client, library: dict[str, Pathway], hit_id: str) -> None:
    before = written()

    response = operator_client.post(undo_url(hit_id), headers=HTMX)

    assert response.status_code == 404
    assert written() == before


def test_undo_without_the_csrf_token_is_refused(
    clock: time_machine.Coordinates, csrf_client: Client, library: dict[str, Pathway]
) -> None:
    hit = reuse_plainly(csrf_client, library["exact"])
    before = written()

    response = csrf_client.post(undo_url(hit.pk), {"next": CONSOLE})

    assert response.status_code == 403
    assert written() == before


def test_the_card_offers_undo_only_within_the_minute(
    clock: time_machine.Coordinates, operator_client: Client, library: dict[str, Pathway]
) -> None:
    exact = library["exact"]
    reuse_plainly(operator_client, exact)
    clock.shift(timedelta(seconds=30))

    status = doc(operator_client.get(CONSOLE, QUERY)).by_id(f"reuse-actions-{exact.pk}").one("p", role="status")
    assert status.text == "Reused just now. Changed your mind? Undo it within a minute."

    clock.shift(timedelta(seconds=31))
    actions = doc(operator_client.get(CONSOLE, QUERY)).by_id(f"reuse-actions-{exact.pk}")
    assert [b.text for b in actions.select("button")] == ["Reuse pathway"]
