"""The chainer and the verifier.

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

Verification (``verify_chain``) reads everything in one repeatable-read, read-only
snapshot. It walks the links in position order, a chunk at a time (constant memory,
indexed lookups only, so it streams at any size), and checks, for each link: the
position is the next one, ``prev_hash`` is the previous link's hash, the event exists,
the hash recomputes from its canonical bytes, and the canonical bytes rebuilt from its
columns equal the stored ones byte for byte. Then it checks every event in no link the
same way (those must be queued), and the queue itself (rows without an event, rows for
linked events). ``docs/audit-log.md`` lists every break it names.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connection, transaction
from django.utils import timezone

from audit import merkle, tree
from audit.actions import Action
from audit.canonical import GENESIS_HASH, dump_exact, format_created_at, link_hash, load_exact
from audit.services import record

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
            # linked_at is stamped by the database (trigger audit_chain_link_stamp).
            cursor.executemany(
                "INSERT INTO audit_chain_link (position, event_id, prev_hash, hash) VALUES (%s, %s, %s, %s)",
                links,
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


def run_chainer(
    should_stop: Callable[[], bool],
    *,
    interval: float = 0.05,
    batch_size: int = 1000,
    until: float | None = None,
    once: bool = False,
    max_backoff: float = RECONNECT_MAX_S,
) -> int:
    """Poll and link until ``should_stop()`` (or ``time.monotonic()`` passes ``until``, or,
    with ``once``, the queue is drained); return the rows consumed.

    A lost database connection (a restart, a failover, a terminated backend) is logged,
    the connection discarded, and the loop retries with exponential backoff capped at
    ``max_backoff`` seconds: the chainer outlives the database.
    """
    total = 0
    backoff = 0.0
    held: Any = None
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
                _sleep(interval, should_stop)
                close_old_connections()
    finally:
        if held is not None and connection.connection is held:
            _release_loop_lock()
    return total


def chainer_loop_running() -> bool:
    """Whether some process runs a chainer loop right now (``audit_chainer`` or the job)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
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


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    # Short slices, so a stop request (a signal handler setting a flag) is seen quickly.
    deadline = time.monotonic() + seconds
    while not should_stop() and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(left, 0.1))


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


# --- Verification ----------------------------------------------------------------------


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
class CheckpointSeen:
    id: int
    tree_size: int
    created_at: datetime
    # When the first link it does not cover was made (None: it covers the whole chain).
    first_unsigned_linked_at: datetime | None


@dataclass(frozen=True)
class VerifyResult:
    linked: int
    pending: int
    broken: ChainBreak | None
    # Age of the oldest queued event at verification time; None when nothing is queued.
    oldest_pending_age_s: float | None = None
    # The signed checkpoints checked against the tree, and the latest one (None: none yet).
    checkpoints: int = 0
    latest_checkpoint: CheckpointSeen | None = None
    # The chain position the walk started after (0: the genesis).
    start: int = 0

    @property
    def ok(self) -> bool:
        return self.broken is None


# The event's columns as the verifier reads them. A created_at that no datetime can hold
# (infinity, BC, year 10000+) is read as NULL and named as a break instead of crashing.
_EVENT_COLUMNS = """
    e.action, e.actor, e.target_type, e.target_id, e.payload::text,
    CASE WHEN e.created_at >= '0001-01-01 00:00:00+00' AND e.created_at < '10000-01-01 00:00:00+00'
         THEN e.created_at END,
    e.canonical
"""
_EVENT_WIDTH = 7

# The order in which an altered column is named when several differ.
_FIELDS = ("action", "actor", "target_type", "target_id", "payload", "created_at")


def verify_chain(
    on_progress: Callable[[int], object] | None = None,
    chunk: int = 2000,
    *,
    since_checkpoint: bool = False,
    on_start: Callable[[int], object] | None = None,
) -> VerifyResult:
    """Check the trail in one snapshot; report the first break found.

    Order: the links (stopping at the first bad one), then the events in no link, then
    the queue. Events in no link but queued are the pending tail, not a break, as long
    as their columns match their canonical bytes.

    The walk starts at the genesis, or after the last position dropped by retention
    (``audit_dropped_partition``), or with ``since_checkpoint`` after the latest signed
    checkpoint: then the stored tree's right edge at the start must lead to a signed root
    (at once, or at the first checkpoint after it), and only what follows is read, so the
    time is proportional to the events added since.
    """
    now = timezone.now()
    with read_snapshot():
        stored = _checkpoints()
        start = _start(stored, since_checkpoint)
        if on_start:
            on_start(start)
        roots: dict[int, bytes] = {}
        sizes = {row[1] for row in stored if row[1] >= start}
        linked, broken = _walk_links(on_progress, chunk, sizes, roots, start)
        if broken is None:
            broken = _check_tree(linked, roots.get(linked, merkle.EMPTY_ROOT), start)
        if broken is None:
            broken = _check_checkpoints(stored, linked, roots, start)
        first_id = _first_unlinked_candidate(start) if since_checkpoint else 0
        pending, oldest, tail_break = _check_unlinked(chunk, first_id)
        broken = broken or tail_break or _check_queue()
        latest = _latest_seen(stored, linked)
    age = _age(oldest.timestamp(), now) if oldest is not None else None
    return VerifyResult(
        linked=linked,
        pending=pending,
        broken=broken,
        oldest_pending_age_s=age,
        checkpoints=len(stored),
        latest_checkpoint=latest,
        start=start,
    )


def _start(stored: list[tuple[int, int, bytes, str, str, datetime]], since_checkpoint: bool) -> int:
    """The chain position the walk starts after."""
    start = dropped_through()
    if since_checkpoint and stored:
        start = max(start, stored[-1][1])
    return start


def dropped_through() -> int:
    """The last chain position whose month retention dropped (0: none): the dropped months
    are one prefix of the chain (audit.retention)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(last_position), 0) FROM audit_dropped_partition")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _first_unlinked_candidate(start: int) -> int:
    """The lowest event id an unlinked event can have, verifying after ``start``: the queue's
    oldest, or past the last linked event (an event written under an old id without a queue
    row is a break only the full walk finds)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT least((SELECT min(event_id) FROM audit_pending),"
            " (SELECT max(event_id) + 1 FROM audit_chain_link WHERE position >= %s))",
            [start],
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


@contextmanager
def read_snapshot() -> Iterator[None]:
    if connection.in_atomic_block:
        # Inside the caller's transaction (a test's) the isolation level is already set.
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _server_cursor(name: str, chunk: int, sql: str) -> Generator[tuple[Any, ...], None, None]:
    # A named (server-side) cursor inside the snapshot streams rows in chunks.
    connection.ensure_connection()
    assert connection.connection is not None
    with connection.connection.cursor(name=name) as cursor:
        cursor.itersize = chunk
        cursor.execute(sql)
        yield from cursor


def _walk_links(
    on_progress: Callable[[int], object] | None,
    chunk: int,
    sizes: set[int],
    roots: dict[int, bytes],
    start: int = 0,
) -> tuple[int, ChainBreak | None]:
    """Walk the links after position ``start``; also recompute every leaf of the tree,
    compare it with the stored one, and keep the root at each size in ``sizes`` (and at
    the end) in ``roots``. Returns the last position reached and the first break."""
    broken: ChainBreak | None = None
    expected_position = start + 1
    prev_hash = GENESIS_HASH
    edge = merkle.CompactRange()
    if start:
        with connection.cursor() as cursor:
            cursor.execute("SELECT hash FROM audit_chain_link WHERE position = %s", [start])
            row = cursor.fetchone()
        if row is None:
            return start, ChainBreak(start, None, "the link the verification starts from is missing")
        prev_hash = row[0]
        try:
            edge = merkle.CompactRange.from_frontier(start, tree.fetch(merkle.frontier_keys(start)))
        except KeyError:
            return start, ChainBreak(start, None, "the Merkle tree's nodes where the verification starts are missing")
        if start in sizes:
            roots[start] = edge.root()
    checked = start
    for links, events in linked_chunks(start, chunk):
        leaves = _leaves(links[0][0] - 1, links[-1][0] - 1)
        before = checked
        for position, event_id, link_prev, link_digest in links:
            found = events.get(event_id, [])
            if len(found) > 1:
                # The primary key of the partitioned table is (id, created_at), so two rows
                # can share an id; the chain names one.
                broken = ChainBreak(position, event_id, "a second event was written under this event's sequence number")
                break
            columns = list(found[0]) if found else [None] * _EVENT_WIDTH
            broken = _check_link(
                expected_position, prev_hash, position, event_id, link_prev, link_digest, bool(found), columns
            )
            if broken:
                break
            leaf = tree.leaf_hash(event_id, bytes(columns[-1]))
            stored_leaf = leaves.get(position - 1)
            if stored_leaf is None or bytes(stored_leaf) != leaf:
                broken = ChainBreak(position, event_id, "the Merkle tree's leaf does not match the event")
                break
            edge.append(leaf)
            if position in sizes:
                roots[position] = edge.root()
            prev_hash = link_digest
            expected_position += 1
            checked += 1
        if on_progress:
            on_progress(checked - before)
        if broken:
            break
    if broken is None and checked:
        roots[checked] = edge.root()
    return checked, broken


Link = tuple[int, int, str, str]


def linked_chunks(
    after: int, chunk: int, until: int | None = None, columns: str = _EVENT_COLUMNS
) -> Iterator[tuple[list[Link], dict[int, list[tuple[Any, ...]]]]]:
    """The links after position ``after`` (up to ``until``) in position order, ``chunk`` at a
    time, each chunk with its events' ``columns`` by id. Keyset chunks of indexed queries
    (links by position, their events by id range), so they stream from the first link at any
    size; inside ``read_snapshot`` the chunks are consistent with each other."""
    while until is None or after < until:
        limit = chunk if until is None else min(chunk, until - after)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT position, event_id, prev_hash, hash FROM audit_chain_link"
                " WHERE position > %s ORDER BY position LIMIT %s",
                [after, limit],
            )
            links = cursor.fetchall()
        if not links:
            return
        yield links, _events_by_id([link[1] for link in links], columns)
        after = links[-1][0]


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


def _events_by_id(ids: list[int], columns: str) -> dict[int, list[tuple[Any, ...]]]:
    """The events under ``ids``, as ``columns``, by id (a list: two rows can share an id)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT e.id, {columns} FROM audit_event e WHERE {id_predicate(ids)}")  # noqa: S608
        found: dict[int, list[tuple[Any, ...]]] = {}
        for event_id, *columns in cursor.fetchall():
            found.setdefault(event_id, []).append(tuple(columns))
    return found


def _leaves(first: int, last: int) -> dict[int, bytes]:
    """The stored leaves with an index in [first, last]."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT idx, hash FROM audit_tree_node WHERE level = 0 AND idx BETWEEN %s AND %s", [first, last])
        return {idx: digest for idx, digest in cursor.fetchall()}


def _check_link(
    expected_position: int,
    prev_hash: str,
    position: int,
    event_id: int,
    link_prev: str,
    link_digest: str,
    exists: bool,
    columns: list[Any],
) -> ChainBreak | None:
    if position != expected_position:
        return ChainBreak(expected_position, None, f"link missing (next link found is position {position})")
    if link_prev != prev_hash:
        return ChainBreak(position, event_id, "prev_hash does not match the previous link's hash")
    canonical = columns[-1]
    if not exists or canonical is None:
        return ChainBreak(position, event_id, "the linked event is missing")
    if link_hash(prev_hash, position, event_id, bytes(canonical)) != link_digest:
        return ChainBreak(position, event_id, "hash does not match the event's canonical bytes")
    reason = _altered(*columns)
    return ChainBreak(position, event_id, reason) if reason else None


def _checkpoints() -> list[tuple[int, int, bytes, str, str, datetime]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, tree_size, root_hash, origin, note, created_at FROM audit_checkpoint ORDER BY id")
        return [(int(a), int(b), bytes(c), d, e, f) for a, b, c, d, e, f in cursor.fetchall()]


def _check_tree(linked: int, root: bytes, start: int = 0) -> ChainBreak | None:
    """The stored tree: its root from the stored nodes equals the one recomputed from the
    events, and every stored interior node over leaves after ``start`` is the hash of its
    two children."""
    try:
        stored_root = tree.root(linked)
    except tree.MissingNodes as exc:
        return ChainBreak(None, None, f"the Merkle tree is incomplete: {exc}")
    if stored_root != root:
        return ChainBreak(None, None, "the Merkle tree's stored nodes do not hash to the events' root")
    level = 0
    while (1 << (level + 1)) <= linked:
        bad = _check_level(level, start >> (level + 1))
        if bad is not None:
            return ChainBreak(None, None, f"the Merkle tree's node {level + 1}/{bad} is not the hash of its children")
        level += 1
    return None


def _check_level(level: int, first: int = 0) -> int | None:
    """The first node of ``level + 1`` from index ``first`` on that is not the hash of its
    two children, or None."""
    children = _server_cursor(
        f"audit_verify_level_{level}",
        4000,
        f"SELECT idx, hash FROM audit_tree_node WHERE level = {int(level)} AND idx >= {2 * int(first)}"  # noqa: S608
        " ORDER BY idx",
    )
    parents = _server_cursor(
        f"audit_verify_parent_{level}",
        2000,
        f"SELECT idx, hash FROM audit_tree_node WHERE level = {int(level) + 1} AND idx >= {int(first)}"  # noqa: S608
        " ORDER BY idx",
    )
    try:
        for idx, digest in parents:
            left, right = next(children, None), next(children, None)
            if left is None or right is None or left[0] != 2 * idx or right[0] != 2 * idx + 1:
                return int(idx)
            if merkle.node_hash(bytes(left[1]), bytes(right[1])) != bytes(digest):
                return int(idx)
    finally:
        children.close()
        parents.close()
    return None


def _check_checkpoints(
    stored: list[tuple[int, int, bytes, str, str, datetime]], linked: int, roots: dict[int, bytes], start: int = 0
) -> ChainBreak | None:
    """Each stored checkpoint of at least ``start`` leaves: signed by a published key, its
    note saying what its row says, and its root equal to the tree recomputed from the events
    at its size. Walking from ``start`` > 0, one of them must exist (it vouches for the
    tree's edge the walk started from)."""
    from audit.checkpoints import check_note
    from audit.notes import NoteError

    checked = [row for row in stored if row[1] >= start]
    if start and not checked:
        return ChainBreak(start, None, "no signed checkpoint covers the position the verification starts from")
    for checkpoint_id, size, root_hash, origin, note, _ in checked:
        where = f"checkpoint {checkpoint_id} (tree size {size})"
        try:
            signed, verifier = check_note(note)
        except NoteError as exc:
            return ChainBreak(None, None, f"{where}: the note does not parse ({exc})")
        if verifier is None:
            return ChainBreak(None, None, f"{where}: no valid signature by a published key")
        if (signed.origin, signed.tree_size, signed.root_hash) != (origin, size, root_hash):
            return ChainBreak(None, None, f"{where}: the stored columns differ from the signed note")
        if size > linked:
            return ChainBreak(None, None, f"{where}: signed {size} leaves but the chain has {linked} links")
        expected = roots.get(size, merkle.EMPTY_ROOT if size == 0 else None)
        if expected != root_hash:
            return ChainBreak(None, None, f"{where}: the signed root differs from the tree rebuilt from the events")
    return None


def _latest_seen(stored: list[tuple[int, int, bytes, str, str, datetime]], linked: int) -> CheckpointSeen | None:
    if not stored:
        return None
    checkpoint_id, size, _, _, _, created_at = stored[-1]
    first_unsigned = None
    if size < linked:
        with connection.cursor() as cursor:
            cursor.execute("SELECT linked_at FROM audit_chain_link WHERE position = %s", [size + 1])
            row = cursor.fetchone()
        first_unsigned = row[0] if row else None
    return CheckpointSeen(checkpoint_id, size, created_at, first_unsigned)


def _check_unlinked(chunk: int, first_id: int = 0) -> tuple[int, datetime | None, ChainBreak | None]:
    """Events in no link (with an id of at least ``first_id``): each must be queued and
    match its canonical bytes."""
    pending = 0
    oldest: datetime | None = None
    rows = _server_cursor(
        "audit_verify_unlinked",
        chunk,
        f"""
        SELECT e.id, p.event_id IS NOT NULL, {_EVENT_COLUMNS}
        FROM audit_event e LEFT JOIN audit_pending p ON p.event_id = e.id
        WHERE e.id >= {int(first_id)} AND NOT EXISTS (SELECT 1 FROM audit_chain_link l WHERE l.event_id = e.id)
        ORDER BY e.id
        """,  # noqa: S608
    )
    broken: ChainBreak | None = None
    for event_id, queued, *columns in rows:
        if not queued:
            broken = ChainBreak(None, event_id, "event is not in the chain and not queued for chaining")
            break
        reason = _altered(*columns)
        if reason:
            broken = ChainBreak(None, event_id, reason)
            break
        pending += 1
        created = columns[5]
        if oldest is None or created < oldest:
            oldest = created
    rows.close()
    return pending, oldest, broken


def _check_queue() -> ChainBreak | None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT p.event_id FROM audit_pending p
            WHERE NOT EXISTS (SELECT 1 FROM audit_event e WHERE e.id = p.event_id)
            ORDER BY p.event_id LIMIT 1
            """
        )
        row = cursor.fetchone()
        if row:
            return ChainBreak(None, int(row[0]), "queued for chaining but the event does not exist")
        cursor.execute(
            """
            SELECT l.position, p.event_id FROM audit_pending p JOIN audit_chain_link l ON l.event_id = p.event_id
            ORDER BY p.event_id LIMIT 1
            """
        )
        row = cursor.fetchone()
    if row:
        return ChainBreak(int(row[0]), int(row[1]), "event is already linked but queued for chaining again")
    return None


def _altered(
    action: str,
    actor: str,
    target_type: str,
    target_id: str,
    payload: str,
    created_at: datetime | None,
    canonical: bytes | memoryview,
) -> str | None:
    """Which column no longer matches the stored canonical bytes, or None when the bytes
    rebuilt from the columns equal them exactly."""
    if created_at is None:
        return "column 'created_at' was altered after the event was written (timestamp out of range)"
    stored = bytes(canonical)
    rebuilt_document = {
        "action": action,
        "actor": actor,
        "created_at": format_created_at(created_at),
        "payload": load_exact(payload),
        "target_id": target_id,
        "target_type": target_type,
    }
    if dump_exact(rebuilt_document).encode() == stored:
        return None
    # Slow path, only for a break: name the first column that differs.
    try:
        stored_document = load_exact(stored.decode())
    except ValueError:
        stored_document = None
    if isinstance(stored_document, dict):
        for field in _FIELDS:
            if field not in stored_document or dump_exact(stored_document[field]) != dump_exact(
                rebuilt_document[field]
            ):
                return f"column {field!r} was altered after the event was written"
    return "canonical bytes are not in canonical form"
