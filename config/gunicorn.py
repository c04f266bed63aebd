"""gunicorn settings, the one definition of the web server for ``make run``, the tests
(``tests.servers.Gunicorn``) and the benchmarks (``bench/bench_common.py``): all of them
run ``command()``, i.e. ``gunicorn config.asgi:application -c python:config.gunicorn``.

* gunicorn is the process manager (a master restarts a worker that dies; workers die with
  their master, even when it is killed outright: ``post_fork``, ``config.process``).
* Each worker is a uvicorn event loop (``Worker``) in front of Django's WSGI application
  (``config.asgi``): slow clients wait on the event loop, never in the thread that runs
  Django. A request's line and headers must arrive within ``WEB_HEADER_TIMEOUT`` seconds
  (10) and fit in 64 KiB (else 408 / 431 and the connection is closed); its body within
  ``WEB_BODY_TIMEOUT`` seconds (60, ``config.asgi``).
* A kept-alive connection is closed after ``WEB_MAX_REQUESTS_PER_CONNECTION`` requests (25; its
  last answer says ``connection: close``), and sooner when its worker has held two connections
  more than the least busy one for a while (``ConnectionSpread``), so that long-lived connections spread over the
  workers (``GuardedHttpToolsProtocol``).
* SIGTERM stops gracefully: no new connections, requests in progress finish (at most
  ``graceful_timeout``), idle and half-sent connections are closed.
"""

from __future__ import annotations

import mmap
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker

from config.env import env_networks
from config.process import die_with_parent

APP = "config.asgi:application"
HEADER_TIMEOUT_S = float(os.environ.get("WEB_HEADER_TIMEOUT", "10"))
MAX_HEADER_BYTES = 64 * 1024
# Requests answered on one kept-alive connection before it is closed (nginx's keepalive_requests,
# Envoy's max_requests_per_connection): see GuardedHttpToolsProtocol.
MAX_REQUESTS_PER_CONNECTION = int(os.environ.get("WEB_MAX_REQUESTS_PER_CONNECTION", "25"))
# How long a worker holds two connections more than the least busy one before it ends them (seconds):
# see ConnectionSpread.
SPREAD_SETTLE_S = float(os.environ.get("WEB_SPREAD_SETTLE_S", "0.25"))

# The proxies whose X-Forwarded-For names the client (TRUSTED_PROXIES, comma-separated addresses
# and networks; none by default). uvicorn-worker would otherwise pass gunicorn's default,
# 127.0.0.1, and believe any local client's header (config/settings.py reads the same variable).
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")

# gunicorn settings (module-level names gunicorn knows; the command line may override them).
worker_class = "config.gunicorn.Worker"
# A kept-alive connection with no new request is closed after this many seconds.
keepalive = 5
graceful_timeout = 30
# A worker whose event loop has not reported for this long is killed and replaced.
timeout = 60


class ConnectionSpread:
    """How many connections each worker holds, in memory the master shares with the workers it
    forks (an anonymous shared mapping, one integer a slot: 0 free, else the count plus one).

    The master gives each worker a slot before it forks it (``pre_fork``) and takes it back when
    the worker has exited (``child_exit``); the worker writes its own count at each connection
    made or lost and reads the others' (a few integers, no lock: each slot has one writer).
    ``crowded``: this worker has held two connections more than the least busy one for
    ``SETTLE_S`` seconds (``WEB_SPREAD_SETTLE_S``, 0.25), so the answer it is about to give should
    end its connection and let the client reconnect to whichever worker accepts first. Without a
    slot (a server not started by this gunicorn configuration) nothing is ever crowded."""

    SLOTS = 64
    SETTLE_S = SPREAD_SETTLE_S

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, 4 * self.SLOTS)
        self._slots = memoryview(self._memory).cast("i")
        self.own: int | None = None
        self._since: float | None = None

    # In the master.
    def assign(self) -> int | None:
        for slot in range(self.SLOTS):
            if not self._slots[slot]:
                self._slots[slot] = 1
                return slot
        return None  # more workers than slots: the others are simply not counted

    def release(self, slot: int | None) -> None:
        if slot is not None:
            self._slots[slot] = 0

    # In a worker.
    def report(self, connections: int) -> None:
        if self.own is not None:
            self._slots[self.own] = connections + 1

    def crowded(self, connections: int) -> bool:
        if self.own is None:
            return False
        if connections < min(filter(None, self._slots.tolist())) - 1 + 2:
            self._since = None
            return False
        # Only once it has lasted: a client reconnecting (its 25th answer) leaves the counts uneven
        # for a moment, and ending connections then would only make more reconnections.
        now = time.monotonic()
        if self._since is None:
            self._since = now
        return now - self._since >= self.SETTLE_S


SPREAD = ConnectionSpread()


def pre_fork(server: Any, worker: Any) -> None:
    worker.spread_slot = SPREAD.assign()


def post_fork(server: Any, worker: Any) -> None:
    die_with_parent()
    SPREAD.own = worker.spread_slot


def child_exit(server: Any, worker: Any) -> None:
    SPREAD.release(getattr(worker, "spread_slot", None))


def command(
    port: int | str,
    workers: int | str,
    *,
    access_log: bool = True,
    log_level: str | None = None,
    gunicorn: Path | None = None,
) -> list[str]:
    """The web server's command line: ``config.asgi`` on 127.0.0.1:``port``."""
    binary = gunicorn or Path(sys.executable).with_name("gunicorn")
    args = [str(binary), APP, "--config", "python:config.gunicorn"]
    args += ["--bind", f"127.0.0.1:{port}", "--workers", str(workers)]
    if access_log:
        args += ["--access-logfile", "-"]
    if log_level:
        args += ["--log-level", log_level]
    return args


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with a deadline and a size cap on each request's line and
    headers (uvicorn has neither: a client that never finishes its headers would keep its
    connection open for ever), and a bound on the requests of one kept-alive connection.

    That bound spreads the load. The workers share one listening socket, and a worker's event
    loop (uvloop) accepts every connection waiting when it wakes: a handful of clients that
    connect at once (an OpenTelemetry collector's or SDK exporters' few long-lived connections)
    can all land on one worker, and stay there, one core busy while the others idle (measured:
    2,223 spans/s with 4 connections on one of 3 workers, 2,976-3,405 when spread). After
    ``max_requests_per_connection`` requests the answer says ``connection: close``; the client
    reconnects, and the first worker to accept is one whose event loop is free, not one busy
    in Django. A reconnection per 25 requests costs a loopback handshake, nothing measurable.

    A connection on a worker that has held two more than the least busy one for a quarter of a
    second (``ConnectionSpread``) is ended the same way at its next answer, without waiting for its
    25th: four clients spread 2-1-1
    over three workers made 4,726-5,268 spans/s of large OTLP requests, all four on one worker
    3,188, and a reconnection lands on an idle worker most often (its event loop wakes first)."""

    header_timeout_s = HEADER_TIMEOUT_S
    max_header_bytes = MAX_HEADER_BYTES
    max_requests_per_connection = MAX_REQUESTS_PER_CONNECTION

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        SPREAD.report(len(self.connections))
        self._header_timer: Any = None
        self._header_bytes = 0
        self._requests = 0
        self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_bytes = 0
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        reading_headers = self._header_timer is not None
        if reading_headers:
            self._header_bytes += len(data)
        super().data_received(data)
        if reading_headers and self._header_timer is not None and self._header_bytes > self.max_header_bytes:
            self._refuse(431, "Request Header Fields Too Large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()
        self._requests += 1
        last = self._requests >= self.max_requests_per_connection or SPREAD.crowded(len(self.connections))
        if last and self.cycle is not None:
            self.cycle.keep_alive = False  # this answer says "connection: close", then the connection ends

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)
        SPREAD.report(len(self.connections))

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is None or self.cycle.response_complete:
            self._refuse(408, "Request Timeout")

    def _refuse(self, status: int, reason: str) -> None:
        self._disarm_header_timer()
        if self.transport.is_closing():
            return
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % (status, reason.encode())
        )
        self.transport.close()


class Worker(UvicornWorker):  # type: ignore[misc]  # uvicorn-worker ships no type hints
    """uvicorn-worker's gunicorn worker with ``GuardedHttpToolsProtocol``; no websockets,
    no lifespan (Django has none)."""

    CONFIG_KWARGS: dict[str, Any] = {
        "loop": "auto",
        "http": GuardedHttpToolsProtocol,
        "ws": "none",
        "lifespan": "off",
        # Proxy headers only from TRUSTED_PROXIES: with none, X-Forwarded-For is never read.
        "proxy_headers": bool(TRUSTED_PROXIES),
        "forwarded_allow_ips": ",".join(TRUSTED_PROXIES),
    }

    def init_signals(self) -> None:
        super().init_signals()
        # gunicorn stops a worker with SIGTERM (a Ctrl-C also sends SIGINT) and expects it to exit 0
        # once it has stopped. uvicorn's server stops gracefully on either, then puts back the handler
        # it found and raises the signal again; with uvicorn-worker's SIG_DFL there, every clean stop
        # killed the worker by the signal and the arbiter logged "[ERROR] Worker (pid:N) was sent
        # SIGTERM!". A worker crash or gunicorn's SIGKILL of a stuck worker is still reported.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.exit_stopped)

    def exit_stopped(self, signum: int, frame: FrameType | None) -> None:
        """Exit 0: the signal asked for a stop (before the server ran, or raised again once it stopped)."""
        sys.exit(0)
