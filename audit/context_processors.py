"""The banners of operator pages (``templates/base.html``): the audit chain is behind; work owed
after closes is late or failed (``reasoning.close_work``)."""

from __future__ import annotations

from functools import cached_property

from django.conf import settings
from django.http import HttpRequest

from audit.health import Health, health
from core.access import OPERATOR_PAGE_ATTR
from reasoning import close_work


class Banners:
    """Evaluated only when a template reads it: one query (``audit.health``) for both banners,
    so fragments and pages that never show them cost nothing."""

    max_attempts = close_work.MAX_ATTEMPTS

    @cached_property
    def health(self) -> Health:
        return health()

    # The audit chain.
    @property
    def seconds(self) -> float:
        return self.health.chain_lag_s

    @property
    def behind(self) -> bool:
        return self.health.chain_behind

    @property
    def limit(self) -> float:
        return settings.AUDIT_CHAIN_MAX_LAG_S

    # The work owed after closes.
    @property
    def status(self) -> close_work.Status:
        return self.health.close_work

    @property
    def close_work_limit(self) -> float:
        return settings.CLOSE_WORK_MAX_AGE_S


def audit_chain_lag(request: HttpRequest) -> dict[str, Banners]:
    if not getattr(request, OPERATOR_PAGE_ATTR, False):
        return {}
    banners = Banners()
    return {"audit_chain_lag": banners, "close_work_status": banners}
