"""``/`` is a way in, not a 404; page URLs never shadow each other; unknown addresses are friendly 404s."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client
from django.urls import resolve

pytestmark = pytest.mark.django_db


def test_root_sends_an_anonymous_visitor_to_the_login_page() -> None:
    response = Client().get("/", follow=True)

    assert response.status_code == 200
    assert response.redirect_chain[0] == ("/dashboard/", 302)
    assert response.request["PATH_INFO"] == "/accounts/login/"
    assert 'name="username"' in response.content.decode()


def test_root_sends_an_operator_to_the_dashboard(operator_client: Client) -> None:
    response = operator_client.get("/", follow=True)

    assert response.status_code == 200
    assert response.request["PATH_INFO"] == "/dashboard/admin/reasoning/"
    assert "<h1>Dashboard</h1>" in response.content.decode()


@pytest.mark.parametrize(
    ("path", "view"),
    [
        ("/dashboard/admin/reasoning/", "reasoning-dashboard"),
        ("/dashboard/admin/reasoning/research-console", "research-console"),
        ("/dashboard/admin/reasoning/pathway-library", "pathway-library"),
        ("/dashboard/admin/reasoning/00000000-0000-0000-0000-000000000007", "admin-flow-page"),
    ],
)
def test_operator_page_names_and_flow_ids_never_shadow_each_other(path: str, view: str) -> None:
    # Flow pages take only UUIDs, so the order of the URL includes does not matter.
    assert resolve(path).url_name == view


def test_a_malformed_flow_id_is_the_flow_not_found_page(operator_client: Client) -> None:
    response = operator_client.get("/dashboard/admin/reasoning/not-a-flow")

    assert response.status_code == 404
    assert "Flow not found" in response.content.decode()


def test_the_favicon_is_served_not_a_404() -> None:
    from django.contrib.staticfiles import finders

    response = Client().get("/favicon.ico")

    assert (response.status_code, response["Location"]) == (301, "/static/favicon.svg")
    found = finders.find("favicon.svg")
    assert isinstance(found, str) and Path(found).read_text().startswith("<svg")


def test_the_operator_nav_reaches_every_operator_page_and_the_flow_list_sits_under_the_dashboard(
    operator_client: Client,
) -> None:
    from tests.html import doc

    page = doc(operator_client.get("/dashboard/admin/reasoning/flows"))

    nav = [a.text for a in page.one("nav").select("a")]
    assert nav == [
        "Dashboard",
        "Research Console",
        "Flows",
        "Sessions",
        "Agents",
        "Pathway library",
        "Evaluation",
        "Access report",
        "Admin",
    ]
    assert page.select("p", "muted")[0].text == "Dashboard / Flows"
