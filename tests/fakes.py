"""Small stand-ins shared by test modules (the fixtures that hand them out are in conftest)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from django.contrib.auth.hashers import PBKDF2PasswordHasher


@dataclass
class Sleeps:
    """Records the back-off waits of a retrying HTTP client instead of sleeping."""

    waits: list[float] = field(default_factory=list)

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@dataclass
class Received:
    """One request the fake server was sent."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    body: Any = None  # bytes are sent as they are; anything else as JSON
    headers: dict[str, str] = field(default_factory=dict)
    before: Callable[[Received], None] | None = None  # runs in the server thread before answering


Fallback = Reply | Callable[[Received], Reply]


@dataclass
class FakeServer:
    """A loopback HTTP server that stands in for a vendor or a webhook in one test.

    Records every request in ``received``; answers from ``replies`` in order, then with
    ``fallback`` (a reply, or a function of the request). An exception raised by a reply's
    ``before`` lands in ``errors`` for the test to check, not in the server thread's log.
    ``url`` is ``http://127.0.0.1:<free port>`` plus the ``path`` given to ``serve_fake``,
    which runs it.
    """

    url: str = ""
    received: list[Received] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    fallback: Fallback = field(default_factory=lambda: Reply(500, {"error": "unscripted"}))
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def script(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def answer(self, received: Received) -> Reply:
        with self.lock:
            self.received.append(received)
            if self.replies:
                return self.replies.pop(0)
            fallback = self.fallback
        return fallback if isinstance(fallback, Reply) else fallback(received)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A slow-server test writes to a socket the client already gave up on.
        pass


F = TypeVar("F", bound=FakeServer)


def serve_fake(state: F, path: str = "") -> Iterator[F]:
    """Run ``state`` on 127.0.0.1 (a free port) until the generator is closed; stop it cleanly.

    Use it as a fixture body: ``yield from serve_fake(FakeServer(), "/hook")``.
    """

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            headers = {name.lower(): value for name, value in self.headers.items()}
            received = Received(self.command, self.path, headers, self.rfile.read(length))
            reply = state.answer(received)
            if reply.before is not None:
                try:
                    reply.before(received)
                except BaseException as exc:  # surfaced by the test, not lost in the server thread
                    state.errors.append(exc)
            payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_POST = do_GET = do_PUT = do_PATCH = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    with _serving(Handler) as base:
        state.url = base + path
        yield state


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 (a free port) in a thread; yields the base URL."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass
class DroppingProxy:
    """A loopback HTTP proxy to ``upstream`` that, for the first ``drop`` requests, lets the
    upstream answer (so the server commits) and then closes the client's connection without
    relaying it: the client sees a lost answer and must retry."""

    upstream: str
    drop: int = 0
    url: str = ""
    forwarded: int = 0
    dropped: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def serve_dropping_proxy(state: DroppingProxy) -> Iterator[DroppingProxy]:
    import http.client
    import socket
    from urllib.parse import urlsplit

    target = urlsplit(state.upstream)

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name: value for name, value in self.headers.items() if name.lower() != "host"}
            upstream = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port or 80, timeout=30)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                payload = answer.read()
            finally:
                upstream.close()
            with state.lock:
                state.forwarded += 1
                drop = state.dropped < state.drop
                if drop:
                    state.dropped += 1
            if drop:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in {"content-length", "connection", "transfer-encoding"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_POST = do_GET = do_PATCH = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with _serving(Handler) as base:
        state.url = base
        yield state


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's default hasher at one iteration: the suite hashes and checks hundreds of
    passwords (ten failed logins per lockout test). Its hashes are ordinary ``pbkdf2_sha256``
    ones, which the real hasher of a server started in a subprocess verifies too (the
    iteration count is part of the hash)."""

    iterations = 1
