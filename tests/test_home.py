"""``/``: the address ``make run`` prints is a way in, not a 404."""

from __future__ import annotations

import pytest
from django.test import Client

from reasoning import services

pytestmark = pytest.mark.django_db


def test_root_sends_an_anonymous_visitor_to_the_login_page() -> None:
    response = Client().get("/", follow=True)

    assert response.status_code == 200
    assert response.redirect_chain[0] == ("/dashboard/", 302)
    assert response.request["PATH_INFO"] == "/accounts/login/"
    assert 'name="username"' in response.content.decode()


def test_root_sends_an_operator_to_the_research_console() -> None:
    client = Client()
    client.force_login(services.create_operator(username="olga", password="correct horse battery", actor="system:test"))

    response = client.get("/", follow=True)

    assert response.status_code == 200
    assert response.request["PATH_INFO"] == "/dashboard/admin/reasoning/research-console"
