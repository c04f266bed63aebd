"""ASGI entry point: what gunicorn serves (``config.gunicorn``: uvicorn workers).

``application`` is the Django *WSGI* application behind an asyncio front, so a slow client
never holds the thread that runs Django:

1. uvicorn reads the request line and headers on the event loop (``config.gunicorn``: a
   header deadline and size cap);
2. ``BufferedBody`` reads the whole body on the event loop, within ``WEB_BODY_TIMEOUT``
   seconds (408 after) and never more than the route's limit plus one byte (the app then
   answers its own 413, in the route's format);
3. only then does ``core.asgi.WsgiInThreads`` run Django, in a thread of a small pool, with the
   body already in memory: ``wsgi.input`` cannot block on the network. ``wsgi.input_terminated``
   is set (the body is complete), so ``core.middleware.ChunkedBodyMiddleware`` reads chunked
   bodies as it does under any server that decodes them. The thread hands back the whole answer
   (a streamed one it sends chunk by chunk through the loop): one hand-off a request.

The body is always read to the end or cut off before Django starts, so everything the
middleware stack does with ``request.body`` (the 413s, chunked and gzip-encoded bulk bodies)
is unchanged from a WSGI server.

``/mcp`` (and below) goes to the MCP server's streamable HTTP app instead (``McpRouter``,
``mcp_server.http``, docs/mcp.md), behind its own ``BufferedBody``; everything else to Django.

``django_asgi_application`` is Django's own ASGI handler, unused by ``make run``: it runs
sync views in one thread per process too, and bypasses the WSGI-only body handling in
``core.middleware``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.wsgi import get_wsgi_application

from core.asgi import WsgiInThreads, answer_json
from core.memory import freeze_startup_heap, tune_allocator

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Seconds a client has to send a request's whole body, once its headers are in.
BODY_TIMEOUT_S = float(os.environ.get("WEB_BODY_TIMEOUT", "60"))
# Threads running Django per worker process (each with its own database connection).
THREADS = int(os.environ.get("WEB_THREADS", "1"))


def body_limit(path: str) -> int:
    """The most body bytes the app may need to see for ``path``: past its limit it answers 413."""
    if path in settings.BULK_BODY_PATHS:
        return int(settings.INGEST_MAX_BYTES)
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or settings.INGEST_MAX_BYTES)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


class BufferedBody:
    """Read the request body whole, bounded in time and size, before calling ``app``."""

    def __init__(self, app: ASGIApp, timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["path"])
        length = _header(scope, b"content-length")
        declared = int(length) if length is not None and length.strip().isdigit() else None
        if declared is not None and declared > limit:
            # The app refuses it by Content-Length alone: read none of it.
            await self.app(scope, _replay([], receive), _closing(send))
            return
        chunks: list[bytes] = []
        try:
            # In this task (wait_for would start another for the read, at every request).
            async with asyncio.timeout(self.timeout_s):
                complete = await self._read(receive, chunks, limit)
        except TimeoutError:
            await _answer(send, 408, f"The request body did not arrive within {self.timeout_s:g} s.")
            return
        if complete is None:  # the client went away
            return
        await self.app(scope, _replay(chunks, receive), send if complete else _closing(send))

    @staticmethod
    async def _read(receive: Receive, chunks: list[bytes], limit: int) -> bool | None:
        """True: the whole body; False: cut off past ``limit``; None: the client disconnected."""
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = bytes(message.get("body", b""))
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
            if not message.get("more_body", False):
                return True
            if size > limit:
                return False


def _replay(chunks: Iterable[bytes], upstream: Receive) -> Receive:
    """The body read, in one message; after it, only the client's disconnect is news (an app that
    listens for it while it runs, as the MCP server's does, would drop its answer on an early
    ``http.disconnect``)."""
    body = b"".join(chunks)
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        while True:  # the rest of a body cut off past its limit is discarded
            message = await upstream()
            if message["type"] == "http.disconnect":
                return message

    return receive


def _closing(send: Send) -> Send:
    """``send`` with ``Connection: close`` on the answer: the rest of the body is never read."""

    async def closing_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return closing_send


async def _answer(send: Send, status: int, detail: str) -> None:
    await answer_json(send, status, detail, close=True)


class McpRouter:
    """``/mcp`` to the MCP server's streamable HTTP app (``mcp_server.http``), everything else to
    Django. The MCP app gets the same body deadline and size cap: its body is read whole first."""

    def __init__(self, django: ASGIApp, mcp: ASGIApp) -> None:
        self.django = django
        self.mcp = mcp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            await self.mcp(scope, receive, send)
            return
        await self.django(scope, receive, send)


MCP_PATH = "/mcp"


def build_application(threads: int = THREADS, body_timeout_s: float = BODY_TIMEOUT_S) -> ASGIApp:
    wsgi = WsgiInThreads(get_wsgi_application(), threads)
    # The URLconf (and with it every view module) is imported by the first request otherwise:
    # ~0.15 s of CPU that request would wait for, in each worker. Loaded as the worker starts.
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 (the property imports the URL modules)
    # Imported once Django is set up (get_wsgi_application): the MCP tools use its models.
    from core.security import AsgiSecurityHeaders
    from mcp_server.http import McpHttpApp

    mcp = AsgiSecurityHeaders(BufferedBody(McpHttpApp(), body_timeout_s))  # type: ignore[arg-type]
    return McpRouter(BufferedBody(wsgi, body_timeout_s), mcp)  # type: ignore[arg-type]


# Large buffers mapped and unmapped whole, so a bulk request's memory goes back (core.memory).
tune_allocator()
application = build_application()
# What the worker loaded stays for its life: kept out of the cyclic collector's full passes.
freeze_startup_heap()


def django_asgi_application() -> Any:
    return get_asgi_application()
