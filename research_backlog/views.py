"""The Research Console (operators only)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from reasoning.access import operator_required


@operator_required
@require_safe
def console_page(request: HttpRequest) -> HttpResponse:
    return render(request, "research_backlog/console.html", {})
