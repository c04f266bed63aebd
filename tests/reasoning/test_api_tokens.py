"""API tokens: the create/revoke commands, bearer authentication and scope checks."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import TYPE_CHECKING, Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import ApiToken

if TYPE_CHECKING:
    from rest_framework.response import _MonkeyPatchedResponse as Response

FLOWS = "/api/reasoning/flows"
ADMIN_FLOWS = "/admin/v1/reasoning/flows"
FLOW_BODY = {"trigger_type": "user_question", "trigger_ref": "q/1", "agent": "researcher"}


def create_token(*args: str) -> tuple[str, list[str]]:
    """Run ``create_api_token``; return the last stdout line and all lines."""
    out = StringIO()
    call_command("create_api_token", *args, stdout=out)
    lines = out.getvalue().splitlines()
    return lines[-1], lines


def post_flow(client: APIClient) -> Response:
    return client.post(FLOWS, FLOW_BODY, format="json")


def assert_unauthorized(response: Response) -> None:
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


# --- create_api_token ---------------------------------------------------------------


def test_create_command_prints_a_working_token_alone_on_the_last_line(
    db: None, client_for: Callable[[str | None], APIClient]
) -> None:
    raw, lines = create_token("--name", "X", "--scopes", "reasoning.write,reasoning.admin")

    assert raw.startswith("rft_")
    assert raw == raw.strip() and " " not in raw
    assert len(lines) > 1 and all(raw not in line for line in lines[:-1])
    response = post_flow(client_for(raw))
    assert response.status_code == 201, response.content
    assert response.json()["agent"] == "researcher"


def test_created_token_has_the_requested_scopes_and_no_expiry(db: None) -> None:
    create_token("--name", "X", "--scopes", " reasoning.write , reasoning.admin,reasoning.write")

    token = ApiToken.objects.get(name="X")
    assert sorted(token.scopes) == ["reasoning.admin", "reasoning.write"]
    assert token.expires_at is None
    assert token.revoked_at is None


def test_only_the_sha256_of_the_token_is_stored(db: None) -> None:
    raw, _ = create_token("--name", "X", "--scopes", "reasoning.write")

    with connection.cursor() as cursor:
        cursor.execute("SELECT t::text, token_hash FROM reasoning_api_token t WHERE name = %s", ["X"])
        row = cursor.fetchone()
    assert row is not None
    whole_row, token_hash = row
    assert token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in whole_row
    # The random part is not stored either (the prefix shown to people is a few characters).
    assert raw[len("rft_") :] not in whole_row


def test_the_stored_hash_is_not_itself_a_credential(db: None, client_for: Callable[[str | None], APIClient]) -> None:
    create_token("--name", "X", "--scopes", "reasoning.write")
    token_hash = ApiToken.objects.get(name="X").token_hash

    assert_unauthorized(post_flow(client_for(token_hash)))


def test_create_command_with_an_unknown_scope_fails_and_creates_nothing(db: None) -> None:
    with pytest.raises(CommandError, match=r"reasoning\.bogus"):
        create_token("--name", "X", "--scopes", "reasoning.write,reasoning.bogus")

    assert not ApiToken.objects.filter(name="X").exists()
    assert not AuditEvent.objects.exists()


def test_create_command_with_no_scopes_fails(db: None) -> None:
    with pytest.raises(CommandError, match="at least one scope"):
        create_token("--name", "X", "--scopes", ",")

    assert not ApiToken.objects.exists()


def test_create_command_with_a_duplicate_name_fails_and_keeps_the_first_token(
    db: None, client_for: Callable[[str | None], APIClient]
) -> None:
    first, _ = create_token("--name", "X", "--scopes", "reasoning.write")

    with pytest.raises(CommandError, match="already exists"):
        create_token("--name", "X", "--scopes", "reasoning.admin")

    assert ApiToken.objects.filter(name="X").count() == 1
    assert ApiToken.objects.get(name="X").scopes == ["reasoning.write"]
    assert post_flow(client_for(first)).status_code == 201


def test_create_command_rejects_a_non_positive_expiry(db: None) -> None:
    with pytest.raises(CommandError, match="expires-in-days"):
        create_token("--name", "X", "--scopes", "reasoning.write", "--expires-in-days", "0")

    assert not ApiToken.objects.exists()


# --- authentication: 401 ------------------------------------------------------------


def test_request_without_authorization_header_is_401_with_challenge(db: None, anonymous: APIClient) -> None:
    assert_unauthorized(post_flow(anonymous))


def test_request_with_an_unknown_token_is_401(db: None, client_for: Callable[[str | None], APIClient]) -> None:
    response = post_flow(client_for("rft_not-a-real-token"))

    assert_unauthorized(response)
    assert response.json() == {"detail": "Invalid token."}


@pytest.mark.parametrize("header", ["Bearer", "Bearer ", "Bearer two words"], ids=["no-token", "blank", "spaces"])
def test_malformed_bearer_header_is_401(db: None, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)

    assert_unauthorized(post_flow(client))


def test_basic_scheme_is_401_even_with_a_valid_token(make_token: Callable[..., str]) -> None:
    raw = make_token("reasoning.write")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {raw}")

    assert_unauthorized(post_flow(client))


def test_bearer_scheme_is_case_insensitive(make_token: Callable[..., str]) -> None:
    raw = make_token("reasoning.write")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"bearer {raw}")

    assert post_flow(client).status_code == 201


def test_revoked_token_is_401(db: None, client_for: Callable[[str | None], APIClient]) -> None:
    raw, _ = create_token("--name", "X", "--scopes", "reasoning.write")
    client = client_for(raw)
    assert post_flow(client).status_code == 201

    out = StringIO()
    call_command("revoke_api_token", "--name", "X", stdout=out)

    assert "revoked token 'X'" in out.getvalue()
    response = post_flow(client)
    assert_unauthorized(response)
    assert response.json() == {"detail": "Token has been revoked."}


def test_revoking_twice_fails(db: None) -> None:
    create_token("--name", "X", "--scopes", "reasoning.write")
    call_command("revoke_api_token", "--name", "X", stdout=StringIO())

    with pytest.raises(CommandError, match="already revoked"):
        call_command("revoke_api_token", "--name", "X", stdout=StringIO())


def test_revoking_an_unknown_token_fails(db: None) -> None:
    with pytest.raises(CommandError, match="no token named 'nobody'"):
        call_command("revoke_api_token", "--name", "nobody", stdout=StringIO())


def test_token_created_with_a_past_expiry_is_401(
    make_token: Callable[..., str], client_for: Callable[[str | None], APIClient]
) -> None:
    raw = make_token("reasoning.write", expires_at=timezone.now() - timedelta(seconds=1))

    response = post_flow(client_for(raw))

    assert_unauthorized(response)
    assert response.json() == {"detail": "Token has expired."}


def test_token_works_until_its_expiry_and_is_401_after(db: None, client_for: Callable[[str | None], APIClient]) -> None:
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        raw, _ = create_token("--name", "X", "--scopes", "reasoning.write", "--expires-in-days", "1")
        client = client_for(raw)

        traveller.shift(timedelta(hours=23, minutes=59))
        assert post_flow(client).status_code == 201

        traveller.shift(timedelta(minutes=2))
        response = post_flow(client)

    assert_unauthorized(response)
    assert response.json() == {"detail": "Token has expired."}


# --- scopes: 403 --------------------------------------------------------------------


def test_token_without_write_scope_cannot_open_a_flow(reader: APIClient) -> None:
    response = post_flow(reader)

    assert response.status_code == 403
    assert response.json() == {"detail": "This route needs the 'reasoning.write' scope."}


def test_admin_token_without_write_scope_cannot_open_a_flow(operator: APIClient) -> None:
    response = post_flow(operator)

    assert response.status_code == 403
    assert "reasoning.write" in response.json()["detail"]


def test_token_without_admin_scope_cannot_list_flows_for_admins(agent: APIClient) -> None:
    response = agent.get(ADMIN_FLOWS)

    assert response.status_code == 403
    assert response.json() == {"detail": "This route needs the 'reasoning.admin' scope."}


def test_token_with_admin_scope_can_list_flows_for_admins(operator: APIClient, flow: dict[str, object]) -> None:
    response = operator.get(ADMIN_FLOWS)

    assert response.status_code == 200
    assert [item["id"] for item in response.json()] == [flow["id"]]


def test_admin_flow_list_without_a_token_is_401(db: None, anonymous: APIClient) -> None:
    assert_unauthorized(anonymous.get(ADMIN_FLOWS))


# --- audit ----------------------------------------------------------------------------


def test_token_creation_is_audited_without_the_raw_token(db: None) -> None:
    raw, _ = create_token("--name", "X", "--scopes", "reasoning.write,reasoning.admin")
    token = ApiToken.objects.get(name="X")

    event = AuditEvent.objects.get(action="auth.api_token.created")
    assert event.actor == "system:cli"
    assert (event.target_type, event.target_id) == ("reasoning.apitoken", str(token.pk))
    assert event.payload == {"scopes": ["reasoning.admin", "reasoning.write"], "expires": False, "patient_bound": False}
    assert raw not in json.dumps(event.payload)
    assert raw.encode() not in bytes(event.canonical)
    assert token.token_hash.encode() not in bytes(event.canonical)


def test_token_revocation_is_audited_without_the_raw_token(db: None) -> None:
    raw, _ = create_token("--name", "X", "--scopes", "reasoning.write")
    token = ApiToken.objects.get(name="X")

    call_command("revoke_api_token", "--name", "X", stdout=StringIO())

    event = AuditEvent.objects.get(action="auth.api_token.revoked")
    assert event.actor == "system:cli"
    assert (event.target_type, event.target_id) == ("reasoning.apitoken", str(token.pk))
    assert raw not in json.dumps(event.payload)
    assert raw.encode() not in bytes(event.canonical)
    assert list(AuditEvent.objects.order_by("id").values_list("action", flat=True)) == [
        "auth.api_token.created",
        "auth.api_token.revoked",
    ]


def test_failed_revocation_writes_no_audit_event(db: None) -> None:
    create_token("--name", "X", "--scopes", "reasoning.write")
    call_command("revoke_api_token", "--name", "X", stdout=StringIO())

    with pytest.raises(CommandError):
        call_command("revoke_api_token", "--name", "X", stdout=StringIO())

    assert AuditEvent.objects.filter(action="auth.api_token.revoked").count() == 1


# --- The token cache: a revoked token stops working within API_TOKEN_CACHE_SECONDS ------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    from reasoning.auth import token_cache

    fake = FakeClock()
    monkeypatch.setattr(token_cache, "clock", fake)
    token_cache.clear()
    return fake


def test_a_token_revoked_elsewhere_stops_working_within_the_cache_lifetime(
    db: None, client_for: Callable[[str | None], APIClient], clock: FakeClock, settings: Any
) -> None:
    settings.API_TOKEN_CACHE_SECONDS = 10.0
    raw, _ = create_token("--name", "cached", "--scopes", "reasoning.write")
    client = client_for(raw)
    assert post_flow(client).status_code == 201  # read from the database, and kept

    # Revoked by another process (a direct write: this process's cache does not hear of it).
    ApiToken.objects.filter(name="cached").update(revoked_at=timezone.now())
    clock.now += 9.9
    still_cached = post_flow(client)
    clock.now += 0.2  # 10.1 s after it was read
    refused = post_flow(client)

    assert still_cached.status_code == 201
    assert refused.status_code == 401
    assert refused.json() == {"detail": "Token has been revoked."}


def test_revoking_in_this_process_takes_effect_at_once(
    db: None, client_for: Callable[[str | None], APIClient], clock: FakeClock, settings: Any
) -> None:
    settings.API_TOKEN_CACHE_SECONDS = 10.0
    raw, _ = create_token("--name", "cached", "--scopes", "reasoning.write")
    client = client_for(raw)
    assert post_flow(client).status_code == 201

    call_command("revoke_api_token", "--name", "cached", stdout=StringIO())

    assert post_flow(client).status_code == 401


def test_a_cached_token_still_expires_on_time(
    db: None, client_for: Callable[[str | None], APIClient], clock: FakeClock, settings: Any
) -> None:
    settings.API_TOKEN_CACHE_SECONDS = 3600.0
    raw, _ = create_token("--name", "brief", "--scopes", "reasoning.write", "--expires-in-days", "1")
    client = client_for(raw)
    assert post_flow(client).status_code == 201

    with time_machine.travel(timezone.now() + timedelta(days=1, seconds=1)):
        assert post_flow(client).status_code == 401


def test_with_the_cache_off_every_request_reads_the_token(
    db: None, client_for: Callable[[str | None], APIClient], clock: FakeClock, settings: Any
) -> None:
    settings.API_TOKEN_CACHE_SECONDS = 0
    raw, _ = create_token("--name", "uncached", "--scopes", "reasoning.write")
    client = client_for(raw)
    assert post_flow(client).status_code == 201

    ApiToken.objects.filter(name="uncached").update(revoked_at=timezone.now())

    assert post_flow(client).status_code == 401
