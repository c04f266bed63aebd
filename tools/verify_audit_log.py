#!/usr/bin/env python3
"""Standalone verifier of the audit log (docs/audit-log.md, "The Merkle tree", "Checkpoints",
"Export and the standalone verifier").

One file, Python 3.11 standard library plus ``cryptography``; it imports nothing from the project,
so an auditor can copy it anywhere::

    python verify_audit_log.py --key KEY [--key KEY ...] (--dir DIR | --url BASE)
        [--checkpoint FILE_OR_URL] [--trusted-checkpoint FILE ...] [--token T] [--progress] [--workers N]

The first ``--key`` (a verifier key ``<name>+<key id hex>+<base64(0x01 || public key)>``, or a file
of them, one per line) is the log's current key: the latest checkpoint must be signed by it. Any
further keys are rotated-out keys, accepted on older checkpoints only.

It recomputes every leaf hash (``SHA-256(0x00 || decimal event id || 0x0A || canonical bytes)``) and
the RFC 6962 tree head at the size of every checkpoint it is given, checks every signature, that
the latest checkpoint covers exactly the events, and that each ``--trusted-checkpoint`` (a note kept
from before) is a prefix of today's tree; online it also checks the server's RFC 9162 consistency
proof from each kept checkpoint to the latest one.

Exit 0 with ``audit log verified: ...`` on stdout; 1 with ``audit log FAILED: <reason>`` on stderr;
2 for usage errors and inputs that cannot be read.

``--dir`` reads an export of format ``rft-audit-export/2`` (``events.txt`` line *p* is
``<event id> <canonical bytes>``, raw) or ``rft-audit-export/1`` (``<event id> <base64 canonical
bytes>``), as its manifest says; ``rft-audit-export/3`` is ``/2`` starting after the positions dropped
by retention, from the tree's right edge there (``start``, ``start_edge`` in the manifest), which
the signed roots past it bind. It hashes ``events.txt`` in chunks on worker processes (one per CPU
for large files; ``--workers 1`` keeps everything in this process); memory stays constant either
way.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import hashlib
import json
import multiprocessing
import os
import re
import sys
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "InputError",
    "Key",
    "Note",
    "Result",
    "VerificationError",
    "main",
    "parse_key",
    "parse_note",
    "verify_consistency",
    "verify_dir",
    "verify_url",
]

# format -> events.txt version (/3 is /2 starting after a prefix dropped by retention)
EXPORT_FORMATS = {"rft-audit-export/1": 1, "rft-audit-export/2": 2, "rft-audit-export/3": 3}
SIGNATURE_PREFIX = "\u2014 "  # an em dash and a space (C2SP signed-note)
ED25519 = 0x01
EMPTY_ROOT = hashlib.sha256(b"").digest()
PAGE = 1000  # events per request online (the server's maximum)
PROGRESS_EVERY = 100_000
CHUNK_BYTES = 1 << 20  # bytes of events.txt per task
PIECE_BYTES = 64 << 10  # bytes a task hashes at a time (stays in the CPU caches)
PARALLEL_FROM = 8 << 20  # files at least this large are hashed by worker processes by default
_sha256 = hashlib.sha256
_a2b = binascii.a2b_base64
# Everything but the space and the line feed: ``translate(None, _NOT_SEPARATORS)`` keeps only those.
_NOT_SEPARATORS = bytes(ch for ch in range(256) if ch not in b" \n")
# Format /2: a line is ``<digits> <at least one byte>``. Searched for in a buffer of whole lines
# (without its final line feed), ``_NOT_A_LINE`` finds the line feed before any line that is not.
_A_LINE = re.compile(rb"[0-9]+ [^\n]")
_NOT_A_LINE = re.compile(rb"\n(?![0-9]+ [^\n])")


class VerificationError(Exception):
    """The log does not verify: ``reason`` says where."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class InputError(Exception):
    """An input cannot be read (a missing file, an HTTP error, a malformed key or manifest)."""


# --- Keys and signed notes -------------------------------------------------------------------


def _b64(text: str) -> bytes | None:
    """Standard padded base64, canonical (re-encodes to the same text), or None."""
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def _valid_name(name: str) -> bool:
    return bool(name) and name.isprintable() and not any(ch.isspace() or ch == "+" for ch in name)


@dataclass(frozen=True)
class Key:
    """A signed-note Ed25519 verifier key."""

    name: str
    key_id: bytes  # 4 bytes
    public_key: bytes  # 32 bytes

    @property
    def label(self) -> str:
        """``<name>+<key id hex>``, as verdicts name keys."""
        return f"{self.name}+{self.key_id.hex()}"

    def verify(self, body: bytes, signature: bytes) -> bool:
        if len(signature) != 64:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, body)
        except InvalidSignature:
            return False
        return True


def key_id(name: str, public_key: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ED25519]) + public_key).digest()[:4]


def parse_key(text: str) -> Key:
    """A verifier key string; InputError when it is not one."""
    parts = text.strip().split("+", 2)
    if len(parts) != 3:
        raise InputError(f"not a verifier key (<name>+<key id hex>+<base64 key>): {text.strip()!r}")
    name, hex_id, encoded = parts
    raw = _b64(encoded)
    if not _valid_name(name) or raw is None or len(raw) != 33 or raw[0] != ED25519:
        raise InputError(f"not an Ed25519 verifier key: {text.strip()!r}")
    key = Key(name, key_id(name, raw[1:]), raw[1:])
    if hex_id.lower() != key.key_id.hex() or len(hex_id) != 8:
        raise InputError(f"the key id of verifier key {text.strip()!r} does not match its name and key")
    return key


def load_keys(values: Sequence[str]) -> list[Key]:
    """Each value is a verifier key or a file of them (one per line; blank and # lines skipped)."""
    keys: list[Key] = []
    for value in values:
        if os.path.isfile(value):
            lines = _read_text(value).splitlines()
            found = [parse_key(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]
            if not found:
                raise InputError(f"{value} holds no verifier key")
            keys.extend(found)
        else:
            keys.append(parse_key(value))
    if not keys:
        raise InputError("give the log's verifier key with --key")
    return keys


@dataclass(frozen=True)
class Note:
    """A checkpoint in a C2SP signed note."""

    what: str  # how verdicts name it: "the checkpoint", "checkpoint 3", "kept checkpoint FILE"
    origin: str
    size: int
    root: bytes
    body: bytes
    signatures: tuple[tuple[str, bytes, bytes], ...]  # (key name, key id, signature)


def parse_note(text: str, what: str) -> Note:
    """Parse a checkpoint note, enforcing the signed-note and tlog-checkpoint format rules."""
    if "\r" in text:
        raise VerificationError(f"{what} has a carriage return")
    if not text.endswith("\n"):
        raise VerificationError(f"{what} does not end with a line feed")
    body, blank, rest = text.partition("\n\n")
    if not blank:
        raise VerificationError(f"{what} has no blank line before its signatures")
    if rest.startswith("\n"):
        raise VerificationError(f"{what} has more than one blank line before its signatures")
    if not rest:
        raise VerificationError(f"{what} has no signature lines")
    signatures = []
    for number, line in enumerate(rest[:-1].split("\n"), start=body.count("\n") + 3):
        name, space, encoded = line.removeprefix(SIGNATURE_PREFIX).partition(" ")
        raw = _b64(encoded)
        if not line.startswith(SIGNATURE_PREFIX) or not space or not _valid_name(name) or raw is None or len(raw) < 5:
            raise VerificationError(f"{what} line {number} is not a signature line ('\u2014 <name> <base64>')")
        signatures.append((name, raw[:4], raw[4:]))
    lines = body.split("\n")
    if len(lines) < 3:
        raise VerificationError(f"{what} does not have an origin line, a size line and a root hash line")
    origin, size, root = lines[:3]
    if not origin or not origin.isprintable() or any(ch.isspace() for ch in origin):
        raise VerificationError(f"{what} has an origin that is empty or holds a space or control character")
    if not (size.isascii() and size.isdigit()) or (size[0] == "0" and size != "0"):
        raise VerificationError(f"{what} size {size!r} is not a decimal number without leading zeros")
    root_hash = _b64(root)
    if root_hash is None:
        raise VerificationError(f"{what} root hash is not standard base64")
    if len(root_hash) != 32:
        raise VerificationError(f"{what} root hash is {len(root_hash)} bytes, not 32")
    return Note(what, origin, int(size), root_hash, (body + "\n").encode(), tuple(signatures))


def signers(note: Note, keys: Sequence[Key]) -> list[Key]:
    """The given keys that signed ``note``; signatures by unknown keys are ignored (C2SP), and a
    signature by a known key that does not verify is a failure."""
    found: list[Key] = []
    for name, kid, signature in note.signatures:
        for key in keys:
            if key.name == name and key.key_id == kid:
                if not key.verify(note.body, signature):
                    raise VerificationError(f"{note.what} has a bad signature by {key.label}")
                if key not in found:
                    found.append(key)
    return found


def check_latest(note: Note, keys: Sequence[Key]) -> Key:
    """The latest checkpoint must carry a valid signature by the current (first) key."""
    current = keys[0]
    found = signers(note, keys)
    if current in found:
        return current
    if found:
        raise VerificationError(f"{note.what} is signed by a rotated-out key ({found[0].label})")
    raise VerificationError(f"{note.what} is not signed by {current.label}")


def check_older(note: Note, keys: Sequence[Key]) -> None:
    if not signers(note, keys):
        raise VerificationError(f"{note.what} is not signed by any given key")


# --- Merkle tree --------------------------------------------------------------------------------


def _node(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def _segments(hashes: list[bytes], start: int, cuts: Sequence[int]) -> list[tuple[int, list[tuple[int, bytes]]]]:
    """Leaves ``hashes`` are tree indices ``[start, start + len)``. For each cut (a size, ascending,
    the last one the end), the maximal aligned complete subtrees ``(level, hash)`` tiling the leaves
    since the previous cut."""
    out: list[tuple[int, list[tuple[int, bytes]]]] = []
    pos = start
    for end in cuts:
        nodes: list[tuple[int, bytes]] = []
        while pos < end:
            level = (end - pos).bit_length() - 1
            if pos:
                level = min(level, (pos & -pos).bit_length() - 1)
            lo = pos - start
            level_hashes = hashes[lo : lo + (1 << level)]
            while len(level_hashes) > 1:
                pairs = iter(level_hashes)
                level_hashes = [_sha256(b"\x01" + a + b).digest() for a, b in zip(pairs, pairs, strict=True)]
            nodes.append((level, level_hashes[0]))
            pos += 1 << level
        out.append((end, nodes))
    return out


class Frontier:
    """The right edge of the tree (one node per set bit of the size): constant memory."""

    def __init__(self) -> None:
        self.size = 0
        self.edge: list[tuple[int, bytes]] = []

    def extend(self, nodes: Iterable[tuple[int, bytes]]) -> None:
        """Append aligned complete subtrees, left to right."""
        edge = self.edge
        for level, digest in nodes:
            while edge and edge[-1][0] == level:
                digest = _node(edge.pop()[1], digest)
                level += 1
            edge.append((level, digest))
        self.size = sum(1 << level for level, _ in edge)

    def root(self) -> bytes:
        if not self.edge:
            return EMPTY_ROOT
        digest = self.edge[-1][1]
        for _, left in reversed(self.edge[:-1]):
            digest = _node(left, digest)
        return digest


def verify_consistency(old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 §2.1.4.2: whether ``proof`` shows the tree of ``old_size`` with ``old_root`` is a
    prefix of the tree of ``new_size`` with ``new_root``."""
    if not 0 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        return not proof
    if not proof or any(len(h) != 32 for h in proof):
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
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
            fr = _node(element, fr)
            sr = _node(element, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = _node(sr, element)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root


# --- events.txt, in chunks --------------------------------------------------------------------

_worker_fd: int | None = None
_worker_raw = True  # events.txt holds raw canonical bytes (format /2), not base64 (/1)
_worker_chunk = CHUNK_BYTES
_worker_size = 0  # of events.txt, when the check began
_worker_sizes: tuple[int, ...] = ()  # the tree sizes of the checkpoints, ascending
# _starts[k]: the leaf index of the first line of chunk k, once known (-1 before; ABORTED when a
# chunk before it failed). Shared by the worker processes (inherited by fork), written once each.
_starts: Any = None
ABORTED = -2


def _open_events(path: str, raw: bool, chunk: int, size: int, sizes: tuple[int, ...], starts: Any) -> None:
    global _worker_fd, _worker_raw, _worker_chunk, _worker_size, _worker_sizes, _starts  # per process
    _worker_fd = os.open(path, os.O_RDONLY)
    _worker_raw, _worker_chunk, _worker_size, _worker_sizes, _starts = raw, chunk, size, sizes, starts


Chunk = tuple[int, list[tuple[int, list[tuple[int, bytes]]]]] | tuple[int, str]


def _hash_chunk(index: int) -> Chunk:
    """Hash chunk ``index`` of events.txt: the lines that begin in its bytes. ``(lines, segments)``,
    or ``(-1 - line, reason)`` naming the first malformed line (0-based within the chunk).

    Nobody counts lines ahead: each worker hashes its chunk's leaves, learns from the chunk before
    it (``_starts``) where its leaves sit in the tree, tells the chunk after it, and only then
    builds the chunk's complete subtrees (their alignment depends on that index). Chunks are
    taken in order, so the one before is always under way, its leaves hashed first."""
    try:
        begin, end = _line_start(index * _worker_chunk), _line_start((index + 1) * _worker_chunk)
        hashes: list[bytes] = []
        failure = _hash_range(begin, end, hashes)
        start = _wait_for_start(index)
        if failure is not None or start == ABORTED:
            _starts[index + 1] = ABORTED
            return failure or (-1, "not checked: a chunk before it failed")
        _starts[index + 1] = start + len(hashes)
    except BaseException:
        _starts[index + 1] = ABORTED
        raise
    finish = start + len(hashes)
    cuts = (*(size for size in _worker_sizes if start < size < finish), finish)
    return len(hashes), _segments(hashes, start, cuts)


def _wait_for_start(index: int) -> int:
    starts = _starts
    pause = 0.0
    while (start := int(starts[index])) == -1:
        time.sleep(pause)
        pause = min(0.001, pause + 0.00005)
    return start


def _line_start(offset: int) -> int:
    """Where the first line that begins at or after ``offset`` begins (the file's size if none)."""
    if offset <= 0:
        return 0
    if offset >= _worker_size:
        return _worker_size
    fd = _worker_fd
    assert fd is not None
    position, window = offset - 1, 4096
    while position < _worker_size:
        buf = os.pread(fd, window, position)
        if not buf:
            break
        found = buf.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(buf)
        window *= 2
    return _worker_size


def _hash_range(begin: int, end: int, hashes: list[bytes]) -> tuple[int, str] | None:
    """Append the leaf hash of each line in bytes ``[begin, end)`` to ``hashes``, in cache-sized
    pieces; or name the first malformed line, ``(-1 - line, reason)``."""
    fd = _worker_fd
    assert fd is not None
    hash_lines = _hash_raw_lines if _worker_raw else _hash_lines
    position, piece = begin, PIECE_BYTES
    while position < end:
        buf = os.pread(fd, min(piece, end - position), position)
        if not buf:
            return -1 - len(hashes), "could not be read: events.txt changed while it was verified"
        if position + len(buf) < end:
            cut = buf.rfind(b"\n") + 1
            if not cut:  # a line longer than a piece
                piece *= 2
                continue
            buf = buf[:cut]
        failure = hash_lines(buf, hashes)
        if failure is not None:
            return -1 - len(hashes) - failure[0], failure[1]
        position += len(buf)
    return None


def _hash_raw_lines(buf: bytes, hashes: list[bytes]) -> tuple[int, str] | None:
    """Format /2: append the leaf hash of each line of ``buf`` (whole lines; the last may lack its
    line feed) to ``hashes``, or name the first malformed line and append nothing. The leaf data
    is the line with its first space replaced by a line feed."""
    end = len(buf) - (buf[-1] == 0x0A)
    if not _A_LINE.match(buf, 0, end) or _NOT_A_LINE.search(buf, 0, end):
        failure = _bad_raw_line(buf[:end].split(b"\n"))
        if failure is not None:
            return failure
    # One replace over the piece puts the 0x00 in front of every line, so that each line is
    # copied once more (its first space made a line feed), not twice.
    leaves = (b"\x00" + buf.replace(b"\n", b"\n\x00")).split(b"\n")
    if end < len(buf):
        leaves.pop()
    sha256 = _sha256
    hashes += [sha256(leaf.replace(b" ", b"\n", 1)).digest() for leaf in leaves]
    return None


def _bad_raw_line(lines: list[bytes]) -> tuple[int, str] | None:
    for index, line in enumerate(lines):
        event_id, space, canonical = line.partition(b" ")
        if not space or not event_id.isdigit():
            return index, "is not '<event id> <canonical bytes>'"
        if not canonical:
            return index, f"(event {event_id.decode()}) has no event bytes: the event is missing"
    return None


def _hash_lines(buf: bytes, hashes: list[bytes]) -> tuple[int, str] | None:
    """Format /1 (base64): append the leaf hash of each line of ``buf`` (whole lines; the last may
    lack its line feed) to ``hashes``, or name the first malformed line and append nothing."""
    count = buf.count(b"\n")
    separators = b" \n" * count
    if not buf.endswith(b"\n"):
        count += 1
        separators += b" "
    if buf.translate(None, _NOT_SEPARATORS) != separators:  # exactly one space on every line
        return _bad_line(buf)
    parts = buf.replace(b"\n", b" ").split(b" ")
    ids = parts[0 : 2 * count : 2]
    encoded = parts[1 : 2 * count : 2]
    if not all(ids) or not b"".join(ids).isdigit() or b"" in encoded:
        return _bad_line(buf)
    try:
        hashes += [
            _sha256(b"\x00" + i + b"\n" + _a2b(c, strict_mode=True)).digest() for i, c in zip(ids, encoded, strict=True)
        ]
    except (binascii.Error, ValueError):
        return _bad_line(buf)
    return None


def _bad_line(buf: bytes) -> tuple[int, str]:
    for index, line in enumerate(buf.split(b"\n")):
        event_id, space, encoded = line.partition(b" ")
        if not space or b" " in encoded or not event_id.isdigit():
            return index, "is not '<event id> <base64 canonical bytes>'"
        if not encoded:
            return index, f"(event {event_id.decode()}) has no event bytes: the event is missing"
        try:
            _a2b(encoded, strict_mode=True)
        except (binascii.Error, ValueError):
            return index, "is not '<event id> <base64 canonical bytes>': the bytes are not base64"
    return 0, "could not be read whole"


# --- The checks ---------------------------------------------------------------------------------


@dataclass
class Result:
    events: int
    root: bytes
    signer: Key
    kept: int
    checkpoints: int = 0
    start: int = 0  # the positions 1..start were dropped by retention (format /3)

    @property
    def line(self) -> str:
        text = (
            f"audit log verified: {self.events} events, root {base64.b64encode(self.root).decode()}, "
            f"signed by {self.signer.label}"
        )
        if self.start:
            text += (
                f"; the first {self.start} were dropped by retention: their tree edge is bound by the signed root,"
                " their bytes are not in this export"
            )
        if self.kept:
            text += f"; consistent with {self.kept} kept checkpoint(s)"
        return text


@dataclass
class _Plan:
    """The roots to compare while the tree is recomputed, by size (kept ones first)."""

    latest: Note
    by_size: dict[int, list[Note]] = field(default_factory=dict)

    def add(self, note: Note) -> None:
        self.by_size.setdefault(note.size, []).append(note)

    def check(self, size: int, root: bytes) -> None:
        for note in self.by_size.get(size, ()):
            if note.root == root:
                continue
            if note.what.startswith("kept"):
                raise VerificationError(f"fork: {note.what} has another root at size {size} than the log")
            raise VerificationError(f"root at size {size} does not match {note.what}")


def _prepare(latest_text: str, keys: Sequence[Key], trusted: Sequence[str]) -> tuple[_Plan, Key, list[Note]]:
    latest = parse_note(latest_text, "the checkpoint")
    signer = check_latest(latest, keys)
    plan = _Plan(latest)
    kept: list[Note] = []
    for path in trusted:
        note = parse_note(_read_text(path), f"kept checkpoint {path}")
        check_older(note, keys)
        if note.origin != latest.origin:
            raise VerificationError(f"{note.what} is for origin {note.origin}, not {latest.origin}")
        if note.size > latest.size:
            raise VerificationError(
                f"fork: {note.what} signs size {note.size} but the latest checkpoint signs only {latest.size}"
            )
        plan.add(note)
        kept.append(note)
    return plan, signer, kept


def _progress(enabled: bool) -> Callable[[int], None]:
    started = time.perf_counter()
    state = {"next": PROGRESS_EVERY}

    def report(done: int) -> None:
        if enabled and done >= state["next"]:
            rate = done / max(time.perf_counter() - started, 1e-9)
            print(f"verify_audit_log: {done:,} events hashed ({rate:,.0f}/s)", file=sys.stderr, flush=True)
            state["next"] = (done // PROGRESS_EVERY + 1) * PROGRESS_EVERY

    return report


def _workers(requested: int | None, size: int) -> int:
    if requested is not None and requested > 0:
        return requested
    if requested is None and size < PARALLEL_FROM:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def verify_dir(
    directory: str | os.PathLike[str],
    keys: Sequence[str | Key],
    *,
    checkpoint: str | None = None,
    trusted: Sequence[str] = (),
    progress: bool = False,
    workers: int | None = None,
) -> Result:
    """Verify an export directory (``manage.py audit_export``). ``workers``: None picks (worker
    processes for large files), 0 one per CPU, 1 this process only."""
    given = [key if isinstance(key, Key) else parse_key(key) for key in keys]
    if not given:
        raise InputError("give the log's verifier key with --key")
    root_dir = os.fspath(directory)
    manifest = _read_json(os.path.join(root_dir, "manifest.json"))
    name = manifest.get("format") if isinstance(manifest, dict) else None
    version = EXPORT_FORMATS.get(name) if isinstance(name, str) else None
    if version is None:
        names = ", ".join(sorted(EXPORT_FORMATS)[:-1]) + " or " + sorted(EXPORT_FORMATS)[-1]
        raise InputError(f"{os.path.join(root_dir, 'manifest.json')} is not an {names} manifest")
    latest_text = _read_text(checkpoint or os.path.join(root_dir, "checkpoint.txt"))
    plan, signer, kept = _prepare(latest_text, given, trusted)
    latest = plan.latest
    if manifest.get("origin") != latest.origin:
        raise VerificationError(f"the manifest names origin {manifest.get('origin')}, the checkpoint {latest.origin}")
    stored = _stored_checkpoints(os.path.join(root_dir, "checkpoints.jsonl"), given, latest)
    frontier = Frontier()
    start = _start_edge(manifest, frontier) if version == 3 else 0
    for note in kept:
        if note.size < start:
            raise InputError(
                f"{note.what} signs size {note.size}, inside the {start} events dropped by retention before this "
                "export: check it against an export archived before the drop, or online with --url"
            )
    # Stored checkpoints inside the dropped prefix are checked for their signatures only.
    for note in stored:
        if note.size >= start:
            plan.add(note)
    plan.add(latest)
    if latest.size < start:
        raise VerificationError(f"the export starts at position {start}, past the checkpoint's size {latest.size}")

    events = os.path.join(root_dir, "events.txt")
    try:
        file_size = os.path.getsize(events)
    except OSError as error:
        raise InputError(f"cannot read {events}: {error.strerror}") from None
    plan.check(start, frontier.root())
    count = start + _hash_events(
        events, file_size, version != 1, plan, frontier, _progress(progress), _workers(workers, file_size), start
    )
    if count > latest.size:
        raise VerificationError(f"{count - latest.size} events are not covered by the signed checkpoint")
    if count < latest.size:
        raise VerificationError(f"the log has {count} events but the checkpoint signs {latest.size}")
    return Result(count, frontier.root(), signer, len(kept), len(stored), start)


def _start_edge(manifest: dict[str, Any], frontier: Frontier) -> int:
    """Format /3: the dropped prefix's size and the tree's right edge there, loaded into
    ``frontier``. The edge is not trusted on its own: the signed roots past it bind it."""
    return _load_edge(manifest.get("start"), manifest.get("start_edge"), frontier, "the manifest's")


def _load_edge(start: Any, edge: Any, frontier: Frontier, whose: str) -> int:
    if isinstance(start, bool) or not isinstance(start, int) or start < 1 or not isinstance(edge, list):
        raise InputError(f"{whose} start must be a positive integer and start_edge a list")
    levels = [level for level in range(start.bit_length() - 1, -1, -1) if start >> level & 1]
    nodes: list[tuple[int, bytes]] = []
    for entry in edge:
        digest = _b64(entry[1]) if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str) else None
        if digest is None or len(digest) != 32 or isinstance(entry[0], bool) or not isinstance(entry[0], int):
            raise InputError(f"{whose} start_edge entries must be [level, base64 of a 32-byte hash]")
        nodes.append((entry[0], digest))
    if [level for level, _ in nodes] != levels:
        raise InputError(f"{whose} start_edge must hold one node per set bit of {start}, largest first")
    frontier.extend(nodes)
    return int(start)


def _hash_events(
    path: str,
    file_size: int,
    raw: bool,
    plan: _Plan,
    frontier: Frontier,
    report: Callable[[int], None],
    workers: int,
    start: int = 0,
) -> int:
    """Hash events.txt, whose first line is leaf ``start``, into ``frontier``; the lines read."""
    sizes = tuple(sorted(plan.by_size))
    chunk = CHUNK_BYTES if workers == 1 else max(4096, min(CHUNK_BYTES, file_size // (workers * 8) + 1))
    chunks = -(-file_size // chunk)
    starts = multiprocessing.RawArray("q", chunks + 1)
    starts[0] = start
    starts[1:] = [-1] * chunks
    setup = (path, raw, chunk, file_size, sizes, starts)
    try:
        if workers == 1:
            _open_events(*setup)
            count = _fold(map(_hash_chunk, range(chunks)), plan, frontier, report)
        else:
            with contextlib.closing(_hashed_by_workers(workers, setup, chunks)) as hashed:
                count = _fold(hashed, plan, frontier, report)
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    finally:
        global _worker_fd
        if _worker_fd is not None:
            os.close(_worker_fd)
            _worker_fd = None
    return count


def _hashed_by_workers(workers: int, setup: tuple[Any, ...], chunks: int) -> Generator[Chunk, None, None]:
    """Each chunk's result, in order, from ``workers`` processes: process ``w`` hashes chunks ``w``,
    ``w + workers``, … in that order and sends each result down a pipe of its own. No queue, lock
    or thread is shared: what waits on what is only a chunk on the one before it (``_starts``), and
    that one is always another process's earlier chunk, so every wait ends. A process that dies is
    named (its pipe ends) instead of waited for; the processes left are killed when the caller
    stops reading (the first failure) or when all is read."""
    context = multiprocessing.get_context("fork") if sys.platform == "linux" else multiprocessing.get_context("spawn")
    processes: list[tuple[Any, Any]] = []
    try:
        for first in range(workers):
            reader, writer = context.Pipe(duplex=False)
            process = context.Process(
                target=_hash_chunks, args=(writer, setup, range(first, chunks, workers)), daemon=True
            )
            process.start()
            writer.close()
            processes.append((process, reader))
        for index in range(chunks):
            process, reader = processes[index % workers]
            try:
                result = reader.recv()
            except EOFError:
                process.join()
                raise InputError(
                    f"a hashing process stopped before it was done (exit code {process.exitcode}); "
                    "run again, or with --workers 1"
                ) from None
            if isinstance(result, BaseException):
                raise result
            yield result
    finally:
        for process, reader in processes:
            if process.is_alive():
                process.kill()
            process.join()
            reader.close()


def _hash_chunks(writer: Any, setup: tuple[Any, ...], indexes: range) -> None:
    """A worker process: hash the chunks ``indexes`` in order, each result (or the exception that
    stopped it: an unreadable file too) sent down ``writer``."""
    try:
        _open_events(*setup)
        for index in indexes:
            writer.send(_hash_chunk(index))
    except Exception as error:  # handed to the parent, which raises it
        writer.send(error)
    writer.close()


def _fold(chunks: Iterable[Chunk], plan: _Plan, frontier: Frontier, report: Callable[[int], None]) -> int:
    count = 0
    for lines, segments in chunks:
        if isinstance(segments, str):
            raise VerificationError(f"events.txt line {count - lines} {segments}")
        for end, nodes in segments:
            frontier.extend(nodes)
            if end in plan.by_size:
                plan.check(end, frontier.root())
        count += lines
        report(count)
    return count


def _stored_checkpoints(path: str, keys: Sequence[Key], latest: Note) -> list[Note]:
    notes: list[Note] = []
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ident, size, text = row["id"], row["tree_size"], row["note"]
        except (ValueError, KeyError, TypeError):
            raise InputError(f"{path} line {number} is not {{'id', 'tree_size', 'note'}}") from None
        if not isinstance(text, str) or not isinstance(size, int):
            raise InputError(f"{path} line {number} is not {{'id', 'tree_size', 'note'}}")
        note = parse_note(text, f"checkpoint {ident}")
        check_older(note, keys)
        if note.size != size:
            raise VerificationError(f"{note.what} signs size {note.size} but is listed with size {size}")
        if note.origin != latest.origin:
            raise VerificationError(f"{note.what} is for origin {note.origin}, not {latest.origin}")
        if notes and note.size < notes[-1].size:
            raise VerificationError(
                f"fork: {note.what} signs size {note.size}, smaller than {notes[-1].what} before it ({notes[-1].size})"
            )
        if note.size > latest.size:
            raise VerificationError(
                f"{note.what} signs size {note.size}, more than the latest checkpoint ({latest.size})"
            )
        notes.append(note)
    return notes


def verify_url(
    base: str,
    keys: Sequence[str | Key],
    *,
    token: str | None = None,
    checkpoint: str | None = None,
    trusted: Sequence[str] = (),
    progress: bool = False,
) -> Result:
    """Verify the log a server serves under ``{base}/audit/v1/``."""
    given = [key if isinstance(key, Key) else parse_key(key) for key in keys]
    if not given:
        raise InputError("give the log's verifier key with --key")
    api = base.rstrip("/") + "/audit/v1"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latest_text = _read_text(checkpoint) if checkpoint else _get(f"{api}/checkpoint", {}).decode("utf-8", "replace")
    plan, signer, kept = _prepare(latest_text, given, trusted)
    latest = plan.latest
    plan.add(latest)
    frontier = Frontier()
    report = _progress(progress)
    position = 1
    dropped = 0
    while position <= latest.size:
        limit = min(PAGE, latest.size - position + 1)
        url = f"{api}/events?start={position}&limit={limit}"
        page = _get_json(url, headers)
        if position == 1 and isinstance(page, dict) and page.get("dropped_through"):
            # Retention dropped a prefix: go on from the tree's edge there, which the signed
            # roots past it bind (kept checkpoints inside it are checked by consistency proofs).
            dropped = _load_edge(page.get("dropped_through"), page.get("start_edge"), frontier, f"GET {url}:")
            if dropped > latest.size:
                raise VerificationError(f"the server dropped {dropped} events, past the checkpoint's {latest.size}")
            plan.check(dropped, frontier.root())
            position = dropped + 1
            continue
        if position == 1:
            plan.check(0, EMPTY_ROOT)
        events = page.get("events") if isinstance(page, dict) else None
        if not isinstance(events, list):
            raise InputError(f"GET {url}: the answer has no events list")
        if not events:
            raise VerificationError(f"the log has {position - 1} events but the checkpoint signs {latest.size}")
        hashes: list[bytes] = []
        for event in events[:limit]:
            hashes.append(_server_leaf(event, position + len(hashes), url))
        start = position - 1
        end = start + len(hashes)
        cuts = [size for size in sorted(plan.by_size) if start < size < end] + [end]
        for size, nodes in _segments(hashes, start, cuts):
            frontier.extend(nodes)
            if size in plan.by_size:
                plan.check(size, frontier.root())
        position += len(hashes)
        report(position - 1)
    for note in kept:
        if 0 < note.size < latest.size:
            url = f"{api}/proof/consistency?from={note.size}&to={latest.size}"
            answer = _get_json(url, headers)
            items = answer.get("consistency") if isinstance(answer, dict) else None
            proof = [_b64(item) if isinstance(item, str) else None for item in items or []]
            if items is None or any(item is None for item in proof):
                raise InputError(f"GET {url}: the answer has no base64 consistency list")
            if not verify_consistency(note.size, latest.size, note.root, latest.root, [p for p in proof if p]):
                raise VerificationError(
                    f"fork: the server's consistency proof from {note.what} (size {note.size}) "
                    f"to size {latest.size} does not verify"
                )
    return Result(latest.size, frontier.root(), signer, len(kept), start=dropped)


def _server_leaf(event: Any, position: int, url: str) -> bytes:
    if not isinstance(event, dict):
        raise InputError(f"GET {url}: an event is not an object")
    if event.get("position") != position:
        raise VerificationError(f"the server sent position {event.get('position')} where position {position} belongs")
    event_id, encoded, leaf = event.get("event_id"), event.get("canonical"), event.get("leaf_hash")
    canonical = _b64(encoded) if isinstance(encoded, str) else None
    served = _b64(leaf) if isinstance(leaf, str) else None
    if not isinstance(event_id, int) or isinstance(event_id, bool) or event_id < 0 or canonical is None:
        raise VerificationError(f"position {position}: the event id or its base64 canonical bytes are malformed")
    if not canonical:
        raise VerificationError(f"position {position} (event {event_id}) has no event bytes: the event is missing")
    digest = _sha256(b"\x00" + str(event_id).encode() + b"\n" + canonical).digest()
    if served != digest:
        raise VerificationError(f"the server's leaf hash at position {position} does not match its event bytes")
    return digest


# --- Input ----------------------------------------------------------------------------------------


def _read_text(path_or_url: str) -> str:
    if path_or_url.startswith(("http://", "https://")):
        return _get(path_or_url, {}).decode("utf-8", "replace")
    try:
        with open(path_or_url, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise InputError(f"cannot read {path_or_url}: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path_or_url} is not UTF-8 text") from None


def _read_json(path: str) -> Any:
    try:
        return json.loads(_read_text(path))
    except ValueError:
        raise InputError(f"{path} is not JSON") from None


def _get(url: str, headers: dict[str, str]) -> bytes:
    if not url.startswith(("http://", "https://")):
        raise InputError(f"not an http(s) URL: {url}")
    import urllib.error  # only online: an offline check does not pay for importing the HTTP client
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "verify_audit_log", **headers})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - http(s) only, checked above
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as error:
        raise InputError(f"GET {url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        raise InputError(f"GET {url}: {reason}") from None


def _get_json(url: str, headers: dict[str, str]) -> Any:
    try:
        return json.loads(_get(url, headers))
    except ValueError:
        raise InputError(f"GET {url}: the answer is not JSON") from None


# --- Command line ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="verify_audit_log.py", description="Verify the audit log's Merkle tree and signed checkpoints."
    )
    parser.add_argument(
        "--key",
        action="append",
        required=True,
        help="verifier key <name>+<id>+<base64>, or a file of them; the first is the current key",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dir", help="an export directory (manage.py audit_export --out DIR)")
    source.add_argument("--url", help="the server's base URL (events and proofs need AUDIT_TOKEN or --token)")
    parser.add_argument("--checkpoint", help="the latest checkpoint note (a file or URL) instead of the export's")
    parser.add_argument(
        "--trusted-checkpoint", action="append", default=[], metavar="FILE", help="a checkpoint note kept from before"
    )
    parser.add_argument("--token", help="bearer token for --url (default: $AUDIT_TOKEN)")
    parser.add_argument("--progress", action="store_true", help="print progress to stderr every 100,000 events")
    parser.add_argument(
        "--workers", type=int, default=None, help="--dir: processes hashing events (0: one per CPU; 1: no pool)"
    )
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 0:
        parser.error("--workers must be >= 0")
    try:
        keys = load_keys(args.key)
        if args.dir is not None:
            result = verify_dir(
                args.dir,
                keys,
                checkpoint=args.checkpoint,
                trusted=args.trusted_checkpoint,
                progress=args.progress,
                workers=args.workers,
            )
        else:
            result = verify_url(
                args.url,
                keys,
                token=args.token or os.environ.get("AUDIT_TOKEN"),
                checkpoint=args.checkpoint,
                trusted=args.trusted_checkpoint,
                progress=args.progress,
            )
    except VerificationError as error:
        print(f"audit log FAILED: {error.reason}", file=sys.stderr)
        return 1
    except InputError as error:
        print(f"verify_audit_log.py: error: {error}", file=sys.stderr)
        return 2
    print(result.line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
