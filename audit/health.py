"""How the service keeps up, for ``/healthz`` and the operator banners, in one query: the audit
chain's lag (``audit.chain``) and the work owed after closes (``reasoning.close_work``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection

from audit.chain import OLDEST_QUEUED_EPOCH_SQL, lag_of
from reasoning import close_work


@dataclass(frozen=True)
class Health:
    chain_lag_s: float
    close_work: close_work.Status

    @property
    def chain_behind(self) -> bool:
        return self.chain_lag_s > settings.AUDIT_CHAIN_MAX_LAG_S

    @property
    def ok(self) -> bool:
        return not self.chain_behind and self.close_work.healthy


_STATEMENT = f"SELECT ({OLDEST_QUEUED_EPOCH_SQL}), w.owed, w.oldest, w.failed FROM ({close_work.STATUS_SQL}) w"  # noqa: S608


def health(now: datetime | None = None) -> Health:
    with connection.cursor() as cursor:
        # Both parts are constants of this code base: nothing of a request is in the statement.
        cursor.execute(_STATEMENT)
        row = cursor.fetchone()
    assert row is not None
    epoch, owed, oldest, failed = row
    return Health(lag_of(epoch, now), close_work.status_of(owed, oldest, failed, now))
