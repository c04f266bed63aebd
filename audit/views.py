"""``GET /healthz``: is the service up and is the audit chain keeping up?

No authentication, no details: a load balancer or uptime probe gets ``ok`` or
``degraded`` and the chain's lag in seconds, nothing about the trail's content.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from audit.chain import chain_lag_seconds
from core import outage


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        lag: float | None = round(chain_lag_seconds(), 3)
    except DatabaseError as exc:
        if outage.is_database_unavailable(exc):
            # An outage: logged once by core.outage, not on every probe.
            outage.note_unavailable(exc)
            answer = JsonResponse(
                {"status": "degraded", "audit_chain_lag_s": None}, status=503, headers=outage.retry_after_headers()
            )
            return outage.mark_logged(answer)
        lag = None
    ok = lag is not None and lag <= settings.AUDIT_CHAIN_MAX_LAG_S
    return JsonResponse({"status": "ok" if ok else "degraded", "audit_chain_lag_s": lag}, status=200 if ok else 503)
