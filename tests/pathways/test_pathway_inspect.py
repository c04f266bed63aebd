"""manage.py pathway_inspect: the operators' CLI over the stats route, against a live server."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from tests.factories import make_pathway

TOKEN_VARIABLE = "MEMORY_STORE_ADMIN_TOKEN"  # read by the settings at start-up


def build_library() -> None:
    """user_question: 5 active, one reused 3 times (mature); lab_result: 1 active (growing);
    claim_review: only a demoted pathway (sparse)."""
    for n, hits in enumerate([3, 1, 0, 0, 0]):
        make_pathway("user_question", f"q/{n}", hit_count=hits)
    make_pathway("lab_result", "l/0", hit_count=2)
    make_pathway("claim_review", "c/0", demoted_at=timezone.now(), demotion_reason="cold_no_hits_30d")


def run(*args: str) -> str:
    out = StringIO()
    call_command("pathway_inspect", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def admin_token(make_token: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> str:
    raw = make_token("reasoning.admin", name="pathway-inspect")
    monkeypatch.setattr(settings, TOKEN_VARIABLE, raw)
    return raw


@pytest.mark.django_db(transaction=True)
def test_table_shows_totals_and_maturity_per_trigger_type(live_server: LiveServer, admin_token: str) -> None:
    build_library()

    output = run("--base-url", live_server.url)

    assert "pathways: 7 total, 6 active, 0 embedded, 1 demoted" in output
    rows = {
        match.group(1): (int(match.group(2)), match.group(3))
        for match in re.finditer(r"^\s+(\w+)\s+(\d+)\s+(mature|growing|sparse)$", output, re.MULTILINE)
    }
    assert rows == {"user_question": (5, "mature"), "lab_result": (1, "growing"), "claim_review": (0, "sparse")}
    assert "cold_no_hits_30d" in output  # demoted by reason


@pytest.mark.django_db(transaction=True)
def test_json_output_is_the_stats_route_body(
    live_server: LiveServer, admin_token: str, client_for: Callable[[str | None], APIClient]
) -> None:
    build_library()

    output = run("--json", "--base-url", live_server.url)

    route_body = client_for(admin_token).get("/admin/v1/reasoning/pathways/stats").json()
    assert json.loads(output) == route_body
    assert json.loads(output)["maturity_by_trigger_type"]["user_question"] == "mature"


@pytest.mark.django_db(transaction=True)
def test_a_token_without_the_admin_scope_is_a_command_error_naming_403(
    live_server: LiveServer, make_token: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, TOKEN_VARIABLE, make_token("reasoning.write", name="agent"))

    with pytest.raises(CommandError, match="403"):
        run("--base-url", live_server.url)


@pytest.mark.django_db(transaction=True)
def test_an_unknown_token_is_a_command_error_naming_401(
    live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, TOKEN_VARIABLE, "not-a-real-token")

    with pytest.raises(CommandError, match="401"):
        run("--base-url", live_server.url)


def test_missing_token_variable_is_a_command_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, TOKEN_VARIABLE, "")  # neither the variable nor its _FILE set

    with pytest.raises(CommandError, match=TOKEN_VARIABLE):
        run("--base-url", "http://127.0.0.1:9")


def test_unreachable_server_is_a_command_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, TOKEN_VARIABLE, "any-token")
    # A port that was free a moment ago: nothing listens there.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    with pytest.raises(CommandError, match="cannot reach"):
        run("--base-url", f"http://127.0.0.1:{port}")
