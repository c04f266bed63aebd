"""The chainer: pending events become a linear hash chain, also under concurrency."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction

from audit.actions import Action
from audit.canonical import GENESIS_HASH
from audit.chain import (
    CHAINER_LOCK_KEY,
    CHAINER_LOOP_LOCK_KEY,
    chain_all,
    chain_pending,
    chainer_loop_running,
    id_predicate,
    run_chainer,
)
from audit.jobs import run_chainer as run_chainer_job
from audit.models import AuditChainLink, AuditEvent, AuditPending
from audit.services import Event, record, record_many
from audit.verify import verify_chain

# Generous bound for thread hand-offs; a healthy run takes milliseconds.
THREAD_TIMEOUT = 60
REPO_ROOT = Path(__file__).resolve().parents[2]


def _record_events(count: int, *, actor: str = "system:test") -> list[int]:
    """Write ``count`` events, each in its own transaction; return their sequence numbers."""
    ids = []
    for i in range(count):
        with transaction.atomic():
            ids.append(record(Action.STEP_CREATED, actor=actor, target=("test.item", i), payload={"i": i}))
    return ids


def _links() -> list[AuditChainLink]:
    return list(AuditChainLink.objects.order_by("position"))


def _expected_hash(prev_hash: str, position: int, event_id: int, canonical: bytes) -> str:
    # Written out from the design (sha256 over prev_hash|position|event_id|canonical), not
    # imported, so a change to the production hash shows up here.
    return hashlib.sha256(f"{prev_hash}|{position}|{event_id}|".encode() + canonical).hexdigest()


def test_chain_pending_links_pending_events_in_sequence_order(db: None) -> None:
    ids = _record_events(5)

    assert chain_pending() == 5

    assert [(link.position, link.event_id) for link in _links()] == list(zip(range(1, 6), ids, strict=True))
    assert not AuditPending.objects.exists()


def test_each_link_hashes_previous_hash_position_event_and_canonical_bytes(db: None) -> None:
    _record_events(3)
    assert chain_pending() == 3
    _record_events(4)
    assert chain_pending() == 4

    links = _links()
    canonical = {event.pk: bytes(event.canonical) for event in AuditEvent.objects.all()}
    assert [link.position for link in links] == list(range(1, 8))
    prev_hash = GENESIS_HASH
    for link in links:
        assert link.prev_hash == prev_hash, f"link {link.position} does not point at link {link.position - 1}"
        assert link.hash == _expected_hash(prev_hash, link.position, link.event_id, canonical[link.event_id])
        prev_hash = link.hash


def test_chain_pending_takes_at_most_batch_size_oldest_events(db: None) -> None:
    ids = _record_events(5)

    assert chain_pending(batch_size=2) == 2

    assert [link.event_id for link in _links()] == ids[:2]
    assert sorted(AuditPending.objects.values_list("event_id", flat=True)) == ids[2:]


def test_chain_all_links_every_pending_event_across_batches(db: None) -> None:
    ids = _record_events(7)

    assert chain_all(batch_size=3) == 7

    assert [(link.position, link.event_id) for link in _links()] == list(zip(range(1, 8), ids, strict=True))
    assert not AuditPending.objects.exists()
    assert verify_chain().ok


def test_chain_pending_with_nothing_pending_links_nothing(db: None) -> None:
    assert chain_pending() == 0
    assert not AuditChainLink.objects.exists()


def test_a_burst_after_the_queue_was_found_empty_is_linked_by_plans_of_its_size(db: None) -> None:
    # Autovacuum finding the queue empty leaves its statistics at 0 rows. A statement the
    # connection had prepared then (after DB_PREPARE_THRESHOLD polls of the empty queue) kept a
    # nested loop over sequential scans of the queue: seconds a batch once a burst filled it.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_pending")
    for _ in range((settings.DATABASES["default"]["OPTIONS"].get("prepare_threshold") or 0) + 3):
        assert chain_pending() == 0
    with transaction.atomic():
        ids = record_many([Event(Action.STEP_CREATED, "system:test", ("test.item", i), {"i": i}) for i in range(1500)])

    assert chain_all() == 1500

    assert [link.event_id for link in _links()] == ids
    assert verify_chain().ok
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%audit_pending%"])
        assert cursor.fetchall() == []  # planned at each batch, from the queue's size then


def test_audit_chainer_once_links_everything_pending_even_past_one_batch(db: None) -> None:
    ids = _record_events(5)
    # The command installs SIGINT/SIGTERM handlers; keep pytest's own.
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    out = StringIO()
    try:
        call_command("audit_chainer", "--once", "--batch-size", "2", stdout=out)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    assert [link.event_id for link in _links()] == ids
    assert not AuditPending.objects.exists()
    assert "audit chainer stopped" in out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_chainer_leaves_uncommitted_events_for_a_later_run() -> None:
    recorded = threading.Event()
    commit = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                record(Action.STEP_CREATED, actor="system:slow-writer")
                recorded.set()
                assert commit.wait(THREAD_TIMEOUT)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert recorded.wait(THREAD_TIMEOUT)
        assert chain_all() == 0
    finally:
        commit.set()
        thread.join(THREAD_TIMEOUT)
    assert not errors

    assert chain_all() == 1
    assert verify_chain().ok


@pytest.mark.django_db(transaction=True)
def test_chain_pending_without_wait_returns_zero_while_another_chainer_holds_the_lock() -> None:
    ids = _record_events(3)
    held = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def other_chainer() -> None:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAINER_LOCK_KEY])
                held.set()
                assert release.wait(THREAD_TIMEOUT)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=other_chainer)
    thread.start()
    try:
        assert held.wait(THREAD_TIMEOUT)
        assert chain_pending(wait=False) == 0
        assert sorted(AuditPending.objects.values_list("event_id", flat=True)) == ids
    finally:
        release.set()
        thread.join(THREAD_TIMEOUT)
    assert not errors

    assert chain_pending(wait=False) == 3
    assert [link.event_id for link in _links()] == ids


WRITERS = 8
EVENTS_PER_WRITER = 50
CHAINERS = 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_and_chainers_link_every_event_exactly_once() -> None:
    start = threading.Barrier(WRITERS + CHAINERS, timeout=THREAD_TIMEOUT)
    writers_done = threading.Event()
    errors: list[BaseException] = []
    linked_by_chainers: list[int] = []

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(EVENTS_PER_WRITER):
                with transaction.atomic():
                    record(Action.STEP_CREATED, actor=f"system:writer-{n}", target=("test.writer", n), payload={"i": i})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    def chainer(n: int) -> None:
        total = 0
        try:
            start.wait()
            while not writers_done.is_set():
                # One waiting chainer, two that skip when the lock is taken; small,
                # uneven batches so links interleave with commits.
                total += chain_all(batch_size=7) if n == 0 else chain_pending(batch_size=4 + n, wait=False)
        except BaseException as exc:
            errors.append(exc)
        finally:
            linked_by_chainers.append(total)
            connection.close()

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    chainers = [threading.Thread(target=chainer, args=(n,)) for n in range(CHAINERS)]
    for thread in writers + chainers:
        thread.start()
    for thread in writers:
        thread.join(THREAD_TIMEOUT)
    writers_done.set()
    for thread in chainers:
        thread.join(THREAD_TIMEOUT)
    assert not any(thread.is_alive() for thread in writers + chainers), "a thread hung"
    assert not errors, errors

    linked_at_the_end = chain_all()

    total = WRITERS * EVENTS_PER_WRITER
    event_ids = sorted(AuditEvent.objects.values_list("id", flat=True))
    links = _links()
    assert len(event_ids) == total
    assert [link.position for link in links] == list(range(1, total + 1))
    # Every event in exactly one link.
    assert sorted(link.event_id for link in links) == event_ids
    # No batch was counted twice: what the chainers report adds up to the chain length.
    assert sum(linked_by_chainers) + linked_at_the_end == total
    assert not AuditPending.objects.exists()
    # A writer's events commit one after another, so the chain keeps each writer's order.
    actor_of = dict(AuditEvent.objects.values_list("id", "actor"))
    for n in range(WRITERS):
        chained = [link.event_id for link in links if actor_of[link.event_id] == f"system:writer-{n}"]
        assert chained == sorted(chained)
    result = verify_chain()
    assert result.ok, result.broken
    assert (result.linked, result.pending) == (total, 0)


# --- stray queue rows ------------------------------------------------------------------


def _queue(event_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO audit_pending (event_id) VALUES (%s)", [event_id])


def _skipped() -> list[tuple[str, dict[str, object]]]:
    return [
        (event.target_id, event.payload)
        for event in AuditEvent.objects.filter(action=Action.AUDIT_CHAIN_QUEUE_ROW_SKIPPED).order_by("id")
    ]


def test_chainer_skips_and_audits_a_queue_row_for_an_already_linked_event(db: None) -> None:
    (linked,) = _record_events(1)
    assert chain_all() == 1
    _queue(linked)
    later = _record_events(2)

    chain_all()

    chained = [link.event_id for link in _links()]
    assert chained[:3] == [linked, *later]
    assert chained.count(linked) == 1
    assert _skipped() == [(str(linked), {"event_id": linked, "reason": "already_linked"})]
    # The skip is itself an event, chained like any other.
    assert len(chained) == 4
    assert not AuditPending.objects.exists()
    assert verify_chain().ok


def test_chainer_reads_its_batch_by_id_ranges_and_ignores_the_events_between(db: None) -> None:
    first, *between = _record_events(3)
    assert chain_all() == 3
    _queue(first)
    later = _record_events(1)

    # The batch is [first, later]: one range over the linked events between them.
    assert id_predicate([later[0], first]) == f"(e.id BETWEEN {first} AND {later[0]})"
    chain_all()

    chained = [link.event_id for link in _links()]
    assert chained[:4] == [first, *between, *later]
    # Only the stray row is skipped; the linked events the range read are not the batch's.
    assert _skipped() == [(str(first), {"event_id": first, "reason": "already_linked"})]
    assert verify_chain().ok


def test_id_predicate_reads_runs_as_ranges_and_scattered_ids_by_array() -> None:
    assert id_predicate([7, 3, 4, 5, 100, 300, 301]) == (
        "(e.id BETWEEN 3 AND 7 OR e.id BETWEEN 300 AND 301 OR e.id = ANY('{100}'::bigint[]))"
    )
    assert id_predicate([]) == "false"


def test_chainer_skips_and_audits_a_queue_row_whose_event_does_not_exist(db: None) -> None:
    _queue(10_000_000)
    later = _record_events(2)

    chain_all()

    assert [link.event_id for link in _links()][:2] == later
    assert _skipped() == [("10000000", {"event_id": 10_000_000, "reason": "event_missing"})]
    assert not AuditPending.objects.exists()
    assert verify_chain().ok


def test_audit_chainer_once_links_past_a_stray_queue_row(db: None) -> None:
    (linked,) = _record_events(1)
    assert chain_all() == 1
    _queue(linked)
    later = _record_events(1)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        call_command("audit_chainer", "--once", stdout=StringIO())
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    assert later[0] in [link.event_id for link in _links()]


# --- the loop's pauses -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_idle_chainer_backs_off_and_an_event_brings_back_its_short_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    written: list[int] = []

    def sleep(seconds: float, should_stop: object) -> None:
        pauses.append(seconds)
        if len(pauses) == 5:
            written.extend(_record_events(1))  # committed while the chainer waits

    monkeypatch.setattr("audit.chain._sleep", sleep)
    linked = run_chainer(lambda: len(pauses) >= 8, interval=0.05, idle_interval=0.3)

    # Nothing to link: the pause doubles up to idle_interval. The event is linked at the next
    # poll, which pauses the short interval again; then it backs off anew.
    assert pauses == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3, 0.05, 0.1, 0.2])
    assert linked == 1
    assert [link.event_id for link in _links()] == written


@pytest.mark.django_db(transaction=True)
def test_a_chainer_with_events_coming_keeps_its_short_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []

    def sleep(seconds: float, should_stop: object) -> None:
        pauses.append(seconds)
        _record_events(1)

    monkeypatch.setattr("audit.chain._sleep", sleep)
    _record_events(1)
    assert run_chainer(lambda: len(pauses) >= 4, interval=0.05, idle_interval=1.0) == 4
    assert pauses == [0.05] * 4


# --- the scheduled job -----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_scheduled_job_keeps_chaining_for_its_budget_when_no_chainer_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("audit.jobs.JOB_BUDGET_S", 5.0)
    errors: list[BaseException] = []

    def job() -> None:
        try:
            run_chainer_job()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=job)
    thread.start()
    try:
        # Written after the job's first pass: only a job that keeps polling links it.
        thread.join(0.5)
        (event_id,) = _record_events(1)
        assert _wait_for_link(event_id, timeout=4.0)
    finally:
        thread.join(THREAD_TIMEOUT)
    assert not errors


def _server_connection(dbname: str) -> psycopg.Connection:
    params = connection.settings_dict
    conninfo = {
        "dbname": dbname,
        "user": params["USER"],
        "password": params["PASSWORD"] or None,
        "host": params["HOST"] or None,
        "port": params["PORT"] or None,
    }
    return psycopg.connect(**{key: value for key, value in conninfo.items() if value is not None}, autocommit=True)


@pytest.mark.django_db(transaction=True)
def test_only_a_chainer_loop_on_this_database_counts_as_running() -> None:
    # Found when a test run beside another (two databases, one server) saw the other's chainer
    # and made one pass instead of polling: advisory locks belong to their database.
    with _server_connection("postgres") as elsewhere:
        elsewhere.execute("SELECT pg_advisory_lock_shared(%s)", [CHAINER_LOOP_LOCK_KEY])
        assert chainer_loop_running() is False
    with _server_connection(connection.settings_dict["NAME"]) as here:
        here.execute("SELECT pg_advisory_lock_shared(%s)", [CHAINER_LOOP_LOCK_KEY])
        assert chainer_loop_running() is True
        # Released explicitly: a closed connection's backend lets go of its locks a moment after
        # the client has gone (CI once saw the lock still held right after the close).
        here.execute("SELECT pg_advisory_unlock_shared(%s)", [CHAINER_LOOP_LOCK_KEY])
        assert chainer_loop_running() is False


@pytest.mark.django_db(transaction=True)
def test_scheduled_job_makes_one_pass_while_a_chainer_loop_runs() -> None:
    ids = _record_events(2)
    held = threading.Event()
    release = threading.Event()

    def chainer_loop() -> None:
        # What a running `audit_chainer` holds for its lifetime.
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock_shared(%s)", [CHAINER_LOOP_LOCK_KEY])
                held.set()
                release.wait(THREAD_TIMEOUT)
                cursor.execute("SELECT pg_advisory_unlock_shared(%s)", [CHAINER_LOOP_LOCK_KEY])
        finally:
            connection.close()

    thread = threading.Thread(target=chainer_loop)
    thread.start()
    try:
        assert held.wait(THREAD_TIMEOUT)
        started = time.monotonic()
        assert run_chainer_job() == 2
        assert time.monotonic() - started < 5, "the job polled although a chainer loop runs"
    finally:
        release.set()
        thread.join(THREAD_TIMEOUT)
    assert [link.event_id for link in _links()] == ids


def _wait_for_link(event_id: int, timeout: float) -> bool:
    # Polls another process's (or thread's) progress; the clock under test is not moved.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if AuditChainLink.objects.filter(event_id=event_id).exists():
            return True
        time.sleep(0.05)
    return False


# --- surviving a database restart ------------------------------------------------------


def _chainer_env() -> dict[str, str]:
    """Point a child `manage.py` at this test database."""
    db = settings.DATABASES["default"]
    query = urlencode({"host": db["HOST"]}) if str(db["HOST"]).startswith("/") else ""
    host = "" if query else f"{db['HOST']}:{db['PORT']}"
    auth = f"{quote(str(db['USER']))}:{quote(str(db['PASSWORD'] or ''))}@" if db["USER"] else ""
    env = dict(os.environ)
    env.update(
        DATABASE_URL=f"postgresql://{auth}{host}/{db['NAME']}" + (f"?{query}" if query else ""),
        DJANGO_SECRET_KEY=settings.SECRET_KEY,
        FIELD_ENCRYPTION_KEY=",".join(settings.FIELD_ENCRYPTION_KEY),
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.mark.django_db(transaction=True)
def test_audit_chainer_reconnects_after_its_backend_is_terminated() -> None:
    chainer = subprocess.Popen(
        [sys.executable, "manage.py", "audit_chainer", "--interval", "0.05", "--max-backoff", "1"],
        cwd=REPO_ROOT,
        env=_chainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        (first,) = _record_events(1)
        assert _wait_for_link(first, timeout=THREAD_TIMEOUT), "the chainer never started"
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'"  # never an autovacuum worker (not ours to end)
            )
            row = cursor.fetchone()
        assert row is not None and row[0] >= 1, "no chainer backend to terminate"

        (second,) = _record_events(1)

        assert _wait_for_link(second, timeout=30), "the chainer did not carry on after losing its connection"
        assert chainer.poll() is None
    finally:
        chainer.send_signal(signal.SIGTERM)
        out, err = chainer.communicate(timeout=THREAD_TIMEOUT)
    assert chainer.returncode == 0, err
    assert "audit chainer stopped" in out
    assert "audit chainer lost the database (OperationalError); reconnecting in 0.5 s" in err
    assert verify_chain().ok
