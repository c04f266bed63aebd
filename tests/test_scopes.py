"""``core.scopes``: the scope checks every app's routes use, without importing the reasoning app."""

from __future__ import annotations

from core import scopes
from reasoning.models import ApiToken


def test_the_shared_scope_names_are_the_tokens_scopes() -> None:
    assert scopes.ADMIN == ApiToken.Scope.ADMIN
    assert scopes.AUDIT_READ == ApiToken.Scope.AUDIT_READ


def test_a_route_open_to_several_scopes_names_them_all_when_it_refuses() -> None:
    class Caller:
        actor = "token:reader"

        def has_scope(self, scope: str) -> bool:
            return scope == "reasoning.read"

    class Request:
        user = Caller()

    check = scopes.CanReadAudit()
    assert check.has_permission(Request(), None) is False  # type: ignore[arg-type]
    assert check.message == "This route needs the 'audit.read' or 'reasoning.admin' scope."
