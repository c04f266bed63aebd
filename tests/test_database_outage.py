"""A database outage, for real: gunicorn on the test database, whose database then goes away.

While the database cannot be reached every request answers 503 with ``Retry-After`` (JSON for
the API, a short page for pages), and each worker logs one line as the outage starts (no
traceback) and one as it ends, not one per request (``core.outage``). Errors that are not about
reaching the database keep their ordinary handling.

The outage: the server's backends are terminated (``pg_terminate_backend``) and the test
database refuses new connections (``ALTER DATABASE … ALLOW_CONNECTIONS false``, which its owner,
the role the suite connects as, may do), from a connection to the ``postgres`` database so that
the suite's own connection is not in the way. Or the server is pointed at a closed port.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, ProgrammingError, connection, transaction
from django.test import Client
from django.urls import reverse
from psycopg import sql

from core.outage import DETAIL, is_database_unavailable
from tests.servers import Answer, Gunicorn, Server, free_port

pytestmark = pytest.mark.django_db(transaction=True)

FLOWS = "/api/reasoning/flows"
ADMIN_FLOWS = "/admin/v1/reasoning/flows"
RETRY_AFTER = "3"
OUTAGE_LINE = "database unavailable ("
RECOVERY_LINE = "database available again after"


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., tuple[Gunicorn, Server]]]:
    started: list[Gunicorn] = []

    def start(env: dict[str, str] | None = None, workers: int = 1) -> tuple[Gunicorn, Server]:
        log = tmp_path / f"gunicorn-{len(started)}.log"
        gunicorn = Gunicorn({"DB_UNAVAILABLE_RETRY_AFTER_S": RETRY_AFTER, **(env or {})}, workers, log)
        started.append(gunicorn)
        return gunicorn, gunicorn.start()

    yield start
    for gunicorn in started:
        gunicorn.stop()


class DatabaseSwitch:
    """Turns the test database off and on for every other session, from the ``postgres`` database."""

    def __init__(self) -> None:
        self.name = str(connection.settings_dict["NAME"])
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            row = cursor.fetchone()
        assert row is not None
        self.own_pid = row[0]  # the suite's connection, which flushes the database after the test
        params = {**connection.get_connection_params(), "dbname": "postgres"}
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.pop("prepare_threshold", None)
        self.control = psycopg.connect(**params, autocommit=True)

    def block(self) -> int:
        """Refuse new connections and end the server's; return how many were ended."""
        self._allow(False)
        row = self.control.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> %s AND backend_type = 'client backend'",
            [self.name, self.own_pid],
        ).fetchone()
        assert row is not None
        return int(row[0])

    def unblock(self) -> None:
        self._allow(True)

    def _allow(self, allowed: bool) -> None:
        statement = sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(self.name), sql.SQL("true" if allowed else "false")
        )
        self.control.execute(statement)

    def close(self) -> None:
        self.unblock()
        self.control.close()


@pytest.fixture
def test_database() -> Iterator[DatabaseSwitch]:
    database = DatabaseSwitch()
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def api_headers(make_token: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token('reasoning.write', 'reasoning.admin')}"}


@pytest.fixture
def page_headers(operator_client: Client) -> dict[str, str]:
    """An operator's session cookie: the session is in the database, so a page needs it."""
    return {"Cookie": f"{settings.SESSION_COOKIE_NAME}={operator_client.cookies[settings.SESSION_COOKIE_NAME].value}"}


def _assert_unavailable_json(answer: Answer) -> None:
    assert answer.status == 503, answer.body
    assert answer.headers.get("Retry-After") == RETRY_AFTER
    assert answer.headers.get("Content-Type", "").startswith("application/json")
    assert answer.json() == {"detail": DETAIL}


def _assert_unavailable_page(answer: Answer) -> None:
    assert answer.status == 503, answer.body
    assert answer.headers.get("Retry-After") == RETRY_AFTER
    assert answer.headers.get("Content-Type", "").startswith("text/html")
    assert b"<h1>Service unavailable</h1>" in answer.body


def _assert_no_traceback(gunicorn: Gunicorn) -> None:
    assert gunicorn.log is not None
    log = gunicorn.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert "Internal Server Error" not in log, log[-3000:]
    assert "Service Unavailable:" not in log, log[-3000:]  # django.request's line per 5xx


def _new_flow() -> bytes:
    return json.dumps({"trigger_type": "user_question", "trigger_summary": "Is the database there?"}).encode()


def test_an_outage_answers_503_and_is_logged_once_each_way(
    start_server: Callable[..., tuple[Gunicorn, Server]],
    test_database: DatabaseSwitch,
    api_headers: dict[str, str],
    page_headers: dict[str, str],
) -> None:
    gunicorn, server = start_server()
    dashboard = reverse("reasoning-dashboard")
    post_headers = {**api_headers, "Content-Type": "application/json"}
    assert server.request("GET", ADMIN_FLOWS, headers=api_headers).status == 200
    assert server.request("GET", dashboard, headers=page_headers).status == 200

    assert test_database.block() >= 1, "the server had no connection to end"
    for _ in range(10):
        _assert_unavailable_json(server.request("GET", ADMIN_FLOWS, headers=api_headers))
        _assert_unavailable_json(server.request("POST", FLOWS, _new_flow(), post_headers))
        _assert_unavailable_page(server.request("GET", dashboard, headers=page_headers))
        health = server.request("GET", "/healthz")
        assert health.status == 503 and health.headers.get("Retry-After") == RETRY_AFTER
        assert health.json() == {
            "status": "degraded",
            "audit_chain_lag_s": None,
            "close_work_oldest_s": None,
            "close_work_failed": None,
        }
    assert gunicorn.lines(RECOVERY_LINE) == []

    test_database.unblock()
    assert server.request("GET", ADMIN_FLOWS, headers=api_headers).status == 200
    assert server.request("POST", FLOWS, _new_flow(), post_headers).status == 201
    assert server.request("GET", dashboard, headers=page_headers).status == 200
    gunicorn.stop()

    (outage,) = gunicorn.lines(OUTAGE_LINE)
    assert f"Retry-After: {RETRY_AFTER}" in outage
    (recovery,) = gunicorn.lines(RECOVERY_LINE)
    assert "(40 requests answered 503 meanwhile)" in recovery
    _assert_no_traceback(gunicorn)


def test_a_dropped_connection_to_a_database_that_is_up_costs_one_503(
    start_server: Callable[..., tuple[Gunicorn, Server]],
    test_database: DatabaseSwitch,
    api_headers: dict[str, str],
) -> None:
    """A database restart (here: the server's backend ended): the request on the dead connection
    answers 503 instead of 500, the connection is dropped and the next request reconnects."""
    gunicorn, server = start_server()
    assert server.request("GET", ADMIN_FLOWS, headers=api_headers).status == 200

    test_database.block()
    test_database.unblock()

    _assert_unavailable_json(server.request("GET", ADMIN_FLOWS, headers=api_headers))
    assert server.request("GET", ADMIN_FLOWS, headers=api_headers).status == 200
    gunicorn.stop()

    (outage,) = gunicorn.lines(OUTAGE_LINE)
    assert "AdminShutdown: terminating connection due to administrator command" in outage
    (recovery,) = gunicorn.lines(RECOVERY_LINE)
    assert "(1 requests answered 503 meanwhile)" in recovery
    _assert_no_traceback(gunicorn)


def test_a_database_on_a_closed_port_is_one_line_per_worker(
    start_server: Callable[..., tuple[Gunicorn, Server]],
) -> None:
    """Two workers pointed at a loopback port where nothing listens: each logs at most once."""
    closed = free_port()
    gunicorn, server = start_server(
        {
            "DATABASE_URL": f"postgresql://rft_app@127.0.0.1:{closed}/{connection.settings_dict['NAME']}",
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "FIELD_ENCRYPTION_KEY": ",".join(settings.FIELD_ENCRYPTION_KEY),
        },
        workers=2,
    )
    started = time.monotonic()
    for _ in range(30):
        _assert_unavailable_json(server.request("POST", FLOWS, _new_flow(), {"Authorization": "Bearer rft_x"}))
        _assert_unavailable_page(server.request("GET", "/accounts/login/", headers={"Cookie": "sessionid=" + "k" * 32}))
    assert time.monotonic() - started < 30, "a refused connection must fail fast"
    gunicorn.stop()

    outages = gunicorn.lines(OUTAGE_LINE)
    assert 1 <= len(outages) <= 2, outages
    assert all("Connection refused" in line for line in outages), outages
    _assert_no_traceback(gunicorn)


# --- What is an outage and what is not: real errors from the real database ------------------


def _raised(action: Callable[[], Any]) -> BaseException:
    try:
        action()
    except Exception as exc:
        return exc
    raise AssertionError("nothing was raised")


def test_data_and_programming_errors_are_not_outages(operator_user: User) -> None:
    def duplicate() -> None:
        with transaction.atomic():
            User.objects.create(username=operator_user.username)

    def bad_sql() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT no_such_column FROM auth_user")

    def statement_timeout() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = 10")
            cursor.execute("SELECT pg_sleep(1)")

    integrity, programming, timeout = _raised(duplicate), _raised(bad_sql), _raised(statement_timeout)
    assert isinstance(integrity, IntegrityError) and not is_database_unavailable(integrity)
    assert isinstance(programming, ProgrammingError) and not is_database_unavailable(programming)
    assert type(timeout.__cause__) is psycopg.errors.QueryCanceled
    assert not is_database_unavailable(timeout)


def test_refused_and_dropped_connections_are_outages(test_database: DatabaseSwitch) -> None:
    refused = _raised(lambda: psycopg.connect(f"host=127.0.0.1 port={free_port()} dbname=x connect_timeout=5"))
    assert is_database_unavailable(refused)

    params = {**connection.get_connection_params(), "dbname": test_database.name}
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    with psycopg.connect(**params, autocommit=True) as victim:
        test_database.control.execute("SELECT pg_terminate_backend(%s)", [victim.info.backend_pid])
        dropped = _raised(lambda: victim.execute("SELECT 1"))
        assert isinstance(dropped, psycopg.errors.AdminShutdown) and is_database_unavailable(dropped)
        closed = _raised(lambda: victim.execute("SELECT 1"))
        assert is_database_unavailable(closed)
