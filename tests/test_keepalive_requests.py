"""A kept-alive connection is closed after ``WEB_MAX_REQUESTS_PER_CONNECTION`` requests
(``config.gunicorn.GuardedHttpToolsProtocol``), served as ``make run`` serves it: the answer to the
last request says ``connection: close`` and the server ends the connection, so a client's next
request opens a new one, which any worker may accept (long-lived connections spread over the
workers instead of staying where they first landed)."""

from __future__ import annotations

import http.client
import socket
from collections.abc import Iterator
from typing import Any

import pytest

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
