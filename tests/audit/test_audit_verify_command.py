"""``audit_verify``: exit 0 on an intact chain, exit 1 naming the first break.

Each tamper case disables the append-only trigger for the duration of the forgery, as
an attacker with database-owner rights could, and checks the exact position reported.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from audit.actions import Action
from audit.canonical import canonical_bytes
from audit.chain import chain_all
from audit.models import AuditChainLink, AuditEvent, AuditPending
from audit.services import record
from audit.verify import verify_chain
from tests.conftest import DatabaseClock


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


# Each audit table's protecting trigger.
TRIGGERS = {
    "audit_event": "audit_event_append_only",
    "audit_chain_link": "audit_chain_link_append_only",
    "audit_pending": "audit_pending_chainer_only",
    "audit_tree_node": "audit_tree_node_append_only",
}


@contextmanager
def trigger_disabled(table: str) -> Iterator[None]:
    trigger = TRIGGERS[table]
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


def queue(event_id: int) -> None:
    """Slip a row into the chainer's queue (INSERT is open to every writer)."""
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO audit_pending (event_id) VALUES (%s)", [event_id])


# --- intact ---------------------------------------------------------------------------


def test_verify_of_intact_chain_exits_normally_and_prints_the_link_count(chain: list[int]) -> None:
    run = verify()

    assert run.code == 0
    assert run.stdout.splitlines() == [
        "audit chain intact: 5 links verified",
        "merkle tree intact; no checkpoint signed yet",
    ]
    assert run.stderr == ""


def test_verify_of_empty_trail_reports_zero_links(db: None) -> None:
    run = verify()

    assert run.code == 0
    assert run.stdout.splitlines()[0] == "audit chain intact: 0 links verified"


def test_verify_succeeds_again_after_more_events_are_chained(chain: list[int]) -> None:
    _record_events(3)
    chain_all()

    assert verify().stdout.splitlines()[0] == "audit chain intact: 8 links verified"


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
    # A millisecond: the row stays in its month's partition.
    backdate = "UPDATE audit_event SET created_at = created_at - interval '1 millisecond' WHERE id = %s"
    tamper("audit_event", backdate, [chain[1]])

    run = verify()

    assert run.code == 1
    assert f"chain position 2, event sequence {chain[1]}: column 'created_at' was altered" in run.stderr


def test_verify_breaks_at_an_event_id_that_appears_twice(chain: list[int]) -> None:
    # Partitioned by time, the primary key is (id, created_at): the owner could slip in a second
    # event under a chained event's id. The walk meets the id twice and stops there.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_event (id, action, actor, target_type, target_id, payload, canonical)"
            " SELECT id, action, actor, target_type, target_id, payload, convert_to("
            '\'{"action":"x","created_at":""}\', \'UTF8\') FROM audit_event WHERE id = %s',
            [chain[2]],
        )

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 3, event sequence {chain[2]}: "
        "a second event was written under this event's sequence number"
    )


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
            INSERT INTO audit_event (action, actor, target_type, target_id, payload, canonical)
            VALUES ('auth.api_token.created', 'system:cli', '', '', '{}'::jsonb, convert_to(%s, 'UTF8'))
            RETURNING id
            """,
            [
                '{"action":"auth.api_token.created","actor":"system:cli","created_at":"","payload":{},'
                '"target_id":"","target_type":""}'
            ],
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


def test_verify_reports_pending_events_as_awaiting_chaining_and_exits_normally(
    chain: list[int], db_clock: DatabaseClock
) -> None:
    _record_events(3)
    db_clock.shift(timedelta(seconds=5))

    run = verify()

    assert run.code == 0
    assert (
        run.stdout.splitlines()[0]
        == "audit chain intact: 5 links verified; 3 events awaiting chaining, the oldest for 5.0 s"
    )
    # Verifying alone does not chain.
    assert AuditPending.objects.count() == 3
    assert AuditChainLink.objects.count() == 5


def test_verify_with_chain_first_links_pending_events_before_verifying(chain: list[int]) -> None:
    pending = _record_events(3)

    run = verify("--chain-first")

    assert run.code == 0
    assert run.stdout.splitlines()[0] == "audit chain intact: 8 links verified"
    assert not AuditPending.objects.exists()
    assert (
        list(AuditChainLink.objects.filter(position__gt=5).order_by("position").values_list("event_id", flat=True))
        == pending
    )


@pytest.mark.parametrize(
    "value",
    [0.1 + 0.2, 12345678.9, 0.85, 1.0, 0.0001, 123456789012345.6, -2.5],
    ids=["0.3", "12345678.9", "0.85", "1.0", "0.0001", "1.2e14", "-2.5"],
)
def test_verify_accepts_an_untampered_event_with_a_float_in_its_payload(db: None, value: float) -> None:
    record(Action.FLOW_COMPLETED, actor="token:agent", payload={"latency_ms": value})
    chain_all()

    run = verify()

    assert run.code == 0, run.stderr
    assert run.stdout.splitlines()[0] == "audit chain intact: 1 links verified"


# --- events not chained yet ----------------------------------------------------------


def test_verify_names_an_unchained_event_whose_column_was_changed(chain: list[int]) -> None:
    # The reported case: no chainer running, one queued event's action edited in place.
    (pending,) = _record_events(1)
    tamper("audit_event", "UPDATE audit_event SET action = %s WHERE id = %s", ["reasoning.flow.aborted", pending])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at event sequence {pending}: column 'action' was altered after the event was written"
    )
    assert run.stdout.strip() == "checked 5 links before the break"


def test_verify_exits_2_when_chain_lags(chain: list[int], db_clock: DatabaseClock) -> None:
    _record_events(2)
    db_clock.shift(timedelta(seconds=61))

    run = verify()

    assert run.code == 2
    assert (
        run.stdout.splitlines()[0]
        == "audit chain intact: 5 links verified; 2 events awaiting chaining, the oldest for 61.0 s"
    )
    assert "the audit chainer is not running or is behind" in run.stderr
    assert "AUDIT_CHAIN_MAX_LAG_S is 60 s" in run.stderr


def test_verify_exits_0_while_the_tail_is_younger_than_the_threshold(chain: list[int], db_clock: DatabaseClock) -> None:
    _record_events(2)
    db_clock.shift(timedelta(seconds=59))

    run = verify()

    assert run.code == 0
    assert run.stderr == ""


def test_verify_lag_threshold_follows_the_setting(chain: list[int], settings: Any, db_clock: DatabaseClock) -> None:
    settings.AUDIT_CHAIN_MAX_LAG_S = 5.0
    _record_events(1)
    db_clock.shift(timedelta(seconds=6))

    run = verify()

    assert run.code == 2
    assert "AUDIT_CHAIN_MAX_LAG_S is 5 s" in run.stderr


def test_verify_with_chain_first_is_current_however_old_the_tail_was(chain: list[int], db_clock: DatabaseClock) -> None:
    _record_events(2)
    db_clock.shift(timedelta(minutes=10))

    run = verify("--chain-first")

    assert run.code == 0
    assert run.stdout.splitlines()[0] == "audit chain intact: 7 links verified"


# --- the chainer's queue -------------------------------------------------------------


def test_queue_row_cannot_be_deleted_outside_the_chainer(db: None) -> None:
    (pending,) = _record_events(1)

    with pytest.raises(DatabaseError, match="removed only by the audit chainer"), transaction.atomic():
        AuditPending.objects.filter(event_id=pending).delete()

    assert AuditPending.objects.filter(event_id=pending).exists()


def test_queue_row_cannot_be_updated(db: None) -> None:
    (pending,) = _record_events(1)

    with pytest.raises(DatabaseError, match="UPDATE is not allowed"), transaction.atomic():
        AuditPending.objects.filter(event_id=pending).update(event_id=pending + 1000)

    assert AuditPending.objects.filter(event_id=pending).exists()


def test_verify_names_a_queue_row_whose_event_does_not_exist(chain: list[int]) -> None:
    queue(10_000_000)

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        "audit chain BROKEN at event sequence 10000000: queued for chaining but the event does not exist"
    )


def test_verify_names_a_linked_event_queued_again(chain: list[int]) -> None:
    queue(chain[1])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at chain position 2, event sequence {chain[1]}: "
        "event is already linked but queued for chaining again"
    )


def test_verify_names_a_queued_event_whose_queue_row_was_removed(chain: list[int]) -> None:
    (pending,) = _record_events(1)
    tamper("audit_pending", "DELETE FROM audit_pending WHERE event_id = %s", [pending])

    run = verify()

    assert run.code == 1
    assert run.stderr.strip() == (
        f"audit chain BROKEN at event sequence {pending}: event is not in the chain and not queued for chaining"
    )


# --- byte-for-byte payloads ----------------------------------------------------------


def _record_payload(payload: dict[str, Any]) -> int:
    with transaction.atomic():
        return record(Action.STEP_CREATED, actor="token:agent", payload=payload)


@pytest.mark.parametrize(
    ("written", "forged"),
    [
        ({"ok": True}, '{"ok": 1}'),
        ({"confidence": 1.0}, '{"confidence": 1}'),
        ({"count": 1}, '{"count": 1.0}'),
        ({"count": 1}, '{"count": true}'),
        ({"score": 0.5}, '{"score": 0.50}'),
    ],
    ids=["true-to-1", "1.0-to-1", "1-to-1.0", "1-to-true", "0.5-to-0.50"],
)
@pytest.mark.parametrize("linked", [True, False], ids=["linked", "unlinked"])
def test_verify_names_a_payload_number_rewritten_to_an_equal_value(
    db: None, written: dict[str, Any], forged: str, linked: bool
) -> None:
    event_id = _record_payload(written)
    if linked:
        chain_all()
    tamper("audit_event", "UPDATE audit_event SET payload = %s::jsonb WHERE id = %s", [forged, event_id])

    run = verify()

    assert run.code == 1
    position = "chain position 1, " if linked else ""
    assert run.stderr.strip() == (
        f"audit chain BROKEN at {position}event sequence {event_id}: "
        "column 'payload' was altered after the event was written"
    )


def test_verify_accepts_payloads_of_every_accepted_shape(db: None) -> None:
    _record_payload(
        {
            "ids": [1, 2, 3],
            "nested": {"b": [True, False, None], "a": {"z": 0.25, "ä": "naïve ✓"}},
            "big": 10**30,
            "negative": -7,
            "zero": 0.0,
            "quote": 'say "hi"\\ and \ttab',
            "emoji": "🙂",
            "": "empty key",
        }
    )
    chain_all()
    _record_payload({"pending": 0.1, "keys": {"B": 1, "a": 2, "é": 3, "🙂": 4}})

    run = verify()

    assert run.code == 0, run.stderr
    assert run.stdout.startswith("audit chain intact: 1 links verified; 1 events awaiting chaining")


# --- timestamps no datetime can hold -------------------------------------------------


@pytest.mark.parametrize("forged", ["infinity", "-infinity", "0044-03-15 12:00:00+00 BC"])
@pytest.mark.parametrize("linked", [True, False], ids=["linked", "unlinked"])
def test_verify_names_an_event_whose_created_at_is_out_of_range(chain: list[int], forged: str, linked: bool) -> None:
    (event_id,) = _record_events(1)
    if linked:
        chain_all()
    # No month partition holds such a time: the forger (the owner) adds a catch-all partition, and
    # the row moves there (a DELETE and an INSERT, so the stamp trigger is off too).
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE audit_event_forged PARTITION OF audit_event DEFAULT")
    with trigger_disabled("audit_event"), connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_stamp")
        cursor.execute("UPDATE audit_event SET created_at = %s::timestamptz WHERE id = %s", [forged, event_id])
        assert cursor.rowcount == 1

    run = verify()

    assert run.code == 1
    position = "chain position 6, " if linked else ""
    assert run.stderr.strip() == (
        f"audit chain BROKEN at {position}event sequence {event_id}: "
        "column 'created_at' was altered after the event was written (timestamp out of range)"
    )


# --- one snapshot --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_verify_counts_the_tail_in_the_snapshot_it_walked() -> None:
    _record_events(3)
    chain_all()
    _record_events(1)
    errors: list[BaseException] = []

    def write_during_the_walk(_: int) -> None:
        # Another connection commits two events after the links were read.
        def writer() -> None:
            try:
                _record_events(2)
            except BaseException as exc:
                errors.append(exc)
            finally:
                connection.close()

        thread = threading.Thread(target=writer)
        thread.start()
        thread.join(60)

    result = verify_chain(on_progress=write_during_the_walk)

    assert not errors
    assert result.ok, result.broken
    assert (result.linked, result.pending) == (3, 1)
    # The two written during the walk are queued, just not part of what was verified.
    assert AuditPending.objects.count() == 3


# --- from the latest checkpoint ------------------------------------------------------------


@pytest.fixture
def signed_then_grown(chain: list[int]) -> list[int]:
    """The five chained events signed by a checkpoint, then three more chained after it."""
    from audit.checkpoints import sign_checkpoint

    assert sign_checkpoint().tree_size == 5
    _record_events(3)
    chain_all()
    return list(AuditChainLink.objects.order_by("position").values_list("event_id", flat=True))


def test_verify_since_checkpoint_walks_only_what_follows_it(signed_then_grown: list[int]) -> None:
    # The checkpoint's own event (audit.checkpoint.signed) is chained too.
    grown = len(signed_then_grown) - 5

    run = verify("--since-checkpoint")

    assert run.code == 0, run.stderr
    assert run.stdout.startswith(f"audit chain intact: {grown} links verified after position 5")


def test_verify_since_checkpoint_finds_a_change_after_it_and_not_before(signed_then_grown: list[int]) -> None:
    before, after = signed_then_grown[1], signed_then_grown[6]
    tamper("audit_event", "UPDATE audit_event SET actor = 'someone-else' WHERE id = %s", [before])

    # What the checkpoint covers is the full walk's to check.
    assert verify("--since-checkpoint").code == 0
    assert "chain position 2" in verify().stderr

    tamper("audit_event", "UPDATE audit_event SET actor = 'someone-else' WHERE id = %s", [after])
    run = verify("--since-checkpoint")
    assert run.code == 1
    assert f"chain position 7, event sequence {after}: column 'actor' was altered" in run.stderr


def test_verify_since_checkpoint_refuses_a_tree_edge_that_does_not_lead_to_the_signed_root(
    signed_then_grown: list[int],
) -> None:
    # The edge of the tree at 5 leaves is nodes (2, 0) and (0, 4): forge the first one.
    tamper("audit_tree_node", "UPDATE audit_tree_node SET hash = %s WHERE level = 2 AND idx = 0", [b"\x00" * 32])

    run = verify("--since-checkpoint")

    # The edge no longer leads to the stored tree's root (nor to the signed one).
    assert run.code == 1
    assert "the Merkle tree's stored nodes do not hash to the events' root" in run.stderr
