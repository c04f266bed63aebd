"""Canonical encoding of an audit event: what the chain hashes.

The encoding must be reproducible from the stored columns, so ``audit_verify`` can
recompute it and notice any altered column.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

GENESIS_HASH = "0" * 64


def canonical_bytes(
    *, action: str, actor: str, target_type: str, target_id: str, payload: Any, created_at: datetime
) -> bytes:
    document = {
        "action": action,
        "actor": actor,
        "created_at": created_at.astimezone(UTC).isoformat(),
        "payload": payload,
        "target_id": target_id,
        "target_type": target_type,
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def link_hash(prev_hash: str, position: int, event_id: int, canonical: bytes) -> str:
    digest = hashlib.sha256()
    digest.update(f"{prev_hash}|{position}|{event_id}|".encode())
    digest.update(canonical)
    return digest.hexdigest()
