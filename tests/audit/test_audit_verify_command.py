"""``audit_verify``: exit 0 on an intact chain, exit 1 naming the first break.

Each tamper case disables the append-only trigger for the duration of the forgery, as
an attacker with database-owner rights could, and checks the exact position reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from audit.actions import Action
from audit.canonical import canonical_bytes
from audit.chain import chain_all
from audit.models import AuditChainLink, AuditEvent, AuditPending
from audit.services import record


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


def verify(*args: str) -> Run:
    out, err = StringIO(), StringIO()
    try:
        call_command("audit_verify", "--no-progress", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        assert isinstance(exc.code, int)
        return Run(exc.code, out.getvalue(), err.getvalue())
    return Run(0, out.getvalue(), err.getvalue())


def _record_events(count: int) -> list[int]:
    ids = []
    for i in range(count):
        with transaction.atomic():
            ids.append(record(Action.STEP_CREATED, actor="token:agent", target=("test.item", i), payload={"count": i}))
    return ids


@pytest.fixture
def chain(db: None) -> list[int]:
    """Five chained events; returns their sequence numbers in chain order (index 0 = position 1)."""
    _record_events(5)
    assert chain_all() == 5
    return list(AuditChainLink.objects.order_by("position").values_list("event_id", flat=True))


@contextmanager
def trigger_disabled(table: str) -> Iterator[None]:
    trigger = f"{table}_append_only"
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")


def tamper(table: str, statement: str, params: list[Any]) -> None:
    """Run one forging statement with the table's trigger off; it must touch exactly one row."""
    with trigger_disabled(table), connection.cursor() as cursor:
        cursor.execute(statement, params)
        assert cursor.rowcount == 1, f"forgery touched {cursor.rowcount} rows"


# --- intact ---------------------------------------------------------------------------


def test_verify_of_intact_chain_exits_normally_and_prints_the_link_count(chain: list[int]) -> None:
    run = verify()

    assert run.code == 0
    assert run.stdout.strip() == "audit chain intact: 5 links verified"
    assert run.stderr == ""


def test_verify_of_empty_trail_reports_zero_links(db: None) -> None:
    run = verify()

    assert run.code == 0
    assert run.stdout.strip() == "audit chain intact: 0 links verified"


def test_verify_succeeds_again_after_more_events_are_chained(chain: list[int]) -> None:
    _record_events(3)
    chain_all()

    assert verify().stdout.strip() == "audit chain intact: 8 links verified"


# --- tampered events -----------------------------------------------------------------


def test_verify_names_first_altered_position_when_a_payload_is_changed(chain: list[int]) -> None:
    tamper("audit_event", "UPDATE audit_event SET payload = '{\"count\": 999}' WHERE id = %s", [chain[2]])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 3, event sequence {chain[2]}: "
        "column 'payload' was altered after the event was written"
    )
    assert run.stdout.strip() == "checked 2 links before the break"


@pytest.mark.parametrize(
    ("column", "value"),
    [("actor", "system:someone-else"), ("action", "reasoning.flow.aborted"), ("target_id", "other")],
)
def test_verify_names_the_position_of_an_event_whose_column_was_changed(
    chain: list[int], column: str, value: str
) -> None:
    tamper("audit_event", f"UPDATE audit_event SET {column} = %s WHERE id = %s", [value, chain[3]])

    run = verify()

    assert run.code == 1
    assert f"chain position 4, event sequence {chain[3]}: column '{column}' was altered" in run.stderr


def test_verify_names_the_position_when_created_at_is_backdated(chain: list[int]) -> None:
    tamper("audit_event", "UPDATE audit_event SET created_at = created_at - interval '1 day' WHERE id = %s", [chain[1]])

    run = verify()

    assert run.code == 1
    assert f"chain position 2, event sequence {chain[1]}: column 'created_at' was altered" in run.stderr


def test_verify_catches_payload_rewritten_together_with_its_canonical_bytes(chain: list[int]) -> None:
    # A careful forger keeps columns and canonical bytes consistent; the link hash still binds the original.
    event = AuditEvent.objects.get(pk=chain[2])
    forged = canonical_bytes(
        action=event.action,
        actor=event.actor,
        target_type=event.target_type,
        target_id=event.target_id,
        payload={"count": 999},
        created_at=event.created_at,
    )
    tamper(
        "audit_event",
        "UPDATE audit_event SET payload = %s::jsonb, canonical = %s WHERE id = %s",
        [json.dumps({"count": 999}), forged, chain[2]],
    )

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 3, event sequence {chain[2]}: "
        "hash does not match the event's canonical bytes"
    )


def test_verify_names_the_position_of_a_deleted_event(chain: list[int]) -> None:
    tamper("audit_event", "DELETE FROM audit_event WHERE id = %s", [chain[1]])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 2, event sequence {chain[1]}: the linked event is missing"
    )


def test_verify_names_a_forged_event_that_is_neither_linked_nor_pending(chain: list[int]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO audit_event (action, actor, target_type, target_id, payload, created_at, canonical)
            VALUES ('auth.api_token.created', 'system:cli', '', '', '{}'::jsonb, now(), '\\x7b7d'::bytea)
            RETURNING id
            """
        )
        row = cursor.fetchone()
    assert row is not None
    forged_id = int(row[0])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at event sequence {forged_id}: event is not in the chain and not queued for chaining"
    )
    # The walk itself was clean: every real link checked before the stray event was found.
    assert run.stdout.strip() == "checked 5 links before the break"


# --- tampered links ------------------------------------------------------------------


def test_verify_names_the_gap_left_by_a_deleted_link(chain: list[int]) -> None:
    tamper("audit_chain_link", "DELETE FROM audit_chain_link WHERE position = %s", [3])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        "audit chain BROKEN at chain position 3: link missing (next link found is position 4)"
    )


def test_verify_names_the_event_orphaned_by_deleting_the_last_link(chain: list[int]) -> None:
    tamper("audit_chain_link", "DELETE FROM audit_chain_link WHERE position = %s", [5])

    run = verify()

    assert run.code == 1
    assert f"event sequence {chain[4]}: event is not in the chain and not queued for chaining" in run.stderr


def test_verify_names_the_first_of_two_links_whose_events_were_swapped(chain: list[int]) -> None:
    # event_id is unique, so swap through a placeholder.
    tamper("audit_chain_link", "UPDATE audit_chain_link SET event_id = -1 WHERE position = %s", [2])
    tamper("audit_chain_link", "UPDATE audit_chain_link SET event_id = %s WHERE position = %s", [chain[1], 3])
    tamper("audit_chain_link", "UPDATE audit_chain_link SET event_id = %s WHERE position = %s", [chain[2], 2])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 2, event sequence {chain[2]}: "
        "hash does not match the event's canonical bytes"
    )


def test_verify_names_the_link_whose_prev_hash_was_altered(chain: list[int]) -> None:
    tamper("audit_chain_link", "UPDATE audit_chain_link SET prev_hash = %s WHERE position = %s", ["f" * 64, 4])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 4, event sequence {chain[3]}: "
        "prev_hash does not match the previous link's hash"
    )


def test_verify_names_the_link_whose_hash_was_altered(chain: list[int]) -> None:
    tamper("audit_chain_link", "UPDATE audit_chain_link SET hash = %s WHERE position = %s", ["e" * 64, 3])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 3, event sequence {chain[2]}: "
        "hash does not match the event's canonical bytes"
    )


# --- the pending tail ----------------------------------------------------------------


def test_verify_reports_pending_events_as_awaiting_chaining_and_exits_normally(chain: list[int]) -> None:
    _record_events(3)

    run = verify()

    assert run.code == 0
    assert run.stdout.strip() == "audit chain intact: 5 links verified; 3 events awaiting chaining"
    # Verifying alone does not chain.
    assert AuditPending.objects.count() == 3
    assert AuditChainLink.objects.count() == 5


def test_verify_with_chain_first_links_pending_events_before_verifying(chain: list[int]) -> None:
    pending = _record_events(3)

    run = verify("--chain-first")

    assert run.code == 0
    assert run.stdout.strip() == "audit chain intact: 8 links verified"
    assert not AuditPending.objects.exists()
    assert (
        list(AuditChainLink.objects.filter(position__gt=5).order_by("position").values_list("event_id", flat=True))
        == pending
    )


@pytest.mark.parametrize("value", [0.1 + 0.2, 1e-7, 12345678.9, 1e23], ids=["0.3", "1e-7", "12345678.9", "1e23"])
def test_verify_accepts_an_untampered_event_with_a_float_in_its_payload(db: None, value: float) -> None:
    record(Action.FLOW_COMPLETED, actor="token:agent", payload={"latency_ms": value})
    chain_all()

    run = verify()

    assert run.code == 0, run.stderr
    assert run.stdout.strip() == "audit chain intact: 1 links verified"
