"""Small helpers every app's pages share."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from core.api_views import parse_instant


def is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def back(request: HttpRequest, default: str) -> HttpResponse:
    """Back to where the form was (the ``next`` field: only a path on this site), else ``default``."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect(default)


# A page's custom time range: the From and To fields, as <input type="datetime-local"> sends them.
RANGE_FIELDS = (("from", "created_after"), ("to", "created_before"))
_LOCAL_MINUTE = "%Y-%m-%dT%H:%M"


def with_time_range(params: Mapping[str, str]) -> dict[str, str]:
    """The query with the page's ``from`` and ``to`` (a local date-time or a date, read in
    ``TIME_ZONE``) turned into the API's ``created_after`` and ``created_before`` (with an offset),
    which they replace. A bad value is an ``InvalidInput`` naming ``from`` or ``to``."""
    query = {name: params[name] for name in params}
    for field, name in RANGE_FIELDS:
        raw = query.pop(field, "").strip()
        if raw:
            moment = parse_instant(raw, field, dates=True, naive=True)
            assert moment is not None
            query[name] = moment.isoformat()
    return query


def time_range_values(after: datetime | None, before: datetime | None) -> dict[str, str]:
    """What the From and To fields show for a range: local date-times to the minute, or ''."""
    return {
        field: timezone.localtime(moment).strftime(_LOCAL_MINUTE) if moment is not None else ""
        for (field, _), moment in zip(RANGE_FIELDS, (after, before), strict=True)
    }
