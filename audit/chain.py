"""The chainer: it links committed audit events into the hash chain and the Merkle tree
(verification is ``audit.verify``).

Chaining (``chain_pending``):
  1. Take the chainer's advisory lock (transaction-scoped), so exactly one chainer
     appends at a time, across every process and host.
  2. Remove up to ``batch_size`` committed events from ``audit_pending``, oldest first
     (the queue's trigger admits the DELETE only in a transaction that set
     ``audit.chainer``, see migration 0003).
  3. Skip, and audit, queue rows that name an event that is already linked or does not
     exist: one stray row must not block every later event.
  4. Read the chain head, then append one link per event in sequence order.
  5. Extend the Merkle tree (``audit.tree``) by one leaf per new link.
  6. Commit: the queue rows, the links and the tree go together, so no event is linked
     twice or dropped, and the tree always has one leaf per link.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connection, transaction
from django.utils import timezone

from audit import tree
from audit.actions import Action
from audit.canonical import GENESIS_HASH, link_hash
from audit.services import record
from core.bulk import execute_unplanned, int_array, sql_constant, text_array

logger = logging.getLogger(__name__)

# Arbitrary constant that names the chainer's advisory lock.
CHAINER_LOCK_KEY = 0x52465443  # "RFTC"
# Held (shared) by every running chainer loop for its lifetime, so the scheduled job can
# tell whether a dedicated chainer is already polling.
CHAINER_LOOP_LOCK_KEY = 0x5246544C  # "RFTL"

# The transaction-local setting that lets the chainer, and only it, delete queue rows.
CHAINER_SETTING = "audit.chainer"


def chain_pending(batch_size: int = 1000, *, wait: bool = True) -> int:
    """Link one batch of committed events; return how many queue rows were consumed.

    With ``wait=False`` the call returns 0 at once when another chainer holds the lock.
    Stray queue rows count as consumed (so ``chain_all`` keeps going past them).
    """
    with transaction.atomic(durable=True), connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAINER_LOCK_KEY])
        else:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [CHAINER_LOCK_KEY])
            locked = cursor.fetchone()
            if not locked or not locked[0]:
                return 0
        cursor.execute("SELECT set_config(%s, 'on', true)", [CHAINER_SETTING])
        # Planned at each batch from the queue's size now (a plan kept from a moment the queue was
        # empty joins it to itself by nested loops: seconds a batch once it holds thousands); the
        # rows by their tuple ids, so the plan reads the batch, not the queue.
        oldest = f"SELECT ctid FROM audit_pending ORDER BY event_id LIMIT {sql_constant(batch_size)}"  # noqa: S608 (a constant)
        execute_unplanned(cursor, f"DELETE FROM audit_pending WHERE ctid = ANY(ARRAY({oldest})) RETURNING event_id")  # noqa: S608
        event_ids = sorted(row[0] for row in cursor.fetchall())
        if not event_ids:
            return 0
        cursor.execute(
            f"""
            SELECT e.id, e.canonical, l.position IS NOT NULL
            FROM audit_event e LEFT JOIN audit_chain_link l ON l.event_id = e.id
            WHERE {id_predicate(event_ids)} ORDER BY e.id
            """  # noqa: S608
        )
        # A range also reads ids between the batch's (other events, linked or queued later).
        wanted = set(event_ids)
        rows = [row for row in cursor.fetchall() if row[0] in wanted]
        found = {row[0] for row in rows}
        events = [(event_id, canonical) for event_id, canonical, linked in rows if not linked]
        for event_id, _, linked in rows:
            if linked:
                _skip_queue_row(event_id, "already_linked")
        for event_id in event_ids:
            if event_id not in found:
                _skip_queue_row(event_id, "event_missing")
        if events:
            cursor.execute("SELECT position, hash FROM audit_chain_link ORDER BY position DESC LIMIT 1")
            head = cursor.fetchone()
            position, prev_hash = (head[0], head[1]) if head else (0, GENESIS_HASH)
            links = []
            for event_id, canonical in events:
                position += 1
                digest = link_hash(prev_hash, position, event_id, bytes(canonical))
                links.append((position, event_id, prev_hash, digest))
                prev_hash = digest
            # One statement for the batch (a statement per row cost the chainer's PostgreSQL session more than half
            # of its CPU); linked_at is stamped by the database (trigger audit_chain_link_stamp).
            cursor.execute(
                "INSERT INTO audit_chain_link (position, event_id, prev_hash, hash)"
                " SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::varchar[], %s::varchar[]) ORDER BY 1",
                # Array literals: a list would be dumped element by element in Python (core.bulk).
                [
                    int_array(link[0] for link in links),
                    int_array(link[1] for link in links),
                    text_array(link[2] for link in links),
                    text_array(link[3] for link in links),
                ],
            )
            # The Merkle tree grows with the chain, in the same transaction (audit.tree).
            tree.extend(
                cursor, links[0][0] - 1, [tree.leaf_hash(event_id, bytes(canonical)) for event_id, canonical in events]
            )
        return len(event_ids)


def _skip_queue_row(event_id: int, reason: str) -> None:
    # The row is gone from the queue (deleted above); the trail keeps its id and why.
    logger.warning("audit chainer skipped the queue row for event %s (%s)", event_id, reason)
    record(
        Action.AUDIT_CHAIN_QUEUE_ROW_SKIPPED,
        actor="system:audit_chainer",
        target=("audit.auditevent", event_id),
        payload={"event_id": event_id, "reason": reason},
    )


def chain_all(batch_size: int = 1000) -> int:
    """Link every committed pending event; return the total queue rows consumed."""
    total = 0
    while linked := chain_pending(batch_size):
        total += linked
    return total


# --- The chainer loop ------------------------------------------------------------------

# First and longest pause after losing the database.
RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 30.0
# The longest pause between two polls that find nothing (``run_chainer``'s ``idle_interval``).
IDLE_POLL_MAX_S = 1.0


def run_chainer(
    should_stop: Callable[[], bool],
    *,
    interval: float = 0.05,
    batch_size: int = 1000,
    until: float | None = None,
    once: bool = False,
    max_backoff: float = RECONNECT_MAX_S,
    idle_interval: float = IDLE_POLL_MAX_S,
) -> int:
    """Poll and link until ``should_stop()`` (or ``time.monotonic()`` passes ``until``, or,
    with ``once``, the queue is drained); return the rows consumed.

    While events come, a poll every ``interval`` seconds; each poll that finds none doubles the
    pause, up to ``idle_interval``: an idle chainer costs a query a second, not twenty, and an
    event written after a quiet spell waits at most ``idle_interval`` for its link.

    A lost database connection (a restart, a failover, a terminated backend) is logged,
    the connection discarded, and the loop retries with exponential backoff capped at
    ``max_backoff`` seconds: the chainer outlives the database.
    """
    total = 0
    backoff = 0.0
    held: Any = None
    pause = interval
    try:
        while not should_stop() and (until is None or time.monotonic() < until):
            try:
                if connection.connection is None or connection.connection is not held:
                    held = _hold_loop_lock()
                linked = chain_pending(batch_size, wait=False)
            except (OperationalError, InterfaceError) as exc:
                backoff = min(max(backoff * 2, RECONNECT_FIRST_S), max_backoff)
                # The exception's class only: its message may quote the statement.
                logger.warning(
                    "audit chainer lost the database (%s); reconnecting in %.1f s", type(exc).__name__, backoff
                )
                _discard_connection()
                held = None
                _sleep(backoff, should_stop)
                continue
            if backoff:
                logger.warning("audit chainer reconnected to the database")
                backoff = 0.0
            total += linked
            if linked < batch_size:
                if once:
                    break
                pause = interval if linked else min(pause * 2, max(idle_interval, interval))
                _sleep(pause, should_stop)
                close_old_connections()
    finally:
        if held is not None and connection.connection is held:
            _release_loop_lock()
    return total


def chainer_loop_running() -> bool:
    """Whether some process runs a chainer loop on this database right now (``audit_chainer`` or
    the job). Advisory locks belong to a database: another database on the same server (another
    deployment, another test run) holding the same key runs its own chain, not this one's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = 0 AND objid::bigint = %s AND objsubid = 1 AND pid <> pg_backend_pid())",
            [CHAINER_LOOP_LOCK_KEY],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _hold_loop_lock() -> Any:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock_shared(%s)", [CHAINER_LOOP_LOCK_KEY])
    return connection.connection


def _release_loop_lock() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock_shared(%s)", [CHAINER_LOOP_LOCK_KEY])
    except DatabaseError:
        pass  # A lost connection has released it already.


def _discard_connection() -> None:
    # Already broken: closing it is all that is left to do.
    with suppress(DatabaseError):
        connection.close()


# A pause is slept in slices this long, so that a stop request is seen within one. Each wake-up
# from a timed sleep costs the process about a millisecond of CPU on the 2-core VMs
# (docs/performance.md, "At rest").
_SLICE_S = 0.5


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    # Slices: a stop request (a signal handler setting a flag) does not end a time.sleep.
    deadline = time.monotonic() + seconds
    while not should_stop() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, _SLICE_S))


# --- Lag -------------------------------------------------------------------------------


def chain_lag_seconds(now: datetime | None = None) -> float:
    """Age in seconds of the oldest event still waiting for the chainer (0.0 when none).

    One query on two primary keys: the queue's first row and its event.
    """
    with connection.cursor() as cursor:
        cursor.execute(OLDEST_QUEUED_EPOCH_SQL)
        row = cursor.fetchone()
    return lag_of(None if row is None else row[0], now)


# The time (epoch seconds) of the oldest event waiting for the chainer, no row when none waits;
# usable as a scalar subquery (reasoning.health reads it with other figures in one statement).
OLDEST_QUEUED_EPOCH_SQL = (
    "SELECT extract(epoch FROM e.created_at)::float8 FROM audit_pending p"
    " JOIN audit_event e ON e.id = p.event_id ORDER BY p.event_id LIMIT 1"
)


def lag_of(epoch: float | None, now: datetime | None = None) -> float:
    """The chain's lag given the oldest queued event's time (None: nothing queued, 0.0)."""
    return 0.0 if epoch is None else _age(float(epoch), now)


def _age(epoch: float, now: datetime | None) -> float:
    age = (now or timezone.now()).timestamp() - epoch
    # A forged infinite timestamp is verify's business; the lag stays a number.
    return max(age, 0.0) if math.isfinite(age) else 0.0


def id_predicate(ids: list[int]) -> str:
    """A WHERE clause on ``e.id`` selecting ``ids``: runs of near-consecutive ids as ranges,
    the rest in one array. Ranges keep the plan on each partition's primary key at every
    size: the histogram tells the planner which partitions hold them (an ``= ANY`` of
    thousands of ids is estimated per partition from the number of distinct ids, and
    after a bulk load that flips to sequential scans of every partition).
    Only integers are interpolated."""
    runs: list[list[int]] = []
    for value in sorted({int(i) for i in ids}):
        if runs and value - runs[-1][1] <= _RUN_GAP:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    ranges = [(lo, hi) for lo, hi in runs if hi > lo]
    singles = [lo for lo, hi in runs if hi == lo]
    terms = [f"e.id BETWEEN {lo} AND {hi}" for lo, hi in ranges]
    if singles:
        terms.append("e.id = ANY('{" + ",".join(str(i) for i in singles) + "}'::bigint[])")
    return "(" + " OR ".join(terms) + ")" if terms else "false"


# Ids at most this far apart are read as one range (the ids between are read and ignored).
_RUN_GAP = 8
