"""Who a request speaks for, as the actor string audit events carry.

``token:<name>`` for an API token, ``user:<id>`` for a login session, ``system:<job>``
for scheduled work (written by the jobs themselves). Every API view, page and admin
action asks here, so the trail names a caller the same way whichever door it came in by.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeGuard, runtime_checkable

from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.request import Request


@runtime_checkable
class Principal(Protocol):
    """A non-user caller (an API token) that names itself in the audit trail and holds scopes
    (``core.scopes.HasScope`` asks it)."""

    @property
    def actor(self) -> str: ...

    def has_scope(self, scope: str) -> bool: ...


_PRINCIPAL_TYPES: dict[type, bool] = {}


def is_principal(user: object) -> TypeGuard[Principal]:
    """``isinstance(user, Principal)``, judged once per type: a runtime protocol's check walks its
    members on every call (~8 µs), and every API request asks it two or three times."""
    kind = type(user)
    known = _PRINCIPAL_TYPES.get(kind)
    if known is None:
        known = _PRINCIPAL_TYPES[kind] = isinstance(user, Principal)
    return known


def user_actor(user: Any) -> str:
    return f"user:{user.pk}"


def actor_for(request: Request | HttpRequest) -> str:
    """The caller's actor string; 401 (DRF's ``NotAuthenticated``) for an anonymous one."""
    user = request.user
    if is_principal(user):
        return user.actor
    if user is not None and user.is_authenticated:
        return user_actor(user)
    raise exceptions.NotAuthenticated()
