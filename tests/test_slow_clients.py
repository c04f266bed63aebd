"""Slow clients cannot starve the web server (issue 18), served as ``make run`` serves it
(``config.gunicorn``), with the least capacity there is: one worker, one Django thread.

Under gunicorn's sync workers one connection that never finished its headers held a worker
until gunicorn killed it, 30 s later; two froze a two-worker server. Here 50 slow clients
(half dribbling their headers, half dribbling a body) stay connected while ordinary requests,
reads and writes, are answered; then the header and body deadlines close every one of them.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from reasoning.models import ReasoningFlow
from tests.faults_support import Figures
from tests.servers import Gunicorn, Server

pytestmark = pytest.mark.django_db(transaction=True)

# Deadlines for this server (the defaults are 10 s and 60 s): long enough for the ordinary
# requests below to run while every slow client is still connected, short enough to see them end.
HEADER_TIMEOUT_S = 6
BODY_TIMEOUT_S = 6
SLOW_CLIENTS = 50
# An ordinary request that takes longer than this is one the slow clients held up.
PROMPT_S = 4.0
FLOWS = "/api/reasoning/flows"


@pytest.fixture(scope="module")
def served(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    log = tmp_path_factory.mktemp("slow") / "server.log"
    env = {"WEB_HEADER_TIMEOUT": str(HEADER_TIMEOUT_S), "WEB_BODY_TIMEOUT": str(BODY_TIMEOUT_S), "WEB_THREADS": "1"}
    with django_db_blocker.unblock(), Gunicorn(env, workers=1, log=log) as gunicorn:
        yield gunicorn


@pytest.fixture
def agent_headers(make_token: Callable[..., str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_token('reasoning.write')}", "Content-Type": "application/json"}


def server_of(gunicorn: Gunicorn) -> Server:
    return Server("127.0.0.1", gunicorn.port)


class SlowClient:
    """A connection that sends its request one byte at a time, and never finishes it."""

    def __init__(self, port: int, start: bytes, drip: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.sendall(start)
        self.drip = drip
        self.answer = b""
        self.closed_at: float | None = None

    def send_more(self) -> None:
        if self.closed_at is None:
            try:
                self.sock.send(self.drip)
            except OSError:
                self.read()

    def read(self) -> None:
        """Whatever the server sent; a closed connection is noted."""
        if self.closed_at is not None:
            return
        try:
            while select.select([self.sock], [], [], 0)[0]:
                data = self.sock.recv(65536)
                if not data:
                    self.closed_at = time.monotonic()
                    return
                self.answer += data
        except OSError:
            self.closed_at = time.monotonic()

    def status(self) -> int | None:
        line = self.answer.split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None


def slow_clients(port: int, token: str) -> list[SlowClient]:
    headers_forever = b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    body_forever = (
        f"POST {FLOWS} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    ).encode() + b'{"trigger_type": "'
    half = SLOW_CLIENTS // 2
    return [SlowClient(port, headers_forever, b"a") for _ in range(half)] + [
        SlowClient(port, body_forever, b"b") for _ in range(SLOW_CLIENTS - half)
    ]


def timed(request: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    answer = request()
    return answer, time.monotonic() - started


def test_fifty_slow_clients_do_not_hold_up_other_requests(
    served: Gunicorn, agent_headers: dict[str, str], make_token: Callable[..., str]
) -> None:
    server = server_of(served)
    # Warm up (the worker imports most of the code on its first request).
    assert server.request("GET", "/accounts/login/").status == 200
    clients = slow_clients(served.port, make_token("reasoning.write"))
    stop = threading.Event()

    def dribble() -> None:
        while not stop.wait(0.3):
            for client in clients:
                client.send_more()

    dripper = threading.Thread(target=dribble, daemon=True)
    dripper.start()
    opened = time.monotonic()
    try:
        durations = []
        for n in range(5):
            body = json.dumps({"trigger_type": "slow_client_probe", "agent": "probe", "trace_id": f"t-{n}"}).encode()
            created, took = timed(partial(server.request, "POST", FLOWS, body, agent_headers))
            assert created.status == 201, created.body
            page, took_page = timed(lambda: server.request("GET", "/accounts/login/"))
            assert page.status == 200
            durations += [took, took_page]
        for client in clients:
            client.read()
        # Every slow client was still connected, unanswered, while the requests above ran.
        assert [c for c in clients if c.closed_at is not None or c.answer] == []
        assert max(durations) < PROMPT_S, durations
        assert time.monotonic() - opened < HEADER_TIMEOUT_S, durations
        assert ReasoningFlow.objects.filter(trigger_type="slow_client_probe").count() == 5

        # Then each deadline ends its clients: 408 and the connection closed.
        deadline = opened + max(HEADER_TIMEOUT_S, BODY_TIMEOUT_S) + 10
        while time.monotonic() < deadline and any(c.closed_at is None for c in clients):
            time.sleep(0.2)
            for client in clients:
                client.read()
    finally:
        stop.set()
        dripper.join()
        for client in clients:
            client.sock.close()
    assert [c.status() for c in clients] == [408] * SLOW_CLIENTS
    assert all(c.closed_at is not None for c in clients)
    # ... within their deadline (plus the time it took to open them all and a margin).
    assert max(c.closed_at or 0 for c in clients) - opened < max(HEADER_TIMEOUT_S, BODY_TIMEOUT_S) + 5
    assert b'"detail"' in clients[-1].answer  # the body deadline answers JSON
    # Nothing was created from the cut-off bodies.
    assert ReasoningFlow.objects.exclude(trigger_type="slow_client_probe").count() == 0
    # A row of make faults' table: the ordinary writes made while the slow clients held on.
    figures = Figures("slow_clients_50")
    figures["slowest_ordinary_request_s"] = max(durations)
    stored = ReasoningFlow.objects.filter(trigger_type="slow_client_probe").count()
    figures.row.update(sent=5, acknowledged=5, stored=stored, lost=max(5 - stored, 0), duplicated=max(stored - 5, 0))
    figures.row.update({"503": 0, "other_5xx": 0})
    figures.report()


def test_headers_past_the_size_cap_are_refused(served: Gunicorn) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(b"GET /accounts/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        try:
            for _ in range(70):
                sock.sendall(b"X-Filler: " + b"f" * 1000 + b"\r\n")
        except OSError:
            pass  # closed while sending: the answer is already there
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(
    served: Gunicorn, agent_headers: dict[str, str]
) -> None:
    head = f"POST {FLOWS} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {64 * 1_048_576}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in agent_headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(head.encode())
        sock.sendall(b'{"trigger_type": ')
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 413 "), answer
    assert b"connection: close" in answer.lower()
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"detail": "Request body is too large."}


def test_sigterm_stops_gracefully_with_slow_clients_connected(
    django_db_blocker: Any, tmp_path: Path, agent_headers: dict[str, str]
) -> None:
    log = tmp_path / "server.log"
    gunicorn = Gunicorn({"WEB_HEADER_TIMEOUT": "30"}, workers=2, log=log)
    with django_db_blocker.unblock():
        server = gunicorn.start()
    try:
        assert server.request("GET", "/accounts/login/").status == 200
        stalled = [SlowClient(gunicorn.port, b"GET /accounts/login/ HTTP/1.1\r\nHost: x\r\n", b"") for _ in range(5)]
        assert gunicorn.process is not None
        stopping = time.monotonic()
        gunicorn.process.send_signal(signal.SIGTERM)
        assert gunicorn.process.wait(timeout=20) == 0
        # The half-sent requests did not keep the server up until graceful_timeout (30 s).
        assert time.monotonic() - stopping < 15
        for client in stalled:
            client.sock.close()
    finally:
        gunicorn.stop()
    # The access log has the request that was answered.
    assert [line for line in gunicorn.lines('"GET /accounts/login/ HTTP/1.1" 200')] != []
