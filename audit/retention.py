"""Retention of audit events by partition (``AUDIT_RETENTION_DAYS``; docs/deploy.md,
"Retention by partition").

A month of events is dropped only when a signed checkpoint covers every event in it: each is
linked, at a chain position within the checkpoint's tree. The links and the tree's nodes stay
(hashes only), and ``audit_dropped_partition`` records the positions dropped, so
``audit_verify`` starts its walk after them and the checkpoint vouches for what came before:
its root is rebuilt from the stored tree edge plus every retained event.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.backends.utils import CursorWrapper
from psycopg import sql

from audit.models import AuditDroppedPartition
from core.partitions import drop


@dataclass(frozen=True)
class Coverage:
    events: int
    unlinked: int
    first_position: int | None
    last_position: int | None
    # The latest signed checkpoint (id, tree size), or None.
    checkpoint: tuple[int, int] | None

    @property
    def covered(self) -> bool:
        if self.events == 0:
            return True
        if self.unlinked or self.checkpoint is None:
            return False
        return self.last_position is None or self.last_position <= self.checkpoint[1]


def coverage(cursor: CursorWrapper, name: str) -> Coverage:
    """How far the chain and the latest signed checkpoint cover the events of partition ``name``."""
    cursor.execute(
        sql.SQL(
            "SELECT count(*), count(*) - count(l.position), min(l.position), max(l.position)"
            " FROM {} e LEFT JOIN audit_chain_link l ON l.event_id = e.id"
        ).format(sql.Identifier(name))
    )
    events, unlinked, first, last = cursor.fetchone()
    cursor.execute("SELECT id, tree_size FROM audit_checkpoint ORDER BY tree_size DESC, id DESC LIMIT 1")
    row = cursor.fetchone()
    return Coverage(int(events), int(unlinked), first, last, (int(row[0]), int(row[1])) if row else None)


def drop_month(cursor: CursorWrapper, name: str, month: datetime, covered: Coverage) -> AuditDroppedPartition:
    """Drop the (covered) partition and record its positions, in the caller's transaction."""
    assert covered.covered
    drop(cursor, "audit_event", name)
    return AuditDroppedPartition.objects.create(
        name=name,
        month=month,
        events=covered.events,
        first_position=covered.first_position or 0,
        last_position=covered.last_position or 0,
        checkpoint_id=covered.checkpoint[0] if covered.checkpoint else 0,
    )
