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
beyond one row per token, user or patient ever counted. Counted one by one, every attempt
counts, refused ones included; the window's end is the same for all of them, so that changes
nothing but the count. The table is unlogged: a database crash forgets the counts, which is harmless.

Outside a transaction (DRF runs throttles before the view; there are no atomic requests) the
statement commits at once and holds the row lock for that statement only.

**Leases, for large limits** (``lease_size``: a hundredth of the limit, at most ``MAX_LEASE``; 1,
i.e. none, below 200 a window). Counting one request costs a statement: a third of a millisecond
of a web worker's CPU and a tenth of PostgreSQL's, as much as a small write. With a key alone and
a large limit, ``hit`` counts ``k`` at once against the shared row (the same statement, ``+ k``)
and the process hands those ``k`` out itself, one a request, until they are spent or the window
ends. What the shared row grants is still never more than the limit, so **at most ``n`` requests
pass in a window**, across all processes. What a process has claimed and not used when the
window ends is lost: a burst may see up to ``k - 1`` fewer per process than the limit (10,000 a
minute: a lease of 25, a quarter of a percent per process). Once the row says the window is
spent, the process refuses the rest of the window without asking. Small limits (the narrative
reads' 30 in 5 minutes, a test's 2 a minute) and several keys are counted one by one, exactly.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

# Nothing else from Django at import time: config.settings parses its rates with parse_rate.
from django.db import connection

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")

# Sorted keys: two statements never lock the same rows in opposite orders (no deadlock).
# GREATEST: a process whose clock lags a little counts into the newer window, never an older one.
# Parameters: the window's start, how many hits to count (1, or a lease), the keys.
_HIT = """
INSERT INTO rft_rate_limit AS c (key, window_start, hits)
SELECT key, %s, %s FROM unnest(%s::text[]) AS key
ON CONFLICT (key) DO UPDATE SET
    hits = CASE WHEN c.window_start >= EXCLUDED.window_start THEN c.hits + EXCLUDED.hits ELSE EXCLUDED.hits END,
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


# A lease is a hundredth of a window's limit, at most MAX_LEASE (module docstring).
LEASE_SHARE = 100
MAX_LEASE = 25


def lease_size(rate: Rate) -> int:
    """How many hits a process counts at once against ``rate``'s shared row (1: no lease)."""
    return max(1, min(MAX_LEASE, rate.limit // LEASE_SHARE))


@dataclass
class _Lease:
    window: int  # the window's start, epoch seconds
    left: int  # hits counted against the shared row and not handed out yet
    spent: bool  # the shared row has reached the limit: the rest of the window is refused


# This process's leases by scoped key; the lock keeps a worker's threads from handing out one twice.
_leases: dict[str, _Lease] = {}
_leases_lock = threading.Lock()


def hit(keys: Sequence[str], rate: Rate, *, now: float | None = None) -> Verdict:
    """Count one request against each of ``keys`` (one statement at most); allowed when no key
    is past ``rate.limit`` in its current window. One key and a large limit: from a lease."""
    if not keys:
        return Verdict(allowed=True, retry_after=None)
    now = time.time() if now is None else now
    window = int(now // rate.period) * rate.period
    # The period is part of the key: a changed rate starts afresh instead of mixing windows.
    scoped = sorted({f"{key}@{rate.period}" for key in keys})
    size = lease_size(rate)
    if len(scoped) == 1 and size > 1:
        return _from_lease(scoped[0], rate, window, size, now)
    rows = _count(scoped, window, 1)
    over = [start for hits, start in rows if hits > rate.limit]
    if not over:
        return Verdict(allowed=True, retry_after=None)
    return _refused(max(over), rate, now)


def _count(scoped: list[str], window: int, hits: int) -> list[tuple[int, int]]:
    with connection.cursor() as cursor:
        cursor.execute(_HIT, [window, hits, scoped])
        return [(int(count), int(start)) for count, start in cursor.fetchall()]


def _refused(window: int, rate: Rate, now: float) -> Verdict:
    return Verdict(allowed=False, retry_after=max(1, math.ceil(window + rate.period - now)))


def _from_lease(key: str, rate: Rate, window: int, size: int, now: float) -> Verdict:
    with _leases_lock:
        lease = _leases.get(key)
        if lease is not None and lease.window >= window:
            if lease.left > 0:
                lease.left -= 1
                return Verdict(allowed=True, retry_after=None)
            if lease.spent:
                return _refused(lease.window, rate, now)
    ((hits, start),) = _count([key], window, size)
    # This claim holds the shared count's (hits - size, hits]: the ones up to the limit are ours.
    granted = max(0, min(size, rate.limit - (hits - size)))
    with _leases_lock:
        lease = _leases.get(key)
        if lease is None or lease.window < start:
            lease = _leases[key] = _Lease(start, 0, False)
        lease.left += max(0, granted - 1)
        lease.spent = lease.spent or hits >= rate.limit
    if granted == 0:
        return _refused(start, rate, now)
    return Verdict(allowed=True, retry_after=None)
