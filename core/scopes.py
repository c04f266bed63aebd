"""Scope checks for API routes, for every app: a route's permission names the scopes that let a
caller through (any one of them). The caller is a ``core.actors.Principal`` (an API token,
authenticated by ``REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]``): anyone else is a 401, a
principal without one of the scopes a 403 naming them.

The scopes themselves are the tokens' (``reasoning.models.ApiToken.Scope``); the names used by
more than one app are here, so that no app needs the reasoning app to check them.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from core.actors import is_principal

ADMIN = "reasoning.admin"
AUDIT_READ = "audit.read"


class HasScope(BasePermission):
    """Lets a principal holding any of ``scopes`` through (subclass and set ``scopes``)."""

    scopes: tuple[str, ...] = ()

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not is_principal(user):
            raise exceptions.NotAuthenticated()
        if any(user.has_scope(scope) for scope in self.scopes):
            return True
        named = " or ".join(f"'{scope}'" for scope in self.scopes)
        self.message = f"This route needs the {named} scope."
        return False


class IsAdmin(HasScope):
    scopes = (ADMIN,)


class CanReadAudit(HasScope):
    """The audit log's proofs and events: ``audit.read``, or ``reasoning.admin``."""

    scopes = (AUDIT_READ, ADMIN)
