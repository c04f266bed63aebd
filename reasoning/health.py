"""How the service keeps up: ``GET /healthz`` and the banners of operator pages, from one query:
the audit chain's lag (``audit.chain``) and the work owed after closes (``reasoning.recording.close_work``).

``/healthz``: no authentication, no details. A load balancer or uptime probe gets ``ok`` or
``degraded``, the chain's lag in seconds, the age of the oldest work owed after a close (``null``
when none is owed) and how many pieces of that work failed for good; nothing about any content.

The banners (``templates/base.html``, operator pages only: ``core.access``): the audit chain is
behind; work owed after closes is late or failed. Evaluated only when a template reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from audit.chain import OLDEST_QUEUED_EPOCH_SQL, lag_of
from core import outage
from core.access import OPERATOR_PAGE_ATTR
from reasoning.recording import close_work


@dataclass(frozen=True)
class Health:
    chain_lag_s: float
    close_work: close_work.Status

    @property
    def chain_behind(self) -> bool:
        return self.chain_lag_s > settings.AUDIT_CHAIN_MAX_LAG_S

    @property
    def ok(self) -> bool:
        return not self.chain_behind and self.close_work.healthy


_STATEMENT = f"SELECT ({OLDEST_QUEUED_EPOCH_SQL}), w.owed, w.oldest, w.failed FROM ({close_work.STATUS_SQL}) w"  # noqa: S608


def health(now: datetime | None = None) -> Health:
    with connection.cursor() as cursor:
        # Both parts are constants of this code base: nothing of a request is in the statement.
        cursor.execute(_STATEMENT)
        row = cursor.fetchone()
    assert row is not None
    epoch, owed, oldest, failed = row
    return Health(lag_of(epoch, now), close_work.status_of(owed, oldest, failed, now))


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        found = health()
    except DatabaseError as exc:
        if outage.is_database_unavailable(exc):
            # An outage: logged once by core.outage, not on every probe.
            outage.note_unavailable(exc)
            answer = JsonResponse({"status": "degraded", **_UNKNOWN}, status=503, headers=outage.retry_after_headers())
            return outage.mark_logged(answer)
        return JsonResponse({"status": "degraded", **_UNKNOWN}, status=503)
    owed = found.close_work
    body = {
        "status": "ok" if found.ok else "degraded",
        "audit_chain_lag_s": round(found.chain_lag_s, 3),
        "close_work_oldest_s": None if owed.oldest_owed_s is None else round(owed.oldest_owed_s, 3),
        "close_work_failed": owed.failed,
    }
    return JsonResponse(body, status=200 if found.ok else 503)


_UNKNOWN = {"audit_chain_lag_s": None, "close_work_oldest_s": None, "close_work_failed": None}


class Banners:
    """Evaluated only when a template reads it: one query (``health``) for both banners,
    so fragments and pages that never show them cost nothing."""

    max_attempts = close_work.MAX_ATTEMPTS

    @cached_property
    def health(self) -> Health:
        return health()

    # The audit chain.
    @property
    def seconds(self) -> float:
        return self.health.chain_lag_s

    @property
    def behind(self) -> bool:
        return self.health.chain_behind

    @property
    def limit(self) -> float:
        return settings.AUDIT_CHAIN_MAX_LAG_S

    # The work owed after closes.
    @property
    def status(self) -> close_work.Status:
        return self.health.close_work

    @property
    def close_work_limit(self) -> float:
        return settings.CLOSE_WORK_MAX_AGE_S


def operator_banners(request: HttpRequest) -> dict[str, Banners]:
    if not getattr(request, OPERATOR_PAGE_ATTR, False):
        return {}
    banners = Banners()
    return {"audit_chain_lag": banners, "close_work_status": banners}
