"""``audit_verify`` over the Merkle tree and the signed checkpoints: each forgery below is
what someone with the database owner's rights could do (triggers switched off), and each
is named (docs/audit-log.md, "What this protects against")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.utils import timezone

from audit import tree
from audit.actions import Action
from audit.canonical import canonical_bytes
from audit.chain import chain_all
from audit.checkpoints import sign_checkpoint
from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent
from audit.notes import Checkpoint, Signer
from audit.services import Event, record_many
from tests.audit.test_audit_verify_command import verify

pytestmark = pytest.mark.django_db

TRIGGERS = {
    "audit_event": "audit_event_append_only",
    "audit_chain_link": "audit_chain_link_append_only",
    "audit_tree_node": "audit_tree_node_append_only",
    "audit_checkpoint": "audit_checkpoint_append_only",
}


@contextmanager
def owner(*tables: str) -> Iterator[object]:
    """Run forgeries with the tables' append-only triggers off, as the database owner could."""
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {TRIGGERS[table]}")
        try:
            yield cursor
        finally:
            for table in tables:
                cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER {TRIGGERS[table]}")


def write(count: int) -> None:
    with transaction.atomic():
        record_many([Event(Action.STEP_CREATED, "token:agent", ("test.item", n), {"n": n}) for n in range(count)])
    chain_all()


def links() -> int:
    return tree.tree_size()


def test_an_intact_log_with_checkpoints_reports_the_latest_and_its_age() -> None:
    write(8)
    signed = sign_checkpoint()
    assert signed.checkpoint is not None

    run = verify("--chain-first")

    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1].startswith(f"merkle tree intact; 1 checkpoints verified, the latest (#{signed.checkpoint.pk}) ")
    assert f"signs {signed.tree_size} of {links()} links" in lines[1]


def test_a_leaf_of_the_tree_altered_is_named() -> None:
    write(5)
    with owner("audit_tree_node") as cursor:
        cursor.execute("UPDATE audit_tree_node SET hash = sha256(hash) WHERE level = 0 AND idx = 2")  # type: ignore[attr-defined]

    run = verify()

    assert run.code == 1
    assert "chain position 3" in run.stderr
    assert "the Merkle tree's leaf does not match the event" in run.stderr


def test_an_interior_node_altered_is_named_even_off_the_roots_path() -> None:
    while links() < 8:
        write(1)
    if links() > 8:
        pytest.skip("needs exactly 8 links")  # tokens or fixtures wrote more
    with owner("audit_tree_node") as cursor:
        cursor.execute("UPDATE audit_tree_node SET hash = sha256(hash) WHERE level = 1 AND idx = 1")  # type: ignore[attr-defined]

    run = verify()

    assert run.code == 1
    assert "the Merkle tree's node 1/1 is not the hash of its children" in run.stderr


def test_a_forged_checkpoint_without_a_valid_signature_is_named() -> None:
    write(3)
    size = links()
    forger = Signer.generate("localhost/rft-audit-log")  # the right name, not the log's key
    note = Checkpoint("localhost/rft-audit-log", size, tree.root(size)).sign(forger)
    forged = AuditCheckpoint.objects.create(  # INSERT is open: no trigger needed
        origin="localhost/rft-audit-log",
        tree_size=size,
        root_hash=tree.root(size),
        key_id=forger.verifier.key_id.hex(),
        note=note,
        created_at=timezone.now(),
    )

    run = verify()

    assert run.code == 1
    assert f"checkpoint {forged.pk} (tree size {size}): no valid signature by a published key" in run.stderr


def test_a_truncated_and_recomputed_tail_contradicts_the_checkpoint_that_signed_it() -> None:
    write(6)
    signed = sign_checkpoint()
    assert signed.checkpoint is not None
    keep = signed.tree_size - 2
    # The owner removes the last two events and their links, and rebuilds the tree so that
    # the chain and the tree agree again.
    with owner("audit_event", "audit_chain_link", "audit_tree_node") as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            "DELETE FROM audit_event WHERE id IN (SELECT event_id FROM audit_chain_link WHERE position > %s)", [keep]
        )
        cursor.execute("DELETE FROM audit_chain_link WHERE position > %s", [keep])  # type: ignore[attr-defined]
        cursor.execute("DELETE FROM audit_tree_node")  # type: ignore[attr-defined]
        tree.rebuild(cursor)

    run = verify()

    assert run.code == 1
    assert (
        f"checkpoint {signed.checkpoint.pk} (tree size {signed.tree_size}): "
        f"signed {signed.tree_size} leaves but the chain has {keep} links"
    ) in run.stderr


def test_a_rewritten_history_with_every_hash_recomputed_contradicts_the_signed_root() -> None:
    write(4)
    signed = sign_checkpoint()
    assert signed.checkpoint is not None
    # The owner rewrites the first event's payload, its canonical bytes, the whole chain and the tree.
    first = AuditEvent.objects.get(pk=AuditChainLink.objects.get(position=1).event_id)
    forged = canonical_bytes(
        action=first.action,
        actor=first.actor,
        target_type=first.target_type,
        target_id=first.target_id,
        payload={**first.payload, "forged": True},
        created_at=first.created_at,
    )
    with owner("audit_event", "audit_chain_link", "audit_tree_node") as cursor:
        cursor.execute(  # type: ignore[attr-defined]
            "UPDATE audit_event SET payload = payload || '{\"forged\": true}', canonical = %s WHERE id = %s",
            [forged, first.pk],
        )
        from audit.canonical import GENESIS_HASH, link_hash

        cursor.execute(  # type: ignore[attr-defined]
            "SELECT l.position, l.event_id, e.canonical FROM audit_chain_link l"
            " JOIN audit_event e ON e.id = l.event_id ORDER BY l.position"
        )
        prev = GENESIS_HASH
        for position, event_id, canonical in cursor.fetchall():  # type: ignore[attr-defined]
            digest = link_hash(prev, position, event_id, bytes(canonical))
            with connection.cursor() as update:
                update.execute(
                    "UPDATE audit_chain_link SET prev_hash = %s, hash = %s WHERE position = %s",
                    [prev, digest, position],
                )
            prev = digest
        cursor.execute("DELETE FROM audit_tree_node")  # type: ignore[attr-defined]
        tree.rebuild(cursor)

    run = verify()

    assert run.code == 1
    assert f"checkpoint {signed.checkpoint.pk} (tree size {signed.tree_size}): the signed root differs" in run.stderr


def test_linked_events_waiting_too_long_for_a_checkpoint_exit_2(settings: object) -> None:
    write(2)
    assert sign_checkpoint().checkpoint is not None
    write(3)

    with time_machine.travel(timezone.now() + timedelta(hours=2)):
        run = verify()

    assert run.code == 2
    assert "audit checkpoints BEHIND" in run.stderr
