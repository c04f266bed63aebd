"""The verifier of the audit chain and its Merkle tree (the chainer is ``audit.chain``).

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

import json
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit import merkle, tree
from audit.canonical import GENESIS_HASH, format_created_at, link_hash
from audit.chain import id_predicate, lag_of
from audit.checkpoints import check_note
from audit.notes import NoteError


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
    age = lag_of(oldest.timestamp(), now) if oldest is not None else None
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


# --- Rebuilding the canonical bytes from stored JSON -------------------------------------


# The string encoder json.dumps(..., ensure_ascii=False) itself uses (audit.canonical's form).
_encode_string = json.encoder.encode_basestring


class NumberText(str):
    """A JSON number kept as the exact text it was written with (``1.0`` stays ``1.0``)."""


def load_exact(text: str | bytes) -> Any:
    """Parse JSON keeping every number as its literal text, so re-encoding is lossless."""
    return json.loads(text, parse_int=NumberText, parse_float=NumberText, parse_constant=_refuse_constant)


def dump_exact(value: Any) -> str:
    """Encode a value parsed by ``load_exact`` the way ``audit.canonical.canonical_bytes`` encodes
    it: keys sorted by code point, no whitespace, non-ASCII kept, numbers as written."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, NumberText):
        return str(value)
    if isinstance(value, str):
        return _encode_string(value)
    if isinstance(value, list):
        return "[" + ",".join([dump_exact(item) for item in value]) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ",".join([f"{_encode_string(k)}:{dump_exact(v)}" for k, v in items]) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
