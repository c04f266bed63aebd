"""Canonical encoding of an audit event: what the chain hashes.

The encoding must be reproducible from the stored columns, so ``audit_verify`` can
rebuild it and compare it byte for byte with the stored canonical bytes. The exact
form is specified in ``docs/audit-log.md``; ``record()`` refuses payloads whose bytes
could not be rebuilt from the jsonb column (see ``audit.services``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec

GENESIS_HASH = "0" * 64


# What record() writes in place of the time: the database stamps the row (trigger
# audit_event_stamp, migration 0005) and splices the time in between the two quotes.
CREATED_AT_PLACEHOLDER = b',"created_at":""'


def canonical_bytes(
    *, action: str, actor: str, target_type: str, target_id: str | UUID, payload: Any, created_at: datetime | None
) -> bytes:
    """The canonical bytes; with ``created_at=None`` the time is left empty
    (``CREATED_AT_PLACEHOLDER``) for the database to stamp. A ``UUID`` ``target_id`` is written as
    its text (``str()``'s hyphenated lower-case form; msgspec writes it so, in C).

    The form is ``json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    allow_nan=False)``'s. A payload of text, integers, booleans, nulls, lists and objects with
    text keys (what ``record()`` takes, floats apart) is encoded by msgspec (compiled, keys
    sorted), whose bytes for those are ``json.dumps``' (the tests compare them over generated
    payloads), at a fraction of the cost. msgspec writes some floats otherwise (``1e16`` for
    ``1e+16``) and encodes types ``json.dumps`` refuses, so any other payload goes through
    ``json.dumps``."""
    document = canonical_document(
        action=action,
        actor=actor,
        target_type=target_type,
        target_id=target_id,
        payload=payload,
        created_at=created_at,
    )
    if _plain(payload):
        return _ENCODER.encode(document)
    document["target_id"] = str(target_id)
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


_ENCODER = msgspec.json.Encoder(order="sorted")


def _plain(value: Any) -> bool:
    """Whether ``value`` holds only text, integers, booleans, nulls, lists and text-keyed objects
    (exactly these types: no subclass, no float)."""
    cls = value.__class__
    if cls is dict:
        return all(key.__class__ is str and _plain(item) for key, item in value.items())
    if cls is list or cls is tuple:
        return all(_plain(item) for item in value)
    return cls is str or cls is int or cls is bool or value is None


def canonical_document(
    *, action: str, actor: str, target_type: str, target_id: str | UUID, payload: Any, created_at: datetime | None
) -> dict[str, Any]:
    return {
        "action": action,
        "actor": actor,
        "created_at": "" if created_at is None else format_created_at(created_at),
        "payload": payload,
        "target_id": target_id,
        "target_type": target_type,
    }


def format_created_at(created_at: datetime) -> str:
    # ISO 8601 in UTC with "+00:00"; ".ffffff" only when the microseconds are not zero.
    return created_at.astimezone(UTC).isoformat()


def link_hash(prev_hash: str, position: int, event_id: int, canonical: bytes) -> str:
    digest = hashlib.sha256()
    digest.update(f"{prev_hash}|{position}|{event_id}|".encode())
    digest.update(canonical)
    return digest.hexdigest()
