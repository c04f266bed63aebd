"""The Merkle tree over the chain, in the database (``audit_tree_node``).

``audit.merkle`` computes; this module reads and writes the complete subtrees it needs.
Every read of a root or a proof is one query on the node table's primary key, whatever
the size of the tree (at most about 2·log₂ n nodes). The chainer calls ``extend`` in the
transaction that appends the links, so the tree has exactly as many leaves as the chain
has links.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from audit import merkle
from core.bulk import bytea_array, int_array, opaque_array

Key = tuple[int, int]


def tree_size(cursor: Any | None = None) -> int:
    """The number of leaves: the chain's last position (0 for an empty chain)."""
    if cursor is None:
        with connection.cursor() as own:
            return tree_size(own)
    cursor.execute("SELECT coalesce(max(position), 0) FROM audit_chain_link")
    row = cursor.fetchone()
    return int(row[0]) if row else 0


# The arrays are opaque to the planner, so that PostgreSQL plans it once per connection, not at
# every batch the chainer links (core.bulk.opaque_array).
_FETCH_SQL = f"""
SELECT n.level, n.idx, n.hash
  FROM audit_tree_node n JOIN unnest({opaque_array("smallint[]")}, {opaque_array("bigint[]")}) AS k(level, idx)
 USING (level, idx)
"""  # noqa: S608 (constants)


def fetch(keys: Iterable[Key], cursor: Any | None = None) -> dict[Key, bytes]:
    """The stored nodes among ``keys``, in one query (missing ones are left out)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    if cursor is None:
        with connection.cursor() as own:
            return fetch(wanted, own)
    cursor.execute(_FETCH_SQL, [int_array(level for level, _ in wanted), int_array(idx for _, idx in wanted)])
    return {(int(level), int(idx)): bytes(digest) for level, idx, digest in cursor.fetchall()}


def edge(size: int, cursor: Any | None = None) -> list[tuple[int, bytes]]:
    """The stored right edge of the tree of ``size`` leaves, ``(level, hash)`` largest subtree
    first (``merkle.frontier_keys``); KeyError when a node is missing."""
    keys = merkle.frontier_keys(size)
    nodes = fetch(keys, cursor)
    return [(level, bytes(nodes[(level, idx)])) for level, idx in keys]


def extend(cursor: Any, size: int, leaves: Sequence[bytes]) -> None:
    """Append ``leaves`` (leaf hashes) to the tree of ``size`` leaves: store each leaf and
    every subtree it completes (one read of the right edge, one insert)."""
    if not leaves:
        return
    frontier = fetch(merkle.frontier_keys(size), cursor)
    nodes = merkle.append(size, frontier, leaves)
    cursor.execute(
        "INSERT INTO audit_tree_node (level, idx, hash)"
        " SELECT * FROM unnest(%s::smallint[], %s::bigint[], %s::bytea[])",
        # Array literals: a list would be dumped element by element in Python (core.bulk).
        [
            int_array(level for level, _, _ in nodes),
            int_array(idx for _, idx, _ in nodes),
            bytea_array(digest for _, _, digest in nodes),
        ],
    )


class MissingNodes(LookupError):
    """The node table lacks subtrees the tree of that size needs (tampered, or not built)."""


def _fold(keys: set[Key], cursor: Any | None) -> dict[Key, bytes]:
    nodes = fetch(keys, cursor)
    if len(nodes) != len(keys):
        missing = sorted(keys - nodes.keys())[:3]
        raise MissingNodes(f"the tree lacks node(s) {missing}")
    return nodes


def root(size: int, cursor: Any | None = None) -> bytes:
    """The tree hash of the first ``size`` leaves."""
    if size == 0:
        return merkle.EMPTY_ROOT
    nodes = _fold(merkle.nodes_for([(0, size)]), cursor)
    return merkle.range_hash(0, size, nodes)


def inclusion_proof(index: int, size: int, cursor: Any | None = None) -> list[bytes]:
    nodes = _fold(merkle.nodes_for(merkle.inclusion_ranges(index, size)), cursor)
    return merkle.inclusion_proof(index, size, nodes)


def consistency_proof(old_size: int, new_size: int, cursor: Any | None = None) -> list[bytes]:
    nodes = _fold(merkle.nodes_for(merkle.consistency_ranges(old_size, new_size)), cursor)
    return merkle.consistency_proof(old_size, new_size, nodes)


def leaf_hash(event_id: int, canonical: bytes) -> bytes:
    return merkle.leaf_hash(merkle.leaf_data(event_id, canonical))


def rebuild(cursor: Any, batch: int = 5000) -> int:
    """Build the node table from the links and their events (migration 0004, for chains
    linked before the tree existed). The table must be empty. Returns the leaves added."""
    cursor.execute("SELECT count(*) FROM audit_tree_node")
    row = cursor.fetchone()
    if row and row[0]:
        raise RuntimeError("audit_tree_node is not empty")
    size = 0
    while True:
        cursor.execute(
            # A link whose event is missing gets the leaf of empty bytes: audit_verify names it.
            "SELECT l.event_id, coalesce(e.canonical, ''::bytea) FROM audit_chain_link l"
            " LEFT JOIN audit_event e ON e.id = l.event_id"
            " WHERE l.position > %s ORDER BY l.position LIMIT %s",
            [size, batch],
        )
        rows = cursor.fetchall()
        if not rows:
            return size
        extend(cursor, size, [leaf_hash(event_id, bytes(canonical)) for event_id, canonical in rows])
        size += len(rows)
