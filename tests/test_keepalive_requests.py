"""A kept-alive connection is closed after ``WEB_MAX_REQUESTS_PER_CONNECTION`` requests
(``config.gunicorn.GuardedHttpToolsProtocol``), served as ``make run`` serves it: the answer to the
last request says ``connection: close`` and the server ends the connection, so a client's next
request opens a new one, which any worker may accept (long-lived connections spread over the
workers instead of staying where they first landed). A worker holding two connections more than
the least busy one ends them sooner (``config.gunicorn.ConnectionSpread``)."""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from config.gunicorn import ConnectionSpread
from tests.servers import Gunicorn

PER_CONNECTION = 3


@pytest.fixture(scope="module")
def served(django_db_setup: None, django_db_blocker: Any) -> Iterator[Gunicorn]:
    with django_db_blocker.unblock(), Gunicorn({"WEB_MAX_REQUESTS_PER_CONNECTION": str(PER_CONNECTION)}) as gunicorn:
        yield gunicorn


def test_the_last_answer_on_a_connection_says_close_and_the_next_request_reconnects(served: Gunicorn) -> None:
    client = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    ports, closing = [], []
    for _ in range(2 * PER_CONNECTION + 1):
        client.request("GET", "/favicon.ico")
        ports.append(client.sock.getsockname()[1])
        answer = client.getresponse()
        answer.read()
        assert answer.status in (200, 301, 302, 304)
        closing.append(answer.getheader("connection", "").lower() == "close")
    client.close()

    # Requests 3 and 6 end their connections; 4 and 7 come on new ones.
    assert closing == [False, False, True, False, False, True, False]
    assert ports[0] == ports[1] == ports[2] != ports[3] == ports[4] == ports[5] != ports[6]


def test_the_server_ends_the_connection_after_its_last_answer(served: Gunicorn) -> None:
    request = b"GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        sock.sendall(request * PER_CONNECTION)  # pipelined: answered in order
        answers = b""
        # The server closes its side after the last answer: reading ends (a timeout would raise).
        while chunk := sock.recv(65536):
            answers += chunk
    assert answers.count(b"HTTP/1.1 ") == PER_CONNECTION
    assert answers.lower().count(b"connection: close") == 1


def test_a_worker_with_two_connections_more_than_another_for_a_while_is_crowded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr("config.gunicorn.time.monotonic", lambda: clock[0])
    spread = ConnectionSpread()
    slots = [spread.assign() for _ in range(3)]
    assert slots == [0, 1, 2]
    spread.own = 0
    spread.report(2)

    assert not spread.crowded(2)  # the others hold none, but only just: a client may be reconnecting
    clock[0] += spread.SETTLE_S
    assert spread.crowded(2)  # still so: end this connection at its answer
    for own in (1, 2):
        spread.own = own
        spread.report(1)
    spread.own = 0
    assert not spread.crowded(2)  # 2-1-1: as even as four connections on three workers go
    spread.release(2)  # a worker that exited counts no more; its slot is given again
    assert not spread.crowded(2)
    assert spread.assign() == 2
    assert not spread.crowded(2)  # the new worker holds none: the wait starts again
    clock[0] += spread.SETTLE_S
    assert spread.crowded(2)


def test_without_a_slot_nothing_is_crowded() -> None:
    assert not ConnectionSpread().crowded(1000)


def _connections_per_worker(served: Gunicorn) -> list[int]:
    assert served.process is not None
    workers = psutil.Process(served.process.pid).children()
    return sorted(
        sum(1 for c in worker.net_connections("tcp") if c.status == "ESTABLISHED" and c.laddr.port == served.port)
        for worker in workers
    )


def test_connections_that_pile_up_on_one_worker_spread_over_the_others(
    django_db_setup: None, django_db_blocker: Any
) -> None:
    env = {"WEB_MAX_REQUESTS_PER_CONNECTION": "1000", "WEB_SPREAD_SETTLE_S": "0.02"}
    with django_db_blocker.unblock(), Gunicorn(env, workers=3) as served:
        clients = [http.client.HTTPConnection("127.0.0.1", served.port, timeout=10) for _ in range(6)]
        for client in clients:  # six connections at once: a worker's event loop may take them all
            client.connect()
        # A worker ends connections once crowded for WEB_SPREAD_SETTLE_S; with no load, the client
        # often reconnects to the worker that ended it (its event loop is the one awake): many tries.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for client in clients:
                client.request("GET", "/favicon.ico")  # reconnects by itself after a "connection: close"
                client.getresponse().read()
            counts = _connections_per_worker(served)
            if sum(counts) == 6 and counts[-1] - counts[0] <= 1:
                break
        for client in clients:
            client.close()

    assert counts == [2, 2, 2]
