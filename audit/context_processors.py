"""The "audit chain is behind" banner of operator pages (``templates/base.html``)."""

from __future__ import annotations

from functools import cached_property

from django.conf import settings
from django.http import HttpRequest

from audit.chain import chain_lag_seconds
from core.access import OPERATOR_PAGE_ATTR


class ChainLag:
    """Evaluated only when a template reads it: one indexed query (``chain_lag_seconds``),
    so fragments and pages that never show the banner cost nothing."""

    @cached_property
    def seconds(self) -> float:
        return chain_lag_seconds()

    @property
    def behind(self) -> bool:
        return self.seconds > settings.AUDIT_CHAIN_MAX_LAG_S

    @property
    def limit(self) -> float:
        return settings.AUDIT_CHAIN_MAX_LAG_S


def audit_chain_lag(request: HttpRequest) -> dict[str, ChainLag]:
    if not getattr(request, OPERATOR_PAGE_ATTR, False):
        return {}
    return {"audit_chain_lag": ChainLag()}
