"""Retries for outbound HTTP calls (embedding vendors, the research dispatcher).

``RetryPolicy.send`` makes one request up to ``max_attempts`` times:

1. A 2xx response, or a 4xx other than 429, is returned at once (the caller decides
   what a 4xx means).
2. 429, 5xx and transport errors are retried, waiting ``Retry-After`` when the server
   sends it, else ``backoff_base * 2**(n-1)`` with equal jitter.
3. A wait longer than ``max_retry_wait`` raises ``RetryWaitTooLong`` at once; running
   out of attempts raises ``RetriesExhausted``. Both carry the last failure as text.
"""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

logger = logging.getLogger(__name__)


class RetryError(Exception):
    def __init__(self, failure: str, *, last_response: httpx.Response | None) -> None:
        super().__init__(failure)
        self.failure = failure
        self.last_response = last_response


class RetriesExhausted(RetryError):
    pass


class RetryWaitTooLong(RetryError):
    def __init__(self, failure: str, *, delay: float, last_response: httpx.Response | None) -> None:
        super().__init__(failure, last_response=last_response)
        self.delay = delay


def is_retryable(response: httpx.Response) -> bool:
    return response.status_code == 429 or response.status_code >= 500


def retry_after_seconds(response: httpx.Response) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date."""
    raw = response.headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, float((when - datetime.now(UTC)).total_seconds()))


@dataclass
class RetryPolicy:
    label: str
    max_attempts: int = 3
    backoff_base: float = 0.5
    max_retry_wait: float = 20.0
    sleep: Callable[[float], None] = time.sleep
    _jitter: random.Random = field(default_factory=random.Random, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def send(
        self, request: Callable[[], httpx.Response], *, describe: Callable[[httpx.Response], str] | None = None
    ) -> httpx.Response:
        """The first response that is not worth retrying; ``describe`` words a failed response."""
        failure = ""
        response: httpx.Response | None = None
        for attempt in range(1, self.max_attempts + 1):
            retry_after: float | None = None
            try:
                response = request()
            except httpx.TransportError as exc:
                # str(exc) is the socket-level reason; the request (and its body) is not attached.
                failure = f"{type(exc).__name__}: {exc}"
                response = None
            else:
                if not is_retryable(response):
                    return response
                detail = describe(response) if describe else response.reason_phrase
                failure = f"HTTP {response.status_code}: {detail}"
                retry_after = retry_after_seconds(response)
            if attempt == self.max_attempts:
                break
            delay = retry_after if retry_after is not None else self.backoff(attempt)
            if delay > self.max_retry_wait:
                raise RetryWaitTooLong(failure, delay=delay, last_response=response)
            logger.warning(
                "%s attempt %d/%d failed (%s); retrying in %.2fs",
                self.label,
                attempt,
                self.max_attempts,
                failure,
                delay,
            )
            self.sleep(delay)
        raise RetriesExhausted(failure, last_response=response)

    def backoff(self, attempt: int) -> float:
        ceiling = self.backoff_base * 2 ** (attempt - 1)
        return float(ceiling / 2 + self._jitter.uniform(0, ceiling / 2))
