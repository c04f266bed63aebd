"""Bearer-token authentication and scope checks: the one place API access is decided.

``Authorization: Bearer <token>``. A missing, unknown, revoked or expired token is a
401; a valid token without the route's scope is a 403.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from core import scopes
from core.scopes import HasScope
from reasoning.models import ApiToken

TOKEN_PREFIX = "rft_"  # noqa: S105 - a public prefix, not a secret


def hash_token(raw: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(raw.encode()).hexdigest()


class TokenCache:
    """Tokens by hash, for at most ``API_TOKEN_CACHE_SECONDS``: authentication costs a
    database round trip per request otherwise (a fifth of a step write).

    Bounded staleness: a token revoked in the database stops working in every process
    within that many seconds (at once in the process that revoked it). Expiry is checked
    on every request against the cached ``expires_at``, so it is exact. Unknown tokens are
    never cached (a new token works at once). 0 turns the cache off.
    """

    MAX_ENTRIES = 1024

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._entries: dict[str, tuple[ApiToken, float]] = {}
        self._lock = threading.Lock()

    def get(self, token_hash: str) -> ApiToken | None:
        ttl = settings.API_TOKEN_CACHE_SECONDS
        if ttl <= 0:
            return _lookup(token_hash)
        now = self.clock()
        with self._lock:
            entry = self._entries.get(token_hash)
        if entry is not None and now - entry[1] < ttl:
            return entry[0]
        token = _lookup(token_hash)
        with self._lock:
            if token is None:
                self._entries.pop(token_hash, None)
            else:
                if len(self._entries) >= self.MAX_ENTRIES:
                    self._entries.clear()
                self._entries[token_hash] = (token, now)
        return token

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


token_cache = TokenCache()

# last_used_at is written at most this often per token (and process).
LAST_USED_EVERY = timedelta(minutes=1)


def _lookup(token_hash: str) -> ApiToken | None:
    """The token with this secret, current or (after a rotation) previous, in one statement that
    also writes ``last_used_at`` when it is older than ``LAST_USED_EVERY`` (bookkeeping nobody
    audits, like a session's last activity). Cache hits write nothing, so the time is right to
    within a minute or ``API_TOKEN_CACHE_SECONDS``, whichever is longer."""
    now = timezone.now()
    found = list(
        ApiToken.objects.raw(
            """
            WITH found AS (
                SELECT * FROM reasoning_api_token WHERE token_hash = %s OR previous_token_hash = %s LIMIT 1
            ), used AS (
                UPDATE reasoning_api_token t SET last_used_at = %s FROM found
                WHERE t.id = found.id AND (found.last_used_at IS NULL OR found.last_used_at < %s)
                RETURNING t.id
            )
            SELECT * FROM found
            """,
            [token_hash, token_hash, now, now - LAST_USED_EVERY],
        )
    )
    return found[0] if found else None


@dataclass(frozen=True)
class TokenPrincipal:
    """``request.user`` for a token-authenticated request."""

    token: ApiToken

    is_authenticated = True
    is_staff = False

    @property
    def actor(self) -> str:
        return self.token.actor

    def has_scope(self, scope: str) -> bool:
        return scope in self.token.scopes


def authenticate_bearer(header: str) -> TokenPrincipal | None:
    """The principal of an ``Authorization`` header value: None when it is not a Bearer
    credential (another scheme may apply); DRF's ``AuthenticationFailed`` (401) when it is one
    that does not authenticate. Used by the DRF authentication class and by the hot write
    routes' handler below Django (``reasoning.recording.hot_writes``)."""
    if not header:
        return None
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    raw = raw.strip()
    if not raw or " " in raw:
        raise exceptions.AuthenticationFailed("Malformed Authorization header: expected 'Bearer <token>'.")
    presented = hash_token(raw)
    token = token_cache.get(presented)
    if token is None:
        raise exceptions.AuthenticationFailed("Invalid token.")
    now = timezone.now()
    if token.revoked_at is not None:
        raise exceptions.AuthenticationFailed("Token has been revoked.")
    if token.expires_at is not None and token.expires_at <= now:
        raise exceptions.AuthenticationFailed("Token has expired.")
    if token.token_hash != presented and (
        token.previous_token_hash != presented
        or token.previous_valid_until is None
        or token.previous_valid_until <= now
    ):
        raise exceptions.AuthenticationFailed("Token has been rotated: use its new secret.")
    return TokenPrincipal(token)


class BearerTokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TokenPrincipal, ApiToken] | None:
        principal = authenticate_bearer(request.META.get("HTTP_AUTHORIZATION", ""))
        return None if principal is None else (principal, principal.token)

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class CanWrite(HasScope):
    scopes = (ApiToken.Scope.WRITE.value,)


class CanRead(HasScope):
    scopes = (ApiToken.Scope.READ.value,)


# The scopes other apps check too live in core.scopes (no app imports this module).
IsAdmin = scopes.IsAdmin
CanReadAudit = scopes.CanReadAudit


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "reasoning.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An API token from `create_api_token`."}


def changes_only_own_flows(request: Request) -> bool:
    """A writer may change only the flows it opened, unless its token holds the admin scope
    (docs/ingest.md, "Who may change a flow")."""
    return only_own_flows(request.user)


def only_own_flows(user: Any) -> bool:
    """``changes_only_own_flows`` for a request's ``user`` (or a principal)."""
    return not (isinstance(user, TokenPrincipal) and user.has_scope(ApiToken.Scope.ADMIN))
