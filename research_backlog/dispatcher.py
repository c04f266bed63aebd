"""Hand a pulled research request to whatever runs research.

``WebhookDispatcher`` (``RESEARCH_DISPATCHER_URL``) POSTs the request as JSON::

    POST <url>
    Content-Type: application/json
    Idempotency-Key: <request id>.<retry_count>     (same for HTTP retries of one dispatch)
    X-RFT-Timestamp: <unix seconds>
    X-RFT-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" keyed with RESEARCH_DISPATCHER_SECRET>

    {"id": ..., "trigger_type": ..., "trigger_ref": ..., "question": ..., "reason": ...,
     "source": ..., "retry_count": ..., "dispatched_from_backlog": true, "created_at": ...,
     "complete_path": "/admin/v1/reasoning/research/backlog/<id>/complete"}

The receiver verifies the signature (and rejects stale timestamps), runs the research
with ``dispatched_from_backlog`` on the flow it opens, and answers:

- ``200`` ``{"flow_id": "<uuid>"}``: done; the consumer completes the row with that flow;
- ``200`` ``{"error": "<label>"}``: gave up; the row becomes ``failed_voluntary``;
- ``202``: accepted, still running; the receiver calls ``complete_path`` itself later
  (the stale sweep takes the row back if it never does).

429, 5xx and connection errors are retried with backoff (``Retry-After`` honoured); when
the attempts run out the row fails with ``dispatcher_unreachable`` or
``dispatcher_http_<status>``. Another 4xx fails it with ``dispatcher_http_<status>``.

Nothing is sent unless the processor registry allows it (``processors``, key
``research_dispatcher``); a refusal fails the row with ``processor_not_active``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.urls import reverse

from core.http import RetriesExhausted, RetryPolicy, RetryWaitTooLong
from core.labels import LABEL_PATTERN
from processors.catalogue import RESEARCH_DISPATCHER, Category
from processors.services import PROCESSOR_NOT_ACTIVE, ProcessorNotActive, check_outbound
from research_backlog.models import ResearchRequest

SIGNATURE_HEADER = "X-RFT-Signature"
TIMESTAMP_HEADER = "X-RFT-Timestamp"
NO_DISPATCHER = "no_dispatcher_configured"
_LABEL = re.compile(LABEL_PATTERN)


@dataclass(frozen=True)
class DispatchResult:
    flow_id: uuid.UUID | None = None
    error: str | None = None
    accepted: bool = False  # 202: the dispatcher completes the row itself later


class Dispatcher(Protocol):
    name: str

    def dispatch(self, request: ResearchRequest) -> DispatchResult: ...


class NoDispatcher:
    """What runs when no dispatcher is configured: an honest, visible failure."""

    name = "none"

    def dispatch(self, request: ResearchRequest) -> DispatchResult:
        return DispatchResult(error=NO_DISPATCHER)


def request_document(request: ResearchRequest) -> dict[str, Any]:
    return {
        "id": str(request.pk),
        "trigger_type": request.trigger_type,
        "trigger_ref": request.trigger_ref,
        "question": request.question,
        "reason": request.reason,
        "source": request.source,
        "retry_count": request.retry_count,
        "dispatched_from_backlog": request.dispatched_from_backlog,
        "created_at": request.created_at,
        "complete_path": reverse("research-backlog-complete", args=[request.pk]),
    }


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class WebhookDispatcher:
    name = "webhook"

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        timeout: float = 30.0,
        max_attempts: int = 3,
        backoff_base: float = 1.0,
        max_retry_wait: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not secret:
            raise ValueError("a webhook dispatcher needs a signing secret")
        self._url = url
        self._secret = secret
        self._clock = clock
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)))
        self._retry = RetryPolicy(
            "research dispatcher",
            max_attempts=max_attempts,
            backoff_base=backoff_base,
            max_retry_wait=max_retry_wait,
            sleep=sleep,
        )

    def close(self) -> None:
        self._http.close()

    def _post(self, body: bytes, idempotency_key: str) -> httpx.Response:
        # Signed per attempt: a retry carries a fresh timestamp the receiver will accept.
        timestamp = str(int(self._clock()))
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": idempotency_key,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(self._secret, timestamp, body),
        }
        return self._http.post(self._url, content=body, headers=headers)

    def dispatch(self, request: ResearchRequest) -> DispatchResult:
        try:
            check_outbound(RESEARCH_DISPATCHER, category=Category.RESEARCH_QUESTION, count=1)
        except ProcessorNotActive:
            return DispatchResult(error=PROCESSOR_NOT_ACTIVE)
        body = json.dumps(request_document(request), cls=DjangoJSONEncoder, separators=(",", ":")).encode()
        key = f"{request.pk}.{request.retry_count}"
        try:
            response = self._retry.send(lambda: self._post(body, key))
        except (RetriesExhausted, RetryWaitTooLong) as exc:
            last = exc.last_response
            return DispatchResult(
                error="dispatcher_unreachable" if last is None else f"dispatcher_http_{last.status_code}"
            )
        if response.status_code == 202:
            return DispatchResult(accepted=True)
        if not response.is_success:
            return DispatchResult(error=f"dispatcher_http_{response.status_code}")
        return _parse(response)


def _parse(response: httpx.Response) -> DispatchResult:
    try:
        answer = response.json()
    except ValueError:
        return DispatchResult(error="dispatcher_bad_response")
    if not isinstance(answer, dict):
        return DispatchResult(error="dispatcher_bad_response")
    error = answer.get("error")
    if error is not None:
        # A label keeps the dispatcher's free text out of the row and the audit trail.
        if isinstance(error, str) and len(error) <= 200 and _LABEL.match(error):
            return DispatchResult(error=error)
        return DispatchResult(error="dispatcher_error")
    try:
        return DispatchResult(flow_id=uuid.UUID(str(answer["flow_id"])))
    except (KeyError, ValueError):
        return DispatchResult(error="dispatcher_bad_response")


def build_dispatcher() -> Dispatcher:
    """The dispatcher the settings name: the webhook when RESEARCH_DISPATCHER_URL is set."""
    if not settings.RESEARCH_DISPATCHER_URL:
        return NoDispatcher()
    return WebhookDispatcher(
        settings.RESEARCH_DISPATCHER_URL,
        settings.RESEARCH_DISPATCHER_SECRET,
        timeout=settings.RESEARCH_DISPATCHER_TIMEOUT_S,
        max_attempts=settings.RESEARCH_DISPATCHER_MAX_ATTEMPTS,
    )
