"""The research loop's six calls, for agents and dispatchers (a ``reasoning.admin`` token).

All async and fail-soft: a transport error or a non-2xx answer is logged (rate-limited) and
returns ``None``, so an agent never blocks or fails on the queue. See the server's
``docs/research-loop.md`` for the routes' contracts.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import httpx

from reasoning_flow_sdk._log import log_limited

PREFIX = "/admin/v1/reasoning"
_ID = re.compile(r"/[0-9a-fA-F-]{32,36}(?=/|$)")


def _route(path: str) -> str:
    """The path without ids: what the log's rate limit keys on (ids would grow its memory)."""
    return _ID.sub("/{id}", path)


class ResearchLoopClient:
    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        url = base_url or os.environ.get("REASONING_FLOW_URL") or ""
        self.base_url = url.rstrip("/")
        self.token = token or os.environ.get("REASONING_FLOW_ADMIN_TOKEN") or os.environ.get("REASONING_FLOW_TOKEN")
        self.timeout = timeout
        self._transport = transport

    async def _call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        if not self.base_url or not self.token:
            log_limited(logging.WARNING, "research-config", "research loop: REASONING_FLOW_URL or a token is not set")
            return None
        try:
            async with httpx.AsyncClient(
                base_url=self.base_url,
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=self.timeout,
                transport=self._transport,
            ) as client:
                response = await client.request(method, PREFIX + path, json=body, params=params)
        except Exception as error:
            log_limited(
                logging.WARNING,
                f"research-{method}-{_route(path)}",
                "research loop %s %s failed: %s",
                method,
                path,
                type(error).__name__,
            )
            return None
        if not 200 <= response.status_code < 300:
            log_limited(
                logging.WARNING,
                f"research-{method}-{_route(path)}-{response.status_code}",
                "research loop %s %s → %d: %s",
                method,
                path,
                response.status_code,
                response.text[:300],
            )
            return None
        try:
            return response.json()
        except ValueError:
            return None

    async def enqueue_deeper_research(
        self, trigger_type: str, question: str, *, trigger_ref: str = "", source: str | None = None, **fields: Any
    ) -> dict[str, Any] | None:
        """``POST …/research/deeper-request``: add a question to the backlog."""
        body: dict[str, Any] = {"trigger_type": trigger_type, "question": question, **fields}
        if trigger_ref:
            body["trigger_ref"] = trigger_ref
        if source:
            body["source"] = source
        return await self._call("POST", "/research/deeper-request", body)  # type: ignore[no-any-return]

    async def pull_next_research_request(self, trigger_type: str | None = None) -> dict[str, Any] | None:
        """``POST …/research/backlog/next``: the oldest pending request, now dispatched; None when
        there is none, or on a failure (both mean: nothing to do now, ask again later)."""
        answer = await self._call(
            "POST", "/research/backlog/next", {"trigger_type": trigger_type} if trigger_type else {}
        )
        return answer.get("request") if isinstance(answer, dict) else None

    async def complete_research_request(
        self, request_id: str, *, flow_id: str | None = None, error: str | None = None
    ) -> dict[str, Any] | None:
        """``POST …/research/backlog/{id}/complete`` with the flow that answered, or an error label."""
        body: dict[str, Any] = {}
        if flow_id:
            body["flow_id"] = str(flow_id)
        if error:
            body["error"] = error
        return await self._call("POST", f"/research/backlog/{request_id}/complete", body)  # type: ignore[no-any-return]

    async def mark_claim_for_review(self, claim_id: str, **fields: Any) -> dict[str, Any] | None:
        """``POST …/claims-pending-review`` (idempotent on ``claim_id``)."""
        return await self._call("POST", "/claims-pending-review", {"claim_id": claim_id, **fields})  # type: ignore[no-any-return]

    async def list_claims_pending_review(self, limit: int | None = None) -> dict[str, Any] | None:
        """``GET …/claims-pending-review``: pending entries, their count, recent resolutions."""
        params = {"limit": limit} if limit is not None else None
        return await self._call("GET", "/claims-pending-review", params=params)  # type: ignore[no-any-return]

    async def resolve_claim_review(
        self, entry_id: str, status: str = "resolved", note: str | None = None
    ) -> dict[str, Any] | None:
        """``PATCH …/claims-pending-review/{id}`` with ``resolved`` or ``dismissed``."""
        body: dict[str, Any] = {"status": status}
        if note:
            body["note"] = note
        return await self._call("PATCH", f"/claims-pending-review/{entry_id}", body)  # type: ignore[no-any-return]
