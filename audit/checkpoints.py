"""Signed checkpoints of the audit log's Merkle tree (docs/audit-log.md, "Checkpoints").

``sign_checkpoint`` signs the tree as it is when it grew since the latest checkpoint (or
the signing key changed), stores the note (INSERT-only) and audits it, in one transaction
that holds the chainer's lock, so the tree cannot move while it is read. It never signs a
history that contradicts the latest checkpoint: a tree smaller than that checkpoint, or
whose root at that size differs, is refused (audited ``audit.checkpoint.refused``, logged).

The checkpoint's own audit event is a leaf of the next tree. So that a quiet log does not
sign a new checkpoint every minute only to cover the previous one's event, growth made of
checkpoint events alone does not count as growth.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit import tree
from audit.actions import Action
from audit.chain import CHAINER_LOCK_KEY
from audit.models import AuditCheckpoint
from audit.notes import Checkpoint, Signer, Verifier, parse_checkpoint, parse_note
from audit.services import record

logger = logging.getLogger(__name__)

ACTOR = "system:audit_checkpoint"


@lru_cache(maxsize=4)
def _signer(key: str) -> Signer:
    return Signer.parse(key)


def signer() -> Signer:
    """The configured signing key (settings validated it at start-up)."""
    return _signer(settings.AUDIT_LOG_SIGNING_KEY)


def verifiers() -> list[Verifier]:
    """The current verifier key first, then the rotated-out ones still published."""
    return [signer().verifier, *(Verifier.parse(key) for key in settings.AUDIT_LOG_PREVIOUS_KEYS)]


class CheckpointRefused(RuntimeError):
    """The tree contradicts the latest checkpoint: signing now would bless a rewrite."""


@dataclass(frozen=True)
class Signed:
    checkpoint: AuditCheckpoint | None  # None: nothing new to sign
    tree_size: int


def _only_checkpoint_events_after(cursor: Any, size: int) -> bool:
    cursor.execute(
        "SELECT NOT EXISTS (SELECT 1 FROM audit_chain_link l JOIN audit_event e ON e.id = l.event_id"
        " WHERE l.position > %s AND e.action <> %s)",
        [size, Action.AUDIT_CHECKPOINT_SIGNED.value],
    )
    return bool(cursor.fetchone()[0])


def sign_checkpoint(*, force: bool = False) -> Signed:
    """Sign and store a checkpoint of the whole tree when it grew (``force``: even when not)."""
    key = signer()
    kid = key.verifier.key_id.hex()
    origin = settings.AUDIT_LOG_ORIGIN
    try:
        return _sign(key, kid, origin, force=force)
    except CheckpointRefused as exc:
        logger.error("audit checkpoint refused: %s", exc)
        # In a transaction of its own: the signing one rolled back.
        with transaction.atomic():
            record(Action.AUDIT_CHECKPOINT_REFUSED, actor=ACTOR, payload={"reason": str(exc)[:200]})
        raise


def _sign(key: Signer, kid: str, origin: str, *, force: bool) -> Signed:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAINER_LOCK_KEY])
        size = tree.tree_size(cursor)
        latest = AuditCheckpoint.objects.order_by("-id").first()
        if latest is not None:
            _check_against(latest, size, cursor)
            unchanged = latest.key_id == kid and latest.origin == origin
            if (
                unchanged
                and not force
                and (size == latest.tree_size or _only_checkpoint_events_after(cursor, latest.tree_size))
            ):
                return Signed(None, size)
        root_hash = tree.root(size, cursor)
        note = Checkpoint(origin, size, root_hash).sign(key)
        checkpoint = AuditCheckpoint.objects.create(
            origin=origin, tree_size=size, root_hash=root_hash, key_id=kid, note=note, created_at=timezone.now()
        )
        record(
            Action.AUDIT_CHECKPOINT_SIGNED,
            actor=ACTOR,
            target=checkpoint,
            payload={
                "tree_size": size,
                "key_id": kid,
                "previous_tree_size": latest.tree_size if latest is not None else None,
            },
        )
    logger.info("audit checkpoint %d signed at tree size %d", checkpoint.pk, size)
    return Signed(checkpoint, size)


def _check_against(latest: AuditCheckpoint, size: int, cursor: Any) -> None:
    reason = None
    if size < latest.tree_size:
        reason = f"the tree has {size} leaves but checkpoint {latest.pk} signed {latest.tree_size}"
    else:
        try:
            if tree.root(latest.tree_size, cursor) != bytes(latest.root_hash):
                reason = f"the tree's root at size {latest.tree_size} differs from checkpoint {latest.pk}'s"
        except tree.MissingNodes as exc:
            reason = f"{exc} at size {latest.tree_size} (checkpoint {latest.pk})"
    if reason is None:
        return
    raise CheckpointRefused(reason)


def latest_checkpoint() -> AuditCheckpoint | None:
    return AuditCheckpoint.objects.order_by("-id").first()


def check_note(note: str) -> tuple[Checkpoint, Verifier | None]:
    """The checkpoint a stored note carries and the published key that signed it (None: none did)."""
    signed = parse_note(note)
    checkpoint = parse_checkpoint(signed.body)
    for verifier in verifiers():
        if signed.signed_by(verifier):
            return checkpoint, verifier
    return checkpoint, None
