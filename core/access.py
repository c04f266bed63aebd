"""The operator gate: the one check every operator page passes through."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponseBase
from django.shortcuts import render
from django.urls import reverse

# Set on the request by ``operator_required``: base.html shows the audit-chain lag banner
# (``reasoning.health``) on operator pages only.
OPERATOR_PAGE_ATTR = "operator_page"


def is_operator(user: Any) -> bool:
    """Operators are staff logins (``create_operator``); patients never are."""
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


def operator_required(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
    """The one gate for operator pages: anonymous → the login page; a logged-in
    non-operator (a patient) → 403 with a plain page. Every operator page uses it."""

    @wraps(view)
    def gated(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            # After logging in the browser GETs `next`: a form's POST-only URL would be a 405.
            safe = request.method in ("GET", "HEAD")
            return redirect_to_login(request.get_full_path() if safe else reverse("dashboard"))
        if not is_operator(request.user):
            return render(request, "operator_forbidden.html", status=403)
        setattr(request, OPERATOR_PAGE_ATTR, True)
        return view(request, *args, **kwargs)

    return gated
