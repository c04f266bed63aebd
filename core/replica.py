"""Reads that may go to the read replica (``DATABASE_REPLICA_URL``), and everything else that may not.

Opt-in, never by default: a read goes to the replica only inside ``replica_reads()`` — the
middleware opens it for GET/HEAD requests to the views in ``REPLICA_VIEWS`` (dashboards, stats,
session, turn and drift reads), commands such as ``reasoning_export`` open it themselves (its
REPEATABLE READ snapshot is then the replica's). Even there, a read stays on the primary

* inside a transaction on the primary (a service reading what it is about to write, an audit
  event's own transaction),
* after the request has written anything (``db_for_write`` pins the rest of the request),
* for a browser that wrote within ``DATABASE_REPLICA_PIN_SECONDS`` (the ``rft_primary`` cookie
  the middleware sets on a successful write request), so a person never sees the page lag
  behind what they just did.

Every write goes to the primary (``db_for_write``); the replica has no migrations. Raw SQL reads
take their connection from ``reading_connection()``. With no replica configured every function
here answers the primary and the router is a no-op.

A replica that cannot be reached is not an outage: a scope that cannot connect to it reads
from the primary, and the process does not try the replica again for ``REPLICA_RETRY_S``
seconds (one log line each time it gives up on it). A replica that dies while a request reads
from it fails that request like a database outage (503 with ``Retry-After``); the next ones
read from the primary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest, HttpResponse, HttpResponseBase

logger = logging.getLogger(__name__)

REPLICA = "replica"
# After failing to connect to the replica, read from the primary for this long before trying again.
REPLICA_RETRY_S = 10.0
PIN_COOKIE = "rft_primary"
SAFE_METHODS = frozenset({"GET", "HEAD"})

# URL names (resolver_match.url_name) whose GET/HEAD answers may be read from the replica.
# Not here on purpose: the patient's narrative (consent must be read fresh), a flow's detail
# (agents read what they just wrote), the Research Console (operators act on what they read).
REPLICA_VIEWS = frozenset(
    {
        "admin-reasoning-stats",
        "admin-flow-list",
        "admin-flow-list-summary",
        "admin-session-list",
        "admin-session-detail",
        "admin-turn-detail",
        "admin-turn-page",
        "admin-agent-drift",
        "admin-agents-page",
        "admin-agent-page",
        "pathway-stats",
        "pathway-library",
        "reasoning-dashboard",
        "evaluation-page",
    }
)


@dataclass
class _Scope:
    usable: bool  # the replica answered when the scope opened
    wrote: bool = False


_scope: ContextVar[_Scope | None] = ContextVar("replica_scope", default=None)
_unreachable_until = 0.0  # per process (time.monotonic())


def configured() -> bool:
    return REPLICA in connections.settings


def _reachable() -> bool:
    """Whether this thread has (or can open) a connection to the replica; cheap when it has one."""
    global _unreachable_until
    if not configured() or time.monotonic() < _unreachable_until:
        return False
    try:
        connections[REPLICA].ensure_connection()
    except (OperationalError, InterfaceError) as exc:
        _unreachable_until = time.monotonic() + REPLICA_RETRY_S
        cause = exc.__cause__ or exc
        logger.warning(
            "read replica unreachable (%s: %s): reading from the primary for %.0f s",
            type(cause).__name__,
            (str(cause).strip().splitlines() or [""])[0][:300],
            REPLICA_RETRY_S,
        )
        return False
    return True


@contextmanager
def replica_reads() -> Iterator[None]:
    """Let the reads in this block go to the replica (when one is configured and reachable)."""
    token = _scope.set(_Scope(usable=_reachable()))
    try:
        yield
    finally:
        _scope.reset(token)


def _read_alias() -> str:
    scope = _scope.get()
    if scope is None or not scope.usable or scope.wrote or connections[DEFAULT_DB_ALIAS].in_atomic_block:
        return DEFAULT_DB_ALIAS
    return REPLICA


def reading_connection() -> BaseDatabaseWrapper:
    """The connection a raw SQL read should use: the replica inside ``replica_reads()``, else the primary."""
    return connections[_read_alias()]


class ReplicaRouter:
    """``DATABASE_ROUTERS``: reads as ``_read_alias`` says, every write on the primary."""

    def db_for_read(self, model: type[Any], **hints: Any) -> str:
        return _read_alias()

    def db_for_write(self, model: type[Any], **hints: Any) -> str:
        scope = _scope.get()
        if scope is not None:
            scope.wrote = True  # read-after-write: the rest of this scope reads the primary
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # one database, two copies of it

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool:
        return db == DEFAULT_DB_ALIAS


def pin_after_write(request: HttpRequest, response: HttpResponseBase) -> None:
    """With a replica: a write that succeeded pins its browser to the primary for
    ``DATABASE_REPLICA_PIN_SECONDS`` (a cookie), so that it reads what it wrote."""
    if configured() and request.method not in SAFE_METHODS and response.status_code < 400:
        response.set_cookie(
            PIN_COOKIE,
            "1",
            max_age=settings.DATABASE_REPLICA_PIN_SECONDS,
            httponly=True,
            samesite="Lax",
            secure=settings.SESSION_COOKIE_SECURE,
        )


class ReplicaReadsMiddleware:
    """Opens ``replica_reads()`` around the listed views' GET/HEAD requests, and pins a browser
    that just wrote to the primary for ``DATABASE_REPLICA_PIN_SECONDS``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        pin_after_write(request, response)
        return response

    def process_view(
        self, request: HttpRequest, view: Callable[..., HttpResponse], args: Any, kwargs: Any
    ) -> HttpResponse | None:
        match = request.resolver_match
        if (
            not configured()
            or request.method not in SAFE_METHODS
            or PIN_COOKIE in request.COOKIES
            or match is None
            or match.url_name not in REPLICA_VIEWS
        ):
            return None
        with replica_reads():
            response = view(request, *args, **kwargs)
            render = getattr(response, "render", None)
            if callable(render) and not getattr(response, "is_rendered", True):
                render()  # templates evaluate their lazy querysets here: still inside the scope
            return response
