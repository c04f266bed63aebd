"""Rate limits shared by every web process: an atomic fixed-window counter in PostgreSQL.

A rate is ``<n>/<period>`` (``10000/1m``, ``30/5m``; units s, m, h, d): at most ``n``
requests per key in each window of ``period``, windows aligned to the clock (so at most
``2n`` in any span of one period, across a window's end). ``off`` or ``0`` means no limit.

``hit(keys, rate)`` counts one request against every key in **one statement**, an upsert on
the unlogged table ``rft_rate_limit`` (migration ``reasoning.0016``)::

    INSERT ... ON CONFLICT (key) DO UPDATE SET hits = <hits + 1, or 1 in a new window> RETURNING ...

PostgreSQL locks the key's row for the update, so concurrent requests in any process each see
a distinct count: exactly ``n`` get through a burst, never more (no read-then-write). Each key
has one row, overwritten in place when a new window starts, so there is nothing to prune
beyond one row per token, user or patient ever counted. Every attempt counts, refused ones
included; the window's end is the same for all of them, so that changes nothing but the
count. The table is unlogged: a database crash forgets the counts, which is harmless.

Outside a transaction (DRF runs throttles before the view; there are no atomic requests) the
statement commits at once and holds the row lock for that statement only.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

# Nothing else from Django at import time: config.settings parses its rates with parse_rate.
from django.db import connection

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")

# Sorted keys: two statements never lock the same rows in opposite orders (no deadlock).
# GREATEST: a process whose clock lags a little counts into the newer window, never an older one.
_HIT = """
INSERT INTO rft_rate_limit AS c (key, window_start, hits)
SELECT key, %s, 1 FROM unnest(%s::text[]) AS key
ON CONFLICT (key) DO UPDATE SET
    hits = CASE WHEN c.window_start >= EXCLUDED.window_start THEN c.hits + 1 ELSE 1 END,
    window_start = GREATEST(c.window_start, EXCLUDED.window_start)
RETURNING hits, window_start
"""


@dataclass(frozen=True)
class Rate:
    limit: int
    period: int  # seconds

    def __str__(self) -> str:
        return f"{self.limit}/{self.period}s"


def parse_rate(value: str | None, name: str) -> Rate | None:
    """``"<n>/<k><unit>"`` as a Rate; ``off``, ``0`` or empty as None (no limit).

    Raises ``ValueError`` naming ``name`` for anything else.
    """
    text = (value or "").strip().lower()
    if text in ("", "off", "0"):
        return None
    match = _RATE.match(text)
    if not match or int(match[1]) < 1 or (match[2] and int(match[2]) < 1):
        raise ValueError(
            f"{name} must be '<n>/<period>' (e.g. 100/1m, 30/5m; units s, m, h, d) or 'off', got {value!r}"
        )
    return Rate(int(match[1]), int(match[2] or 1) * _UNITS[match[3]])


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int | None  # whole seconds until the window ends, when refused


def hit(keys: Sequence[str], rate: Rate, *, now: float | None = None) -> Verdict:
    """Count one request against each of ``keys`` (one statement); allowed when no key is
    past ``rate.limit`` in its current window."""
    if not keys:
        return Verdict(allowed=True, retry_after=None)
    now = time.time() if now is None else now
    window = int(now // rate.period) * rate.period
    # The period is part of the key: a changed rate starts afresh instead of mixing windows.
    scoped = sorted({f"{key}@{rate.period}" for key in keys})
    with connection.cursor() as cursor:
        cursor.execute(_HIT, [window, scoped])
        rows = cursor.fetchall()
    over = [start for hits, start in rows if hits > rate.limit]
    if not over:
        return Verdict(allowed=True, retry_after=None)
    return Verdict(allowed=False, retry_after=max(1, math.ceil(max(over) + rate.period - now)))
