"""Streamable HTTP under ``/mcp`` of the web server (``config.asgi`` routes it here).

* Authentication first: ``Authorization: Bearer <token>`` is checked as every API route checks
  it (``resources.authenticate``) before the MCP transport sees the request; a missing or
  invalid token is a 401 in the API's error shape. Each tool call then carries the same
  header into the route it runs (scopes, ownership, rate limits are the route's).
* Stateless, JSON responses: each POST is answered on its own, no session lives in a
  worker's memory, so any of gunicorn's workers can serve any request.
* The session manager's task group is started on the first request (the workers run with
  the ASGI lifespan off) and lives as long as the worker's event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework import exceptions

from core.asgi import answer_json
from mcp_server.resources import authenticate
from mcp_server.server import build_server

PATH = "/mcp"


def bearer_of(headers: Any) -> str | None:
    """The secret of an ``Authorization: Bearer <token>`` header, or None."""
    header = headers.get("authorization", "") if headers is not None else ""
    scheme, _, raw = str(header).partition(" ")
    raw = raw.strip()
    return raw if scheme.lower() == "bearer" and raw else None


def _token_of(ctx: ServerRequestContext[Any]) -> str | None:
    request = ctx.request
    return bearer_of(getattr(request, "headers", None))


def _client_of(ctx: ServerRequestContext[Any]) -> str:
    client = getattr(ctx.request, "client", None)
    return str(client.host) if client is not None and client.host else "127.0.0.1"


class McpHttpApp:
    def __init__(self) -> None:
        self.manager = StreamableHTTPSessionManager(
            app=build_server(_token_of, _client_of), json_response=True, stateless=True
        )
        self._running: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps only weak references to tasks

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope.get("method") == "GET":
            # Stateless, JSON answers: no server-initiated stream to open (the streamable HTTP
            # transport's answer when a server offers none), rather than one that never ends.
            await answer_json(
                send, 405, "GET is not offered: POST JSON-RPC requests", close=False, headers=[(b"allow", b"POST")]
            )
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope.get("headers", ())}
        raw = bearer_of(headers)
        if raw is None:
            await _unauthorized(send, "Authentication credentials were not provided.")
            return
        try:
            await sync_to_async(authenticate, thread_sensitive=True)(raw)
        except exceptions.AuthenticationFailed as exc:
            await _unauthorized(send, str(exc.detail))
            return
        await self._start()
        await self.manager.handle_request(scope, receive, send)

    async def _start(self) -> None:
        if self._running is None:
            self._running = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._running))
        await self._running.wait()

    async def _run(self, running: asyncio.Event) -> None:
        async with self.manager.run():
            running.set()
            await asyncio.Event().wait()  # until the worker's loop stops


async def _unauthorized(send: Any, detail: str) -> None:
    await answer_json(send, 401, detail, close=False, headers=[(b"www-authenticate", b'Bearer realm="api"')])
