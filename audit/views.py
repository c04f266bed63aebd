"""``GET /healthz``: is the service up, is the audit chain keeping up, is the work owed after
closes being done?

No authentication, no details: a load balancer or uptime probe gets ``ok`` or ``degraded``,
the chain's lag in seconds, the age of the oldest work owed after a close (``null`` when none
is owed) and how many pieces of that work failed for good; nothing about any content.
"""

from __future__ import annotations

from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from audit.health import health
from core import outage


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
