"""``audit.merkle``: the RFC 6962 / RFC 9162 tree as pure functions (docs/audit-log.md,
"The Merkle tree"). No database.

The published vectors are from transparency-dev/merkle: ``testonly/constants.go`` (leaf
inputs, node hashes, roots, compact trees), ``proof/verify_test.go`` (inclusion and
consistency proofs, and the corruptions that must not verify) and ``proof/proof_test.go``
(which nodes a proof is made of). Everything else is checked against an independent
recursive RFC 9162 implementation (MTH, PATH, SUBPROOF) written here.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import merkle

Key = tuple[int, int]
Nodes = dict[Key, bytes]


def dh(text: str) -> bytes:
    return bytes.fromhex(text)


# --- Published vectors (transparency-dev/merkle) -------------------------------------------

# testonly/constants.go LeafInputs()
LEAF_INPUTS = [
    dh(""),
    dh("00"),
    dh("10"),
    dh("2021"),
    dh("3031"),
    dh("40414243"),
    dh("5051525354555657"),
    dh("606162636465666768696a6b6c6d6e6f"),
]

# testonly/constants.go RootHashes(): by tree size, from 0.
ROOTS = [
    dh("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    dh("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
    dh("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
    dh("aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"),
    dh("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    dh("4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4"),
    dh("76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef"),
    dh("ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c"),
    dh("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
]

# testonly/constants.go NodeHashes(): every complete subtree of the 8-leaf tree, (level, idx).
NODE_HASHES: Nodes = {
    (0, 0): dh("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
    (0, 1): dh("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
    (0, 2): dh("0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7"),
    (0, 3): dh("07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7"),
    (0, 4): dh("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
    (0, 5): dh("4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658"),
    (0, 6): dh("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
    (0, 7): dh("46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1"),
    (1, 0): dh("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
    (1, 1): dh("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
    (1, 2): dh("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
    (1, 3): dh("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
    (2, 0): dh("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    (2, 1): dh("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
    (3, 0): dh("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
}

# testonly/constants.go CompactTrees(): the right-edge nodes of each tree size, as keys.
FRONTIERS: list[list[Key]] = [
    [],
    [(0, 0)],
    [(1, 0)],
    [(1, 0), (0, 2)],
    [(2, 0)],
    [(2, 0), (0, 4)],
    [(2, 0), (1, 2)],
    [(2, 0), (1, 2), (0, 6)],
    [(3, 0)],
]

# proof/verify_test.go inclusionProofs (its leaf numbers are 1-based; these are 0-based).
INCLUSION_VECTORS: list[tuple[int, int, list[bytes]]] = [
    (
        0,
        8,
        [
            dh("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            dh("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            dh("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        5,
        8,
        [
            dh("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            dh("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            dh("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (2, 3, [dh("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")]),
    (
        1,
        5,
        [
            dh("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            dh("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            dh("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
]

# proof/verify_test.go consistencyProofs.
CONSISTENCY_VECTORS: list[tuple[int, int, list[bytes]]] = [
    (1, 1, []),
    (
        1,
        8,
        [
            dh("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            dh("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            dh("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        6,
        8,
        [
            dh("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            dh("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            dh("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (
        2,
        5,
        [
            dh("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            dh("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
    (
        6,
        7,
        [
            dh("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            dh("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
            dh("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
]

# proof/proof_test.go TestInclusion: (size, index) -> the stored nodes the proof is built from.
INCLUSION_NODES: dict[tuple[int, int], set[Key]] = {
    (1, 0): set(),
    (2, 0): {(0, 1)},
    (2, 1): {(0, 0)},
    (3, 1): {(0, 0), (0, 2)},
    (7, 0): {(0, 1), (1, 1), (0, 6), (1, 2)},
    (7, 1): {(0, 0), (1, 1), (0, 6), (1, 2)},
    (7, 2): {(0, 3), (1, 0), (0, 6), (1, 2)},
    (7, 3): {(0, 2), (1, 0), (0, 6), (1, 2)},
    (7, 4): {(0, 5), (0, 6), (2, 0)},
    (7, 5): {(0, 4), (0, 6), (2, 0)},
    (7, 6): {(1, 2), (2, 0)},
    (4, 2): {(0, 3), (1, 0)},
    (5, 3): {(0, 2), (1, 0), (0, 4)},
    (6, 3): {(0, 2), (1, 0), (1, 2)},
    (6, 4): {(0, 5), (2, 0)},
    (15, 10): {(0, 11), (1, 4), (0, 14), (1, 6), (3, 0)},
    (31, 24): {(0, 25), (1, 13), (0, 30), (1, 14), (3, 2), (4, 0)},
    (95, 81): {(0, 80), (1, 41), (2, 21), (0, 94), (1, 46), (2, 22), (4, 4), (6, 0)},
}

# proof/proof_test.go TestConsistency: (size1, size2) -> the stored nodes.
CONSISTENCY_NODES: dict[tuple[int, int], set[Key]] = {
    (1, 2): {(0, 1)},
    (1, 4): {(0, 1), (1, 1)},
    (1, 6): {(0, 1), (1, 1), (1, 2)},
    (2, 3): {(0, 2)},
    (2, 8): {(1, 1), (2, 1)},
    (3, 7): {(0, 2), (0, 3), (1, 0), (0, 6), (1, 2)},
    (4, 7): {(0, 6), (1, 2)},
    (5, 7): {(0, 4), (0, 5), (0, 6), (2, 0)},
    (6, 7): {(1, 2), (0, 6), (2, 0)},
    (7, 8): {(0, 6), (0, 7), (1, 2), (2, 0)},
    (1, 1): set(),
    (2, 2): set(),
    (3, 3): set(),
    (4, 4): set(),
    (5, 5): set(),
    (7, 7): set(),
    (8, 8): set(),
    (2, 4): {(1, 1)},
    (3, 5): {(0, 2), (0, 3), (1, 0), (0, 4)},
    (3, 6): {(0, 2), (0, 3), (1, 0), (1, 2)},
    (4, 6): {(1, 2)},
    (1, 7): {(0, 1), (1, 1), (0, 6), (1, 2)},
    (10, 15): {(1, 4), (1, 5), (0, 14), (1, 6), (3, 0)},
    (24, 31): {(3, 2), (0, 30), (1, 14), (2, 6), (4, 0)},
    (81, 95): {(0, 80), (0, 81), (1, 41), (2, 21), (0, 94), (1, 46), (2, 22), (4, 4), (6, 0)},
}

# proof/verify_test.go sha256SomeHash.
SOME_HASH = dh("abacaba000000000000000000000000000000000000000000060061e00123456")
EMPTY_HASH = dh("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


# --- An independent reference (RFC 9162 §2.1, recursive) ----------------------------------


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


class Reference:
    """MTH, PATH and SUBPROOF over leaf hashes, straight from the RFC's recursive definitions."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.leaves = list(leaves)
        self._mth: dict[tuple[int, int], bytes] = {}

    @staticmethod
    def split(n: int) -> int:
        k = 1
        while k * 2 < n:
            k *= 2
        return k

    def mth(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi])."""
        if (lo, hi) not in self._mth:
            n = hi - lo
            if n == 0:
                digest = sha(b"")
            elif n == 1:
                digest = self.leaves[lo]
            else:
                k = self.split(n)
                digest = sha(b"\x01" + self.mth(lo, lo + k) + self.mth(lo + k, hi))
            self._mth[(lo, hi)] = digest
        return self._mth[(lo, hi)]

    def path(self, m: int, lo: int, hi: int) -> list[bytes]:
        """PATH(m, D[lo:hi]), m relative to lo."""
        n = hi - lo
        if n == 1:
            return []
        k = self.split(n)
        if m < k:
            return [*self.path(m, lo, lo + k), self.mth(lo + k, hi)]
        return [*self.path(m - k, lo + k, hi), self.mth(lo, lo + k)]

    def subproof(self, m: int, lo: int, hi: int, whole: bool) -> list[bytes]:
        """SUBPROOF(m, D[lo:hi], b), m relative to lo."""
        n = hi - lo
        if m == n:
            return [] if whole else [self.mth(lo, hi)]
        k = self.split(n)
        if m <= k:
            return [*self.subproof(m, lo, lo + k, whole), self.mth(lo + k, hi)]
        return [*self.subproof(m - k, lo + k, hi, False), self.mth(lo, lo + k)]

    def consistency(self, old: int, new: int) -> list[bytes]:
        return [] if old in (0, new) else self.subproof(old, 0, new, True)


def make_leaves(n: int, salt: bytes = b"") -> list[bytes]:
    """Distinct leaf hashes of chain-like leaf data (event id, LF, payload)."""
    return [sha(b"\x00" + str(i + 1).encode() + b"\n" + salt + i.to_bytes(4, "big")) for i in range(n)]


def build(leaves: Sequence[bytes], batches: Sequence[int] = ()) -> Nodes:
    """The node table, as a caller builds it: append batch after batch, passing only the
    frontier nodes of the current size, never overwriting a stored node."""
    table: Nodes = {}
    size = 0
    cuts = [*batches, len(leaves)]
    for cut in cuts:
        cut = min(max(cut, size), len(leaves))
        frontier = {key: table[key] for key in merkle.frontier_keys(size)}
        for level, idx, digest in merkle.append(size, frontier, leaves[size:cut]):
            assert (level, idx) not in table
            table[(level, idx)] = digest
        size = cut
    return table


def random_batches(n: int, rng: random.Random) -> list[int]:
    return sorted(rng.randint(0, n) for _ in range(rng.randint(0, 6)))


def flipped(proof: Sequence[bytes], i: int, bit: int) -> list[bytes]:
    wrong = list(proof)
    wrong[i] = bytes([wrong[i][0] ^ bit]) + wrong[i][1:]
    return wrong


def inclusion_probes(
    index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes
) -> list[tuple[str, int, int, bytes, list[bytes], bytes]]:
    """proof/verify_test.go corruptInclusionProof: none of these may verify."""
    probes = [
        ("index - 1", index - 1, size, leaf, proof, root),
        ("index + 1", index + 1, size, leaf, proof, root),
        ("index ^ 2", index ^ 2, size, leaf, proof, root),
        ("size * 2", index, size * 2, leaf, proof, root),
        ("size / 2", index, size // 2, leaf, proof, root),
        ("wrong leaf", index, size, b"WrongLeaf", proof, root),
        ("other leaf", index, size, sha(b"\x00other"), proof, root),
        ("empty root", index, size, leaf, proof, EMPTY_HASH),
        ("random root", index, size, leaf, proof, SOME_HASH),
        ("trailing garbage", index, size, leaf, [*proof, b""], root),
        ("trailing root", index, size, leaf, [*proof, root], root),
        ("preceding garbage", index, size, leaf, [b"", *proof], root),
        ("preceding root", index, size, leaf, [root, *proof], root),
    ]
    for i in range(len(proof)):
        probes.append((f"modified proof[{i}] bit 3", index, size, leaf, flipped(proof, i, 8), root))
    if proof:
        probes.append(("removed component", index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append(("inserted component", index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], root))
    return probes


def consistency_probes(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> list[tuple[str, int, int, bytes, bytes, list[bytes]]]:
    """proof/verify_test.go corruptConsistencyProof (for non-empty proofs): none may verify."""
    probes = [
        ("size1 - 1", old - 1, new, old_root, new_root, proof),
        ("size1 + 1", old + 1, new, old_root, new_root, proof),
        ("size1 ^ 2", old ^ 2, new, old_root, new_root, proof),
        ("size2 * 2", old, new * 2, old_root, new_root, proof),
        ("size2 / 2", old, new // 2, old_root, new_root, proof),
        ("wrong root1", old, new, b"WrongRoot", new_root, proof),
        ("wrong root2", old, new, old_root, b"WrongRoot", proof),
        ("other root1", old, new, SOME_HASH, new_root, proof),
        ("other root2", old, new, old_root, SOME_HASH, proof),
        ("swapped roots", old, new, new_root, old_root, proof),
        ("empty proof", old, new, old_root, new_root, []),
        ("trailing garbage", old, new, old_root, new_root, [*proof, b""]),
        ("trailing root1", old, new, old_root, new_root, [*proof, old_root]),
        ("trailing root2", old, new, old_root, new_root, [*proof, new_root]),
        ("preceding garbage", old, new, old_root, new_root, [b"", *proof]),
        ("preceding root1", old, new, old_root, new_root, [old_root, *proof]),
        ("preceding root2", old, new, old_root, new_root, [new_root, *proof]),
        ("preceding proof[0]", old, new, old_root, new_root, [proof[0], *proof]),
        ("truncated proof", old, new, old_root, new_root, proof[:-1]),
    ]
    for i in range(len(proof)):
        probes.append((f"modified proof[{i}] bit 4", old, new, old_root, new_root, flipped(proof, i, 16)))
    return probes


def check_inclusion(ref: Reference, table: Nodes, index: int, size: int, root: bytes) -> None:
    """The proof from the table equals PATH, verifies, and every corruption fails."""
    keys = merkle.nodes_for(merkle.inclusion_ranges(index, size))
    assert keys <= table.keys()
    fetched = {key: table[key] for key in keys}  # only what the caller would read
    proof = merkle.inclusion_proof(index, size, fetched)
    assert proof == ref.path(index, 0, size), (index, size)
    leaf = ref.leaves[index]
    assert merkle.verify_inclusion(index, size, leaf, proof, root)
    for desc, p_index, p_size, p_leaf, p_proof, p_root in inclusion_probes(index, size, leaf, proof, root):
        assert not merkle.verify_inclusion(p_index, p_size, p_leaf, p_proof, p_root), (index, size, desc)


def check_consistency(ref: Reference, table: Nodes, old: int, new: int) -> None:
    """The proof from the table equals SUBPROOF, verifies, and every corruption fails."""
    keys = merkle.nodes_for(merkle.consistency_ranges(old, new))
    assert keys <= table.keys()
    proof = merkle.consistency_proof(old, new, {key: table[key] for key in keys})
    assert proof == ref.consistency(old, new), (old, new)
    old_root, new_root = ref.mth(0, old), ref.mth(0, new)
    assert merkle.verify_consistency(old, new, old_root, new_root, proof)
    if proof:
        for desc, p_old, p_new, p_old_root, p_new_root, p_proof in consistency_probes(
            old, new, old_root, new_root, proof
        ):
            assert not merkle.verify_consistency(p_old, p_new, p_old_root, p_new_root, p_proof), (old, new, desc)


def check_table(ref: Reference, table: Nodes, n: int) -> None:
    """The table holds exactly the complete subtrees of n leaves, each the MTH of its leaves."""
    expected = {
        (level, idx): ref.mth(idx << level, (idx + 1) << level)
        for level in range(n.bit_length())
        for idx in range(n >> level)
    }
    assert table == expected


# --- Hashing and the published vectors ----------------------------------------------------


def test_leaf_and_node_hashing() -> None:
    assert merkle.leaf_data(42, b'{"a":1}') == b'42\n{"a":1}'
    assert merkle.leaf_data(0, b"") == b"0\n"
    assert merkle.leaf_hash(b"data") == sha(b"\x00data")
    assert merkle.node_hash(b"L" * 32, b"R" * 32) == sha(b"\x01" + b"L" * 32 + b"R" * 32)
    assert merkle.EMPTY_ROOT == EMPTY_HASH == ROOTS[0]
    with pytest.raises(ValueError, match="event_id"):
        merkle.leaf_data(-1, b"")


LEAVES = [merkle.leaf_hash(data) for data in LEAF_INPUTS]


@pytest.mark.parametrize("n", range(9))
def test_vector_roots(n: int) -> None:
    assert merkle.root(LEAVES[:n]) == ROOTS[n]
    table = build(LEAVES[:n])
    assert table == {key: digest for key, digest in NODE_HASHES.items() if key in table}
    assert merkle.range_hash(0, n, table) == ROOTS[n]
    assert merkle.frontier_keys(n) == FRONTIERS[n] == merkle.subtrees(0, n)
    assert merkle.root_from_frontier(n, {key: table[key] for key in FRONTIERS[n]}) == ROOTS[n]
    edge = merkle.CompactRange()
    for leaf in LEAVES[:n]:
        edge.append(leaf)
    assert (edge.size, edge.root()) == (n, ROOTS[n])


def test_vector_node_table_and_creation_order() -> None:
    created = merkle.append(0, {}, LEAVES)
    assert {(level, idx): digest for level, idx, digest in created} == NODE_HASHES
    assert [(level, idx) for level, idx, _ in created] == [
        (0, 0), (0, 1), (1, 0), (0, 2), (0, 3), (1, 1), (2, 0),
        (0, 4), (0, 5), (1, 2), (0, 6), (0, 7), (1, 3), (2, 1), (3, 0),
    ]  # fmt: skip
    # Appending to a non-empty tree needs only its frontier and creates only new nodes.
    frontier = {key: NODE_HASHES[key] for key in FRONTIERS[5]}
    assert merkle.append(5, frontier, LEAVES[5:]) == created[8:]


@pytest.mark.parametrize(("index", "size", "expected"), INCLUSION_VECTORS)
def test_vector_inclusion(index: int, size: int, expected: list[bytes]) -> None:
    assert merkle.inclusion_proof(index, size, NODE_HASHES) == expected
    check_inclusion(Reference(LEAVES[:size]), NODE_HASHES, index, size, ROOTS[size])


@pytest.mark.parametrize(("old", "new", "expected"), CONSISTENCY_VECTORS)
def test_vector_consistency(old: int, new: int, expected: list[bytes]) -> None:
    assert merkle.consistency_proof(old, new, NODE_HASHES) == expected
    check_consistency(Reference(LEAVES[:new]), NODE_HASHES, old, new)


@pytest.mark.parametrize(("size", "index"), INCLUSION_NODES)
def test_vector_inclusion_nodes(size: int, index: int) -> None:
    assert merkle.nodes_for(merkle.inclusion_ranges(index, size)) == INCLUSION_NODES[(size, index)]


@pytest.mark.parametrize(("old", "new"), CONSISTENCY_NODES)
def test_vector_consistency_nodes(old: int, new: int) -> None:
    assert merkle.nodes_for(merkle.consistency_ranges(old, new)) == CONSISTENCY_NODES[(old, new)]


def test_verify_edge_cases() -> None:
    """proof/verify_test.go TestVerifyInclusionSingleEntry, TestVerifyInclusion and the
    table of TestVerifyConsistency."""
    leaf = merkle.leaf_hash(b"data")
    assert merkle.verify_inclusion(0, 1, leaf, [], leaf)
    assert not merkle.verify_inclusion(0, 1, b"", [], leaf)
    assert not merkle.verify_inclusion(0, 1, leaf, [], b"")
    assert not merkle.verify_inclusion(0, 1, b"", [], b"")  # wrong hash size
    for index, size in [(0, 0), (0, 1), (1, 0), (2, 1)]:
        assert not merkle.verify_inclusion(index, size, SOME_HASH, [], b"")
        assert not merkle.verify_inclusion(index, size, b"", [], EMPTY_HASH)
        assert not merkle.verify_inclusion(index, size, SOME_HASH, [], EMPTY_HASH)

    root1, root2 = b"don't care 1", b"don't care 2"
    cases: list[tuple[int, int, bytes, bytes, list[bytes], bool]] = [
        (0, 0, root1, root2, [], False),
        (1, 1, root1, root2, [], False),
        (0, 0, root1, root1, [], True),
        (0, 1, root1, root2, [], True),
        (1, 1, root2, root2, [], True),
        (1, 0, root1, root2, [], False),
        (2, 1, root1, root2, [], False),
        (1, 2, root1, root2, [], False),
        (0, 0, EMPTY_HASH, root2, [], False),
        (1, 1, EMPTY_HASH, root2, [], False),
        (0, 0, EMPTY_HASH, EMPTY_HASH, [EMPTY_HASH], False),
        (0, 1, EMPTY_HASH, EMPTY_HASH, [EMPTY_HASH], False),
        (1, 1, EMPTY_HASH, EMPTY_HASH, [EMPTY_HASH], False),
    ]
    for old, new, old_root, new_root, proof, ok in cases:
        assert merkle.verify_consistency(old, new, old_root, new_root, proof) is ok, (old, new)


# --- Argument checks and the node arithmetic ------------------------------------------------


def test_out_of_range_arguments() -> None:
    for index, size in [(0, 0), (7, 7), (8, 7), (-1, 5)]:
        with pytest.raises(ValueError, match="leaf index"):
            merkle.inclusion_ranges(index, size)
        with pytest.raises(ValueError):
            merkle.inclusion_proof(index, size, NODE_HASHES)
    with pytest.raises(ValueError, match="larger than"):
        merkle.consistency_ranges(9, 8)
    with pytest.raises(ValueError, match="larger than"):
        merkle.consistency_proof(5, 0, NODE_HASHES)
    for bad in [(-1, 3), (1, -3)]:
        with pytest.raises(ValueError, match=">= 0"):
            merkle.consistency_ranges(*bad)
    for call in (merkle.frontier_keys, lambda n: merkle.append(n, {}, [])):
        with pytest.raises(ValueError, match=">= 0"):
            call(-1)
    with pytest.raises(ValueError, match="end < start"):
        merkle.subtrees(3, 2)
    with pytest.raises(ValueError, match="32 bytes"):
        merkle.append(0, {}, [b"short"])
    assert not merkle.verify_inclusion(8, 8, LEAVES[0], [], ROOTS[8])
    assert not merkle.verify_consistency(-1, 8, ROOTS[0], ROOTS[8], [])


def test_subtrees_and_range_hash() -> None:
    assert merkle.subtrees(0, 7) == [(2, 0), (1, 2), (0, 6)]
    assert merkle.subtrees(4, 7) == [(1, 2), (0, 6)]
    assert merkle.subtrees(1, 4) == [(0, 1), (1, 1)]
    assert merkle.subtrees(3, 13) == [(0, 3), (2, 1), (2, 2), (0, 12)]
    assert merkle.subtrees(5, 5) == []
    ref = Reference(LEAVES)
    for start in range(9):
        for end in range(start + 1, 9):
            levels = [level for level, _ in merkle.subtrees(start, end)]
            if levels == sorted(set(levels), reverse=True):
                assert merkle.range_hash(start, end, NODE_HASHES) == ref.mth(start, end), (start, end)
            else:
                with pytest.raises(ValueError, match="not a fold"):
                    merkle.range_hash(start, end, NODE_HASHES)
    assert merkle.range_hash(0, 0, {}) == merkle.EMPTY_ROOT
    with pytest.raises(ValueError, match="empty range"):
        merkle.range_hash(3, 3, NODE_HASHES)
    with pytest.raises(KeyError):
        merkle.range_hash(0, 7, {key: digest for key, digest in NODE_HASHES.items() if key != (1, 2)})
    with pytest.raises(KeyError):
        merkle.inclusion_proof(0, 8, {key: digest for key, digest in NODE_HASHES.items() if key != (2, 1)})
    with pytest.raises(KeyError):
        merkle.append(6, {(2, 0): NODE_HASHES[(2, 0)]}, LEAVES[6:])
    with pytest.raises(KeyError):
        merkle.root_from_frontier(6, {(2, 0): NODE_HASHES[(2, 0)]})


def log2_ceil(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


def test_proof_node_count_is_logarithmic() -> None:
    rng = random.Random(6962)
    sizes = [*range(1, 140), 1000, 1023, 1024, 1025, 2**31 - 1, 2**40 + 12345, 10**15 + 7]
    for n in sizes:
        bound = 2 * log2_ceil(n) + 2
        assert len(merkle.nodes_for([(0, n)])) == len(merkle.frontier_keys(n)) <= log2_ceil(n) + 1
        indices = range(n) if n < 140 else [0, n - 1, n // 2, *(rng.randrange(n) for _ in range(40))]
        for i in indices:
            assert len(merkle.nodes_for(merkle.inclusion_ranges(i, n))) <= bound, (i, n)
            assert len(merkle.nodes_for(merkle.consistency_ranges(i, n))) <= bound, (i, n)
            assert len(merkle.nodes_for(merkle.consistency_ranges(i + 1, n))) <= bound, (i + 1, n)


# --- Whole trees: the node table, roots and proofs against the reference --------------------


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 1000])
def test_tree(n: int) -> None:
    rng = random.Random(n)
    leaves = make_leaves(n)
    ref = Reference(leaves)
    expected_root = ref.mth(0, n)
    assert merkle.root(leaves) == expected_root

    table = build(leaves)
    check_table(ref, table, n)
    for _ in range(5):
        assert build(leaves, random_batches(n, rng)) == table
    assert build(leaves, range(n)) == table  # one leaf at a time
    assert merkle.range_hash(0, n, table) == expected_root
    assert merkle.root_from_frontier(n, {key: table[key] for key in merkle.frontier_keys(n)}) == expected_root
    edge = merkle.CompactRange()
    for leaf in leaves:
        edge.append(leaf)
    assert edge.root() == expected_root

    # Every smaller tree is in the same table.
    sizes = range(n + 1) if n < 20 else sorted({0, 1, n - 1, n, 512, 513, *rng.sample(range(n + 1), 30)})
    for size in sizes:
        assert merkle.range_hash(0, size, table) == ref.mth(0, size)

    indices = range(n) if n < 20 else sorted({0, 1, n - 1, 511, 512, *rng.sample(range(n), 60)})
    for index in indices:
        check_inclusion(ref, table, index, n, expected_root)
    for size in sizes:
        if size:
            check_inclusion(ref, table, rng.randrange(size), size, ref.mth(0, size))

    pairs = [(a, b) for a in sizes for b in sizes if a <= b]
    for old, new in pairs if n < 20 else rng.sample(pairs, 150):
        check_consistency(ref, table, old, new)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=300),
    cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=8),
    picks=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=0)), min_size=1, max_size=6),
    salt=st.binary(max_size=8),
)
def test_random_trees(n: int, cuts: list[int], picks: list[tuple[int, int]], salt: bytes) -> None:
    leaves = make_leaves(n, salt)
    ref = Reference(leaves)
    table = build(leaves, sorted(cuts))
    check_table(ref, table, n)
    assert merkle.range_hash(0, n, table) == merkle.root(leaves) == ref.mth(0, n)
    for a, b in picks:
        index = a % n
        check_inclusion(ref, table, index, n, ref.mth(0, n))
        size = index + 1 + b % (n - index)
        check_inclusion(ref, table, index, size, ref.mth(0, size))
        old, new = sorted((a % (n + 1), b % (n + 1)))
        check_consistency(ref, table, old, new)
        assert merkle.verify_consistency(old, new, ref.mth(0, old), ref.mth(0, new), ref.consistency(old, new))
