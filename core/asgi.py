"""ASGI plumbing shared by the web front (config.asgi) and the MCP app (mcp_server.http)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


async def answer_json(
    send: Any, status: int, detail: str, *, close: bool, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """Answer ``{"detail": detail}`` with ``status`` (never cached; ``close``: and end the connection)."""
    body = json.dumps({"detail": detail}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    head += [(b"connection", b"close")] if close else []
    head += [*headers, (b"cache-control", b"no-store")]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body, "more_body": False})
