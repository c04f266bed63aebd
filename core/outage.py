"""A database outage answers 503 with ``Retry-After``, and is logged once when it starts and
once when it ends, not once per request.

A request fails because the database is unreachable when psycopg (or Django's wrapper of it)
raises ``OperationalError`` / ``InterfaceError`` while connecting or on a dropped connection:
no SQLSTATE (the client-side "connection failed", "server closed the connection", "the
connection is closed"), class 08 (connection exception), 57P01-57P03 (the server shutting down,
crashed, or not accepting connections yet) or 53300 (too many connections). Every other
database error (an ``IntegrityError``, a ``ProgrammingError``, a statement timeout, a
deadlock) is not an outage and keeps its ordinary handling.

``core.api.exception_handler`` (DRF views) and ``core.api.server_error`` (``handler500``:
everything else, middleware included) answer with :func:`unavailable_response`. The state is
per process: each gunicorn worker logs its own "unavailable" line at its first failed request
and its own "available again" line when it next connects, so an outage gives at most one pair
of lines per worker.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections
from django.db.backends.signals import connection_created
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger("core.outage")

_Response = TypeVar("_Response", bound=HttpResponse)

DETAIL = "The database is unavailable; retry shortly."

# SQLSTATEs that mean "cannot talk to the database", not "this statement failed".
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300")

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Service unavailable</title></head>
<body><h1>Service unavailable</h1>
<p>The database cannot be reached just now. Try again in a few seconds.</p></body></html>
"""


def is_database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (see the module docstring)."""
    cause: BaseException = exc
    if isinstance(exc, OperationalError | InterfaceError):
        # Django's wrapper of the driver's error: the driver's is its cause.
        if not isinstance(exc.__cause__, psycopg.Error):
            return isinstance(exc, InterfaceError)
        cause = exc.__cause__
    if isinstance(cause, psycopg.InterfaceError):
        return True
    if not isinstance(cause, psycopg.OperationalError):
        return False
    sqlstate = cause.sqlstate
    return sqlstate is None or sqlstate.startswith(_UNAVAILABLE_STATES)


class _OutageState:
    """Whether this process is in an outage: one log line as it starts, one as it ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._refused = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    def unavailable(self, exc: BaseException) -> None:
        with self._lock:
            self._refused += 1
            if self._since is not None:
                return
            self._since = time.monotonic()
        # The first line of the driver's message, no traceback: enough to tell a refused
        # connection from a terminated one.
        cause = exc.__cause__ if isinstance(exc.__cause__, psycopg.Error) else exc
        message = (str(cause).strip().splitlines() or [""])[0]
        logger.error(
            "database unavailable (%s: %s): answering 503 with Retry-After: %d until it is back",
            type(cause).__name__,
            message[:300],
            settings.DB_UNAVAILABLE_RETRY_AFTER_S,
        )

    def available(self) -> None:
        if self._since is None:  # the common case: no lock on every new connection
            return
        with self._lock:
            if self._since is None:
                return
            lasted, refused = time.monotonic() - self._since, self._refused
            self._since, self._refused = None, 0
        logger.warning("database available again after %.1f s (%d requests answered 503 meanwhile)", lasted, refused)


state = _OutageState()


def _connected(sender: Any, connection: Any, **kwargs: Any) -> None:
    state.available()


connection_created.connect(_connected, dispatch_uid="core.outage.available")


def _discard_broken_connections() -> None:
    """Close this thread's connections that the error left unusable, so the next request
    connects afresh (Django does the same at the end of the request; this makes it certain)."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def retry_after_headers() -> dict[str, str]:
    return {"Retry-After": str(settings.DB_UNAVAILABLE_RETRY_AFTER_S)}


def note_unavailable(exc: BaseException) -> None:
    """Record a request that failed for want of the database (logs only the first)."""
    state.unavailable(exc)
    _discard_broken_connections()


def mark_logged(response: _Response) -> _Response:
    """Keep Django from logging this 503 again (``django.utils.log.log_response``)."""
    response._has_been_logged = True  # type: ignore[attr-defined]
    return response


def wants_json(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/admin/v1/", "/v1/"))


def unavailable_response(request: HttpRequest, exc: BaseException | None) -> HttpResponse | None:
    """A 503 with ``Retry-After`` when ``exc`` is an outage (JSON for the API, a short page
    otherwise); ``None`` for any other error."""
    if exc is None or not is_database_unavailable(exc):
        return None
    note_unavailable(exc)
    response: HttpResponse
    if wants_json(request):
        response = JsonResponse({"detail": DETAIL}, status=503, headers=retry_after_headers())
    else:
        response = HttpResponse(_PAGE, status=503, headers=retry_after_headers())
    return mark_logged(response)
