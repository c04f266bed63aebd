"""Small helpers every app's pages share."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme


def is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def back(request: HttpRequest, default: str) -> HttpResponse:
    """Back to where the form was (the ``next`` field: only a path on this site), else ``default``."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect(default)
