"""Token hygiene: rotation with a grace period (rotate_api_token), last use, and a listing that
never shows a secret (list_api_tokens)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.auth import hash_token
from reasoning.models import ApiToken
from reasoning.tokens import create_api_token, revoke_api_token, rotate_api_token
from tests.factories import FLOWS, open_flow

pytestmark = pytest.mark.django_db

FLOW = {"trigger_type": "user_question"}


@pytest.fixture(autouse=True)
def _no_token_cache(settings: Any) -> None:
    # Every request reads the token row: what another process would see once its cache expires.
    settings.API_TOKEN_CACHE_SECONDS = 0


def client(raw: str) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def status(raw: str) -> int:
    return int(client(raw).post(FLOWS, FLOW, format="json").status_code)


def test_a_rotated_token_has_a_new_secret_and_the_old_one_works_for_the_grace_period() -> None:
    token, old = create_api_token(name="agent-7", scopes=["reasoning.write"], actor="system:test")
    opened = open_flow(client(old))

    with time_machine.travel(timezone.now(), tick=False) as clock:
        rotated, new = rotate_api_token(name="agent-7", actor="system:test", grace=timedelta(hours=2))

        assert new != old and rotated.prefix == new[:12]
        assert (status(new), status(old)) == (201, 201)
        # Still the same identity: the new secret changes the flows the old one opened.
        closed = client(new).patch(
            f"{FLOWS}/{opened['id']}", {"flow_state": "aborted", "abort_reason": "x"}, format="json"
        )
        assert closed.status_code == 200, closed.content

        clock.shift(timedelta(hours=2, seconds=1))
        refused = client(old).post(FLOWS, FLOW, format="json")
        assert refused.status_code == 401
        assert refused.json()["detail"] == "Token has been rotated: use its new secret."
        assert status(new) == 201

    event = AuditEvent.objects.get(action="auth.api_token.rotated")
    assert (event.actor, event.target_id, event.payload) == ("system:test", str(token.pk), {"grace_seconds": 7200})
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.token_hash == hash_token(new) and stored.previous_token_hash == hash_token(old)
    assert old not in bytes(event.canonical).decode() and new not in bytes(event.canonical).decode()


def test_a_second_rotation_ends_the_first_secret_at_once() -> None:
    create_api_token(name="agent-8", scopes=["reasoning.write"], actor="system:test")
    _, first = rotate_api_token(name="agent-8", actor="system:test")
    _, second = rotate_api_token(name="agent-8", actor="system:test", grace=timedelta(0))

    assert status(second) == 201
    assert status(first) == 401


def test_rotation_refuses_a_revoked_or_unknown_token_and_a_negative_grace() -> None:
    create_api_token(name="gone", scopes=["reasoning.write"], actor="system:test")
    revoke_api_token(name="gone", actor="system:test")

    with pytest.raises(CommandError, match="token 'gone' is revoked"):
        call_command("rotate_api_token", "--name", "gone", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="no token named 'nobody'"):
        call_command("rotate_api_token", "--name", "nobody", stdout=StringIO(), stderr=StringIO())
    with pytest.raises(CommandError, match="grace: must not be negative"):
        call_command("rotate_api_token", "--name", "gone", "--grace-hours", "-1", stdout=StringIO(), stderr=StringIO())
    assert not AuditEvent.objects.filter(action="auth.api_token.rotated").exists()


def test_the_rotate_command_prints_the_new_secret_once() -> None:
    create_api_token(name="agent-9", scopes=["reasoning.write"], actor="system:test")
    out, err = StringIO(), StringIO()

    call_command("rotate_api_token", "--name", "agent-9", "--grace-hours", "1", stdout=out, stderr=err)

    raw = out.getvalue().strip()
    assert status(raw) == 201
    assert "the old one works until" in err.getvalue()
    assert AuditEvent.objects.get(action="auth.api_token.rotated").actor == "system:cli"


def test_last_use_is_written_at_most_once_a_minute(make_token: Callable[..., str]) -> None:
    raw = make_token("reasoning.write", name="busy")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        assert status(raw) == 201
        first = ApiToken.objects.get(name="busy").last_used_at
        clock.shift(timedelta(seconds=30))
        assert status(raw) == 201
        unchanged = ApiToken.objects.get(name="busy").last_used_at
        clock.shift(timedelta(seconds=31))
        assert status(raw) == 201
        later = ApiToken.objects.get(name="busy").last_used_at

    assert first == unchanged == start
    assert later == start + timedelta(seconds=61)


def test_the_listing_shows_names_scopes_and_use_but_no_secret(make_token: Callable[..., str]) -> None:
    raw = make_token("reasoning.write", "reasoning.admin", name="supervisor")
    revoked = make_token("reasoning.read", name="old-reader")
    revoke_api_token(name="old-reader", actor="system:test")
    status(raw)
    out = StringIO()

    call_command("list_api_tokens", stdout=out)
    everything = StringIO()
    call_command("list_api_tokens", "--all", stdout=everything)

    text = out.getvalue()
    header, row = text.splitlines()[0], next(line for line in text.splitlines() if line.startswith("supervisor"))
    assert header.split()[:4] == ["name", "prefix", "scopes", "patient"]
    assert "reasoning.admin,reasoning.write" in row and "active" in row
    assert "old-reader" not in text and "revoked" in everything.getvalue()
    for secret in (raw, revoked):
        assert secret not in everything.getvalue() and hash_token(secret) not in everything.getvalue()
    assert raw[:12] in row
