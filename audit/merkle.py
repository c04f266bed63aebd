"""The RFC 6962 / RFC 9162 Merkle tree over the chain, as pure functions (docs/audit-log.md,
"The Merkle tree").

Hashes are 32 raw SHA-256 bytes. A *node* is a complete, aligned subtree keyed
``(level, idx)``: it covers leaves ``[idx·2^level, (idx+1)·2^level)``; level 0 holds the leaf
hashes. Callers ask which keys a computation needs (``nodes_for``, ``frontier_keys``), fetch
them in one query, and pass them in as a mapping; nothing here does I/O.

A *range* ``(a, b)`` is the half-open leaf interval ``[a, b)``. Every proof element is the
MTH of such a range, always a subtree of the RFC's recursive split (``a`` aligned to a power
of two at least ``b - a``), so its MTH is the right fold of its greedy decomposition into
nodes (``subtrees``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "CompactRange",
    "append",
    "consistency_proof",
    "consistency_ranges",
    "frontier_keys",
    "inclusion_proof",
    "inclusion_ranges",
    "leaf_data",
    "leaf_hash",
    "node_hash",
    "nodes_for",
    "range_hash",
    "root",
    "root_from_frontier",
    "subtrees",
    "verify_consistency",
    "verify_inclusion",
]

Key = tuple[int, int]
Range = tuple[int, int]

HASH_SIZE = 32
EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()
"""MTH of the empty tree: SHA-256 of the empty string."""


def leaf_data(event_id: int, canonical: bytes) -> bytes:
    """The leaf data of a chain position: ASCII decimal ``event_id``, LF, ``canonical``."""
    if event_id < 0:
        raise ValueError(f"event_id must be >= 0, got {event_id}")
    return str(int(event_id)).encode("ascii") + b"\n" + canonical


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _check_size(size: int, name: str = "size") -> None:
    if size < 0:
        raise ValueError(f"{name} must be >= 0, got {size}")


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over ``leaf_hashes`` (RFC 6962 §2.1), computed from scratch; a reference for
    tests and small trees."""

    def mth(lo: int, hi: int) -> bytes:
        if hi - lo == 1:
            return leaf_hashes[lo]
        k = _split(hi - lo)
        return node_hash(mth(lo, lo + k), mth(lo + k, hi))

    return mth(0, len(leaf_hashes)) if leaf_hashes else EMPTY_ROOT


def subtrees(start: int, end: int) -> list[Key]:
    """The maximal aligned complete nodes ``(level, idx)`` that tile leaves ``[start, end)``,
    left to right (greedy: at each position the largest aligned node that fits)."""
    _check_size(start, "start")
    if end < start:
        raise ValueError(f"range [{start}, {end}) has end < start")
    keys: list[Key] = []
    pos = start
    while pos < end:
        level = (end - pos).bit_length() - 1
        if pos:
            level = min(level, (pos & -pos).bit_length() - 1)
        keys.append((level, pos >> level))
        pos += 1 << level
    return keys


def range_hash(start: int, end: int, nodes: Mapping[Key, bytes]) -> bytes:
    """MTH(D[start:end]): the right fold of ``subtrees(start, end)`` looked up in ``nodes``.

    Raises KeyError if a node is missing, and ValueError for an empty range not at 0 or a
    range whose MTH is not that fold (its greedy nodes must strictly shrink left to right,
    as in every range ``inclusion_ranges``/``consistency_ranges`` return and ``[0, n)``).
    """
    keys = subtrees(start, end)
    if not keys:
        if start:
            raise ValueError(f"empty range [{start}, {end}) has no tree hash (only [0, 0) does)")
        return EMPTY_ROOT
    if any(left[0] <= right[0] for left, right in pairwise(keys)):
        raise ValueError(f"the MTH of leaves [{start}, {end}) is not a fold of complete subtrees")
    digest = nodes[keys[-1]]
    for key in reversed(keys[:-1]):
        digest = node_hash(nodes[key], digest)
    return digest


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The leaf ranges whose MTHs form the RFC 9162 §2.1.3.1 inclusion proof PATH(index,
    D[0:size]), closest to the leaf first."""
    _check_size(size)
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is not in a tree of {size} leaves")
    ranges: list[Range] = []
    lo, hi = 0, size
    while hi - lo > 1:
        mid = lo + _split(hi - lo)
        if index < mid:
            ranges.append((mid, hi))
            hi = mid
        else:
            ranges.append((lo, mid))
            lo = mid
    ranges.reverse()
    return ranges


def consistency_ranges(old_size: int, new_size: int) -> list[Range]:
    """The leaf ranges whose MTHs form the RFC 9162 §2.1.4.1 consistency proof
    SUBPROOF(old_size, D[0:new_size], true), in proof order; empty when old_size is 0 or
    new_size."""
    _check_size(old_size, "old_size")
    _check_size(new_size, "new_size")
    if old_size > new_size:
        raise ValueError(f"old_size {old_size} is larger than new_size {new_size}")
    if old_size in (0, new_size):
        return []
    ranges: list[Range] = []
    lo, hi, m, whole_old_tree = 0, new_size, old_size, True
    while m != hi - lo:
        mid = lo + _split(hi - lo)
        if m <= mid - lo:
            ranges.append((mid, hi))
            hi = mid
        else:
            ranges.append((lo, mid))
            m -= mid - lo
            lo = mid
            whole_old_tree = False
    if not whole_old_tree:
        ranges.append((lo, hi))
    ranges.reverse()
    return ranges


def nodes_for(ranges: Iterable[Range]) -> set[Key]:
    """Every node key needed to compute the MTH of each range (the union of ``subtrees``)."""
    keys: set[Key] = set()
    for start, end in ranges:
        keys.update(subtrees(start, end))
    return keys


def inclusion_proof(index: int, size: int, nodes: Mapping[Key, bytes]) -> list[bytes]:
    """The RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size`` leaves, from
    the nodes in ``nodes_for(inclusion_ranges(index, size))`` (KeyError if one is missing)."""
    return [range_hash(start, end, nodes) for start, end in inclusion_ranges(index, size)]


def consistency_proof(old_size: int, new_size: int, nodes: Mapping[Key, bytes]) -> list[bytes]:
    """The RFC 9162 consistency proof from ``old_size`` to ``new_size``, from the nodes in
    ``nodes_for(consistency_ranges(old_size, new_size))`` (KeyError if one is missing)."""
    return [range_hash(start, end, nodes) for start, end in consistency_ranges(old_size, new_size)]


def _hashes_ok(*hashes: bytes) -> bool:
    return all(len(digest) == HASH_SIZE for digest in hashes)


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """Whether ``proof`` shows leaf hash ``leaf`` at ``index`` in the tree of ``size`` leaves
    with root ``root`` (RFC 9162 §2.1.3.2). False, never an error, for impossible arguments."""
    if not 0 <= index < size or not _hashes_ok(leaf, root, *proof):
        return False
    fn, sn, digest = index, size - 1, leaf
    for sibling in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            digest = node_hash(sibling, digest)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            digest = node_hash(digest, sibling)
        fn >>= 1
        sn >>= 1
    return sn == 0 and digest == root


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """Whether ``proof`` shows the tree of ``old_size`` leaves with root ``old_root`` is a
    prefix of the tree of ``new_size`` leaves with root ``new_root`` (RFC 9162 §2.1.4.2).

    Equal sizes need an empty proof and equal roots; ``old_size`` 0 needs an empty proof.
    False, never an error, for impossible arguments."""
    if not 0 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof
    if not proof or not _hashes_ok(old_root, new_root, *proof):
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is a node of the new tree
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for element in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(element, fr)
            sr = node_hash(element, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, element)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


def frontier_keys(size: int) -> list[Key]:
    """The nodes on the right edge of the tree of ``size`` leaves, one per set bit of
    ``size``, largest (leftmost) first; they tile ``[0, size)``."""
    _check_size(size)
    keys: list[Key] = []
    offset = 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            keys.append((level, offset >> level))
            offset += 1 << level
    return keys


def append(size: int, frontier: Mapping[Key, bytes], new_leaves: Sequence[bytes]) -> list[tuple[int, int, bytes]]:
    """The nodes ``(level, idx, hash)`` created by appending ``new_leaves`` (leaf hashes) to
    the tree of ``size`` leaves whose ``frontier_keys(size)`` nodes are in ``frontier``: each
    new leaf and every parent it completes, in creation order (KeyError if a frontier node
    is missing)."""
    for digest in new_leaves:
        if len(digest) != HASH_SIZE:
            raise ValueError(f"a leaf hash must be {HASH_SIZE} bytes, got {len(digest)}")
    edge = [(level, idx, frontier[(level, idx)]) for level, idx in frontier_keys(size)]
    created: list[tuple[int, int, bytes]] = []
    for offset, digest in enumerate(new_leaves):
        node = (0, size + offset, digest)
        created.append(node)
        while edge and edge[-1][0] == node[0]:
            left = edge.pop()
            node = (node[0] + 1, node[1] >> 1, node_hash(left[2], node[2]))
            created.append(node)
        edge.append(node)
    return created


def root_from_frontier(size: int, frontier: Mapping[Key, bytes]) -> bytes:
    """MTH of the tree of ``size`` leaves from its ``frontier_keys(size)`` nodes."""
    keys = frontier_keys(size)
    if not keys:
        return EMPTY_ROOT
    digest = frontier[keys[-1]]
    for key in reversed(keys[:-1]):
        digest = node_hash(frontier[key], digest)
    return digest


class CompactRange:
    """The right edge of a tree grown one leaf at a time in memory: O(log n) space, the
    root at any point (used to recompute roots while walking the chain)."""

    def __init__(self) -> None:
        self.size = 0
        self._edge: list[tuple[int, bytes]] = []  # (level, hash), largest first

    @classmethod
    def from_frontier(cls, size: int, frontier: Mapping[Key, bytes]) -> CompactRange:
        """The range of the tree of ``size`` leaves from its ``frontier_keys(size)`` nodes
        (KeyError if one is missing), to go on appending from there."""
        grown = cls()
        grown._edge = [(level, frontier[(level, idx)]) for level, idx in frontier_keys(size)]
        grown.size = size
        return grown

    def append(self, leaf: bytes) -> None:
        """Add the next leaf hash."""
        level, digest = 0, leaf
        while self._edge and self._edge[-1][0] == level:
            digest = node_hash(self._edge.pop()[1], digest)
            level += 1
        self._edge.append((level, digest))
        self.size += 1

    def root(self) -> bytes:
        """MTH of the leaves appended so far."""
        if not self._edge:
            return EMPTY_ROOT
        digest = self._edge[-1][1]
        for _, left in reversed(self._edge[:-1]):
            digest = node_hash(left, digest)
        return digest
