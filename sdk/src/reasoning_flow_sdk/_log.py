"""The SDK's one logger, rate-limited: an outage must not flood the agent's logs."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

logger = logging.getLogger("reasoning_flow_sdk")

INTERVAL = 60.0  # seconds between two lines about the same problem
_last: dict[str, float] = {}
_suppressed: dict[str, int] = {}
_lock = threading.Lock()


def log_limited(level: int, key: str, message: str, *args: Any) -> None:
    """Log ``message`` unless a line with the same ``key`` went out in the last minute."""
    now = time.monotonic()
    with _lock:
        last = _last.get(key)
        if last is not None and now - last < INTERVAL:
            _suppressed[key] = _suppressed.get(key, 0) + 1
            return
        _last[key] = now
        skipped = _suppressed.pop(key, 0)
    if skipped:
        message += " (%d similar messages suppressed)"
        args = (*args, skipped)
    logger.log(level, message, *args)


def warn_limited(key: str, message: str, *args: Any) -> None:
    log_limited(logging.WARNING, key, message, *args)


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log ``message`` once per process."""
    with _lock:
        if _last.get(key) == float("inf"):
            return
        _last[key] = float("inf")
    logger.warning(message, *args)


def reset() -> None:
    """Forget what was logged (tests)."""
    with _lock:
        _last.clear()
        _suppressed.clear()
