"""Logins: throttling (django-axes), their audit events, and operator sessions' idle timeout.

* **Throttling.** ``LockoutBackend`` is first in ``AUTHENTICATION_BACKENDS``: after
  ``LOGIN_FAILURE_LIMIT`` failures for one username, or from one client address, every login
  for it is refused for ``LOGIN_LOCKOUT_MINUTES``, the right password included. Both login
  forms (``/accounts/login/`` and Django admin's) go through ``authenticate()``, so both are
  covered. ``axes.middleware.AxesMiddleware`` answers a refused login with
  ``lockout_response``: a 429 page saying when to try again.
* **Audit.** Every login attempt is one event written through ``audit.services.record``, in
  its own transaction: ``auth.login.succeeded``, ``auth.login.failed`` (the credentials were
  checked and were wrong), ``auth.login.locked`` (this failure started a lockout,
  ``refused: false``, or the attempt was refused during one, ``refused: true``; the failure
  that starts a lockout is also ``auth.login.failed``) and ``auth.logout``. A payload names
  the user by id when the username exists, else by ``username_sha256``, the first 12 hex
  digits of the SHA-256 of the normalised username (NFKC, stripped, case-folded); never the
  typed username or the password.
* **Idle timeout.** ``OperatorIdleTimeoutMiddleware`` logs a staff session out after
  ``OPERATOR_SESSION_IDLE_MINUTES`` without a request; the next page then asks for a login.
  Patients' sessions keep Django's cookie age (they see only their own record).

Django itself rotates the session key at login and, through the session's auth hash, ends
every session of a user whose password changes (tests/test_login_security.py shows both).
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from axes.handlers.database import AxesDatabaseHandler
from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth import get_user_model, logout
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db import transaction
from django.db.models import Max
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.crypto import salted_hmac

from audit.actions import Action
from audit.services import record
from core.actors import user_actor

# Set on the request by LockoutBackend when axes refused the attempt (no password was checked).
_REFUSED_ATTR = "rft_login_refused"
# Set before an idle-timeout logout, so that its event says why.
_LOGOUT_REASON_ATTR = "rft_logout_reason"
# The session key holding the operator's last request time (epoch seconds).
LAST_SEEN_KEY = "rft_operator_last_seen"
# The last-seen time is written back at most this often: not a session write on every request.
_LAST_SEEN_GRANULARITY_S = 60
ANONYMOUS_ACTOR = "anonymous"
_HASH_DIGITS = 12


# --- Throttling -------------------------------------------------------------------------


class LockoutBackend(AxesStandaloneBackend):  # type: ignore[misc]  # axes ships no types
    """Axes' check, first of the backends; marks the request when it refuses the attempt,
    so that the audit tells a refused attempt from a wrong password."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        try:
            super().authenticate(request, username, password, **kwargs)
        except AxesBackendPermissionDenied:
            if request is not None:
                setattr(request, _REFUSED_ATTR, True)
            raise


def client_address(request: HttpRequest) -> str | None:
    """The client's address as the web server determined it: the socket's peer, or, when that
    peer is one of ``TRUSTED_PROXIES``, the nearest untrusted hop of its ``X-Forwarded-For``
    (``config/gunicorn.py``). A header from any other peer is never read."""
    address = request.META.get("REMOTE_ADDR")
    return str(address) if address else None


def address_digest(address: str | None) -> str | None:
    """What the audit trail keeps of a client address: a keyed digest (16 hex digits), the same
    for the same address, so responders can tie a lockout to its failures, while the address
    itself (an identifier under HIPAA when the client is a patient) never enters the trail."""
    if not address:
        return None
    return salted_hmac("auth.client_address", address, algorithm="sha256").hexdigest()[:16]


def lockout_ends_at(request: HttpRequest, credentials: dict[str, Any] | None) -> datetime:
    """When the lockout on this request's username or address ends, at the latest: every
    failure it counts is older than ``AXES_COOLOFF_TIME`` by then."""
    cool_off: timedelta = settings.AXES_COOLOFF_TIME
    latest: datetime | None = None
    for attempts in AxesDatabaseHandler().get_user_attempts(request, credentials):
        last = attempts.aggregate(last=Max("attempt_time"))["last"]
        if last is not None and (latest is None or last > latest):
            latest = last
    return (latest or timezone.now()) + cool_off


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """The answer to a locked-out login (``AXES_LOCKOUT_CALLABLE``): 429, a page that says
    when to try again, and ``Retry-After``."""
    ends_at = lockout_ends_at(request, credentials)
    seconds = max(0, int((ends_at - timezone.now()).total_seconds()) + 1)
    response = render(
        request,
        "registration/locked_out.html",
        {
            "retry_at": timezone.localtime(ends_at),
            "retry_minutes": max(1, -(-seconds // 60)),
            "failure_limit": settings.LOGIN_FAILURE_LIMIT,
            "lockout_minutes": settings.LOGIN_LOCKOUT_MINUTES,
        },
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response


# --- Audit ------------------------------------------------------------------------------


def username_digest(username: str) -> str:
    """A short SHA-256 prefix of the normalised username: the same typed name (whatever its
    case or spacing) reads the same in the trail, and the name itself is not there."""
    normalised = unicodedata.normalize("NFKC", username).strip().casefold()
    return hashlib.sha256(normalised.encode()).hexdigest()[:_HASH_DIGITS]


def _form(request: HttpRequest | None) -> str:
    """Which login form the attempt came through: "site", "admin" or "other"."""
    if request is None:
        return "other"
    for form, name in (("site", "login"), ("admin", "admin:login")):
        try:
            if request.path == reverse(name):
                return form
        except NoReverseMatch:
            continue
    return "other"


def _attempt(request: HttpRequest | None, username: object) -> tuple[Any, dict[str, Any]]:
    """The target and the payload's common part for an attempt with ``username``."""
    payload: dict[str, Any] = {
        "form": _form(request),
        "client_address_hmac": address_digest(client_address(request)) if request is not None else None,
    }
    user_id = None
    if isinstance(username, str) and username:
        model = get_user_model()
        user_id = model._default_manager.filter(**{model.USERNAME_FIELD: username}).values_list("pk", flat=True).first()
        if user_id is None:
            payload["username_sha256"] = username_digest(username)
    payload["known_user"] = user_id is not None
    target = (get_user_model()._meta.label_lower, user_id) if user_id is not None else None
    return target, payload


def _username(credentials: dict[str, Any] | None) -> object:
    if not credentials:
        return None
    return credentials.get(get_user_model().USERNAME_FIELD)


@receiver(user_logged_in, dispatch_uid="rft_audit_login_succeeded")
def audit_login_succeeded(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    with transaction.atomic():
        record(
            Action.LOGIN_SUCCEEDED,
            actor=user_actor(user),
            target=user,
            payload={
                "form": _form(request),
                "client_address_hmac": address_digest(client_address(request)) if request is not None else None,
                "staff": bool(user.is_staff),
            },
        )


@receiver(user_logged_in, dispatch_uid="rft_operator_session_started")
def start_operator_clock(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    """A new login starts the idle clock afresh (the session keeps its data across login)."""
    if request is not None and hasattr(request, "session") and user.is_staff:
        request.session[LAST_SEEN_KEY] = int(timezone.now().timestamp())


@receiver(user_login_failed, dispatch_uid="rft_audit_login_failed")
def audit_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    if request is not None and getattr(request, _REFUSED_ATTR, False):
        return  # refused during a lockout: auth.login.locked says so (audit_login_locked)
    target, payload = _attempt(request, _username(credentials))
    with transaction.atomic():
        record(Action.LOGIN_FAILED, actor=ANONYMOUS_ACTOR, target=target, payload=payload)


@receiver(user_locked_out, dispatch_uid="rft_audit_login_locked")
def audit_login_locked(sender: Any, request: HttpRequest, username: object = None, **kwargs: Any) -> None:
    target, payload = _attempt(request, username)
    payload["refused"] = bool(getattr(request, _REFUSED_ATTR, False))
    failures = getattr(request, "axes_failures_since_start", None)
    if isinstance(failures, int) and not payload["refused"]:
        payload["failures"] = failures
    payload["failure_limit"] = settings.LOGIN_FAILURE_LIMIT
    payload["lockout_minutes"] = settings.LOGIN_LOCKOUT_MINUTES
    with transaction.atomic():
        record(Action.LOGIN_LOCKED, actor=ANONYMOUS_ACTOR, target=target, payload=payload)


@receiver(user_logged_out, dispatch_uid="rft_audit_logout")
def audit_logout(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is None or not user.is_authenticated:
        return  # an anonymous visitor "logging out": nobody to name
    reason = getattr(request, _LOGOUT_REASON_ATTR, "user") if request is not None else "user"
    with transaction.atomic():
        record(
            Action.LOGOUT,
            actor=user_actor(user),
            target=user,
            payload={
                "reason": reason,
                "client_address_hmac": address_digest(client_address(request)) if request is not None else None,
                "staff": bool(user.is_staff),
            },
        )


# --- Operator sessions' idle timeout ----------------------------------------------------


class OperatorIdleTimeoutMiddleware:
    """Logs out a staff session idle for ``OPERATOR_SESSION_IDLE_MINUTES`` (after
    ``AuthenticationMiddleware``). The request then goes on as an anonymous one: an operator
    page redirects to the login page, with ``next`` back to it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # Without a session cookie there is no operator to time out (an API request: a bearer
        # token), and reading request.user would set up an empty session to learn that.
        user = getattr(request, "user", None) if settings.SESSION_COOKIE_NAME in request.COOKIES else None
        if user is not None and user.is_authenticated and user.is_staff:
            now = timezone.now().timestamp()
            last_seen = request.session.get(LAST_SEEN_KEY)
            idle_s = settings.OPERATOR_SESSION_IDLE_MINUTES * 60
            if isinstance(last_seen, int | float) and now - last_seen >= idle_s:
                setattr(request, _LOGOUT_REASON_ATTR, "idle_timeout")
                logout(request)
            elif not isinstance(last_seen, int | float) or not 0 <= now - last_seen < _LAST_SEEN_GRANULARITY_S:
                request.session[LAST_SEEN_KEY] = int(now)
        return self.get_response(request)
