"""The operators' evaluation page, and its download of a PHI-safe export of the last day.

``/dashboard/admin/reasoning/evaluation``: the latest recorded signature-check and replay
runs with their drift share per trigger type over time (``reasoning.evaluation.page``).
``…/evaluation/export``: the raw export (docs/evaluation.md) of the flows closed in the last
24 hours, streamed as JSONL and audited (``admin.reasoning.export.downloaded``) before the
first byte.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from core.access import operator_required
from core.actors import actor_for
from reasoning.evaluation import services
from reasoning.evaluation.export import ExportFilters, count_raw, encode, raw_rows, read_snapshot
from reasoning.evaluation.page import evaluation_page

DOWNLOAD_WINDOW = timedelta(hours=24)


@operator_required
@require_safe
def evaluation_page_view(request: HttpRequest) -> HttpResponse:
    return render(request, "reasoning/evaluation.html", {"kinds": evaluation_page(), "window_hours": 24})


@operator_required
@require_safe
def evaluation_export(request: HttpRequest) -> StreamingHttpResponse:
    until = timezone.now()
    since = until - DOWNLOAD_WINDOW
    filters = ExportFilters(since=since, until=until)
    services.record_export_downloaded(actor=actor_for(request), since=since, until=until, rows=count_raw(filters))
    response = StreamingHttpResponse(_lines(filters), content_type="application/jsonl; charset=ascii")
    response["Content-Disposition"] = f'attachment; filename="flows-{until:%Y%m%dT%H%MZ}.jsonl"'
    response["Cache-Control"] = "no-store"
    return response


def _lines(filters: ExportFilters) -> Iterator[str]:
    with read_snapshot():
        for row in raw_rows(filters):
            yield encode(row)
