"""The chainer and the verifier.

Chaining (``chain_pending``):
  1. Take the chainer's advisory lock (transaction-scoped), so exactly one chainer
     appends at a time, across every process and host.
  2. Remove up to ``batch_size`` committed events from ``audit_pending``, oldest first.
  3. Read the chain head, then append one link per event in sequence order.
  4. Commit: the queue rows and the links go together, so no event is linked twice
     or dropped.

Verification (``verify_chain``) walks the links in position order with a server-side
cursor (constant memory) and checks, for each link: the position is the next one,
``prev_hash`` is the previous link's hash, the event exists, its columns match its
canonical bytes, and the hash recomputes. Events that are in no link are reported
as the pending tail when queued for the chainer and as breaks otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.db import connection, transaction

from audit.canonical import GENESIS_HASH, link_hash

# Arbitrary constant that names the chainer's advisory lock.
CHAINER_LOCK_KEY = 0x52465443  # "RFTC"


def chain_pending(batch_size: int = 1000, *, wait: bool = True) -> int:
    """Link one batch of committed events; return how many were linked.

    With ``wait=False`` the call returns 0 at once when another chainer holds the lock.
    """
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAINER_LOCK_KEY])
        else:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [CHAINER_LOCK_KEY])
            locked = cursor.fetchone()
            if not locked or not locked[0]:
                return 0
        cursor.execute(
            """
            DELETE FROM audit_pending
            WHERE event_id IN (SELECT event_id FROM audit_pending ORDER BY event_id LIMIT %s)
            RETURNING event_id
            """,
            [batch_size],
        )
        event_ids = sorted(row[0] for row in cursor.fetchall())
        if not event_ids:
            return 0
        cursor.execute("SELECT id, canonical FROM audit_event WHERE id = ANY(%s) ORDER BY id", [event_ids])
        events = cursor.fetchall()
        cursor.execute("SELECT position, hash FROM audit_chain_link ORDER BY position DESC LIMIT 1")
        head = cursor.fetchone()
        position, prev_hash = (head[0], head[1]) if head else (0, GENESIS_HASH)
        now = datetime.now(UTC)
        links = []
        for event_id, canonical in events:
            position += 1
            digest = link_hash(prev_hash, position, event_id, bytes(canonical))
            links.append((position, event_id, prev_hash, digest, now))
            prev_hash = digest
        cursor.executemany(
            "INSERT INTO audit_chain_link (position, event_id, prev_hash, hash, linked_at) VALUES (%s, %s, %s, %s, %s)",
            links,
        )
        return len(links)


def chain_all(batch_size: int = 1000) -> int:
    """Link every committed pending event; return the total linked."""
    total = 0
    while linked := chain_pending(batch_size):
        total += linked
    return total


@dataclass(frozen=True)
class ChainBreak:
    position: int | None
    event_id: int | None
    reason: str

    def describe(self) -> str:
        where = []
        if self.position is not None:
            where.append(f"chain position {self.position}")
        if self.event_id is not None:
            where.append(f"event sequence {self.event_id}")
        return f"{', '.join(where)}: {self.reason}"


@dataclass(frozen=True)
class VerifyResult:
    linked: int
    pending: int
    broken: ChainBreak | None

    @property
    def ok(self) -> bool:
        return self.broken is None


def chain_length() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM audit_chain_link")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def verify_chain(on_progress: Callable[[int], object] | None = None, chunk: int = 2000) -> VerifyResult:
    """Walk the whole chain; stop at the first break."""
    checked = 0
    broken: ChainBreak | None = None
    expected_position = 1
    prev_hash = GENESIS_HASH
    for row in _iter_links(chunk):
        position, event_id, link_prev, link_digest, ev_id, action, actor, ttype, tid, payload, created, canonical = row
        broken = _check_link(
            expected_position,
            prev_hash,
            position,
            event_id,
            link_prev,
            link_digest,
            ev_id,
            (action, actor, ttype, tid, payload, created),
            canonical,
        )
        if broken:
            break
        prev_hash = link_digest
        expected_position += 1
        checked += 1
        if on_progress and checked % chunk == 0:
            on_progress(chunk)
    if on_progress:
        on_progress(checked % chunk)
    pending = _count_pending()
    if broken is None:
        broken = _find_unchained_event()
    return VerifyResult(linked=checked, pending=pending, broken=broken)


def _iter_links(chunk: int) -> Iterator[tuple]:
    # A named (server-side) cursor inside a transaction streams rows in chunks.
    with transaction.atomic(), connection.connection.cursor(name="audit_verify") as cursor:
        cursor.itersize = chunk
        cursor.execute(
            """
            SELECT l.position, l.event_id, l.prev_hash, l.hash,
                   e.id, e.action, e.actor, e.target_type, e.target_id, e.payload, e.created_at, e.canonical
            FROM audit_chain_link l LEFT JOIN audit_event e ON e.id = l.event_id
            ORDER BY l.position
            """
        )
        yield from cursor


def _check_link(
    expected_position: int,
    prev_hash: str,
    position: int,
    event_id: int,
    link_prev: str,
    link_digest: str,
    ev_id: int | None,
    columns: tuple,
    canonical: bytes | memoryview | None,
) -> ChainBreak | None:
    if position != expected_position:
        return ChainBreak(expected_position, None, f"link missing (next link found is position {position})")
    if link_prev != prev_hash:
        return ChainBreak(position, event_id, "prev_hash does not match the previous link's hash")
    if ev_id is None or canonical is None:
        return ChainBreak(position, event_id, "the linked event is missing")
    canonical = bytes(canonical)
    if link_hash(prev_hash, position, event_id, canonical) != link_digest:
        return ChainBreak(position, event_id, "hash does not match the event's canonical bytes")
    action, actor, ttype, tid, payload, created = columns
    document = _exact_json(canonical)
    stored = {
        "action": action,
        "actor": actor,
        "target_type": ttype,
        "target_id": tid,
        # Django loads jsonb as text on raw cursors.
        "payload": _exact_json(payload if isinstance(payload, str) else json.dumps(payload)),
        "created_at": created.astimezone(UTC).isoformat(),
    }
    for field, value in stored.items():
        if document.get(field) != value:
            return ChainBreak(position, event_id, f"column {field!r} was altered after the event was written")
    return None


def _exact_json(text: str | bytes) -> Any:
    # Numbers as Decimal: jsonb keeps 1e+23 as the exact integer 10**23, which a float
    # comparison would call different from the float 1e23 that was written.
    return json.loads(text, parse_float=Decimal, parse_int=Decimal)


def _count_pending() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM audit_pending")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _find_unchained_event() -> ChainBreak | None:
    """An event that is neither linked nor queued for linking was slipped in."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT e.id FROM audit_event e
            WHERE NOT EXISTS (SELECT 1 FROM audit_chain_link l WHERE l.event_id = e.id)
              AND NOT EXISTS (SELECT 1 FROM audit_pending p WHERE p.event_id = e.id)
            ORDER BY e.id LIMIT 1
            """
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return ChainBreak(None, int(row[0]), "event is not in the chain and not queued for chaining")
