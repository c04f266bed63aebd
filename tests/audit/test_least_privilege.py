"""Least privilege in the database (docs/deploy.md, "Database roles"; audit.privileges) and the
database's own time stamps (migration audit.0005).

The suite connects as the owner role (it creates and flushes test databases); these tests
switch the test transaction to the application role with ``SET LOCAL ROLE`` and run the real
code, and the attacks, under the grants ``manage.py migrate`` gave that role.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import time_machine
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import DatabaseError, connection, transaction
from psycopg import sql

from audit.actions import Action
from audit.canonical import canonical_bytes, format_created_at
from audit.chain import chain_all
from audit.checkpoints import sign_checkpoint
from audit.models import AuditChainLink, AuditCheckpoint, AuditEvent
from audit.privileges import AUDIT_TABLES, application_role, grant_application_role, problems
from audit.services import record
from audit.verify import verify_chain
from config.embedded_pg import APP_ROLE, OWNER_ROLE
from tests.factories import rebuilt_canonical

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def role() -> str:
    name = application_role()
    if name is None:
        pytest.skip("DATABASE_URL is set without DATABASE_MIGRATION_URL: one role, nothing to separate")
    return name


@pytest.fixture
def as_application() -> Iterator[str]:
    """The rest of the test transaction runs as the application's role."""
    name = role()
    with connection.cursor() as cursor:
        cursor.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(name)))
    yield name
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")


def refused(statement: str, params: list[Any] | None = None) -> str:
    """Run ``statement`` in a savepoint; return the database's refusal (the test fails if it ran)."""
    with pytest.raises(DatabaseError) as caught, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)
    return str(caught.value)


def _event(n: int = 1) -> int:
    with transaction.atomic():
        return record(Action.FLOW_COMPLETED, actor="token:agent", target=("test.item", n), payload={"n": n})


def _database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    assert row is not None
    stamp: datetime = row[0]
    return stamp


# --- The roles ----------------------------------------------------------------------------


def test_the_embedded_roles_are_neither_superusers_nor_role_makers() -> None:
    if application_role() != APP_ROLE:
        pytest.skip("not the embedded database's roles")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolcanlogin"
            " FROM pg_roles WHERE rolname = ANY(%s) ORDER BY rolname",
            [[OWNER_ROLE, APP_ROLE]],
        )
        rows = cursor.fetchall()
    # The owner may create databases (the test run makes its own); the application nothing.
    assert rows == [(APP_ROLE, False, False, False, False, True), (OWNER_ROLE, False, False, True, False, True)]


def test_the_owner_owns_every_table_and_the_application_none() -> None:
    name = role()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c"
            " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'S', 'v', 'm')"
            " AND pg_get_userbyid(c.relowner) = %s",
            [name],
        )
        assert cursor.fetchall() == []
        cursor.execute("SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'audit_event'::regclass")
        owner = cursor.fetchone()
    assert owner is not None and owner[0] != name


def test_the_application_role_has_exactly_its_privileges_on_the_audit_tables(as_application: str) -> None:
    with connection.cursor() as cursor:
        for table, allowed in AUDIT_TABLES.items():
            for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"):
                cursor.execute("SELECT has_table_privilege(current_user, %s, %s)", [table, privilege])
                row = cursor.fetchone()
                assert row is not None
                assert row[0] is (privilege in allowed), f"{privilege} on {table}"
    assert problems() == []


def test_the_deploy_check_names_what_the_owner_could_do() -> None:
    role()  # the suite itself connects as the owner
    found = problems()

    assert any("owns audit_event" in problem for problem in found), found
    with pytest.raises(SystemCheckError, match=r"audit\.W001\) \S+ owns audit_event"):
        call_command("check", "--deploy", "--database", "default", "--fail-level", "WARNING", stdout=StringIO())


def test_grants_are_idempotent_and_cover_tables_made_later(as_application: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("RESET ROLE")
        cursor.execute("CREATE TABLE later_table (id int)")
        grant_application_role()
        grant_application_role()
        cursor.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(as_application)))
        cursor.execute("INSERT INTO later_table VALUES (1)")
        cursor.execute("DELETE FROM later_table")
    assert "permission denied" in refused("TRUNCATE later_table")
    assert "permission denied" in refused("INSERT INTO django_migrations (app, name, applied) VALUES ('x', 'y', now())")


# --- The application's work, as the application ----------------------------------------------


def test_record_chain_sign_and_verify_run_as_the_application(as_application: str) -> None:
    ids = [_event(n) for n in range(1, 4)]

    assert chain_all() == 3
    signed = sign_checkpoint()
    out, err = StringIO(), StringIO()
    call_command("audit_verify", "--no-progress", stdout=out, stderr=err)

    assert signed is not None and signed.tree_size == 3
    assert list(AuditChainLink.objects.order_by("position").values_list("event_id", flat=True)) == ids
    assert AuditCheckpoint.objects.count() == 1
    # The checkpoint's own audit event waits for the next chaining.
    assert out.getvalue().splitlines()[0].startswith("audit chain intact: 3 links verified; 1 events awaiting")
    assert verify_chain().ok


# --- What the application's credentials cannot do -------------------------------------------


@pytest.mark.parametrize("table", sorted(AUDIT_TABLES))
def test_the_application_cannot_truncate_an_audit_table(as_application: str, table: str) -> None:
    _event()
    chain_all()
    sign_checkpoint()

    assert f"permission denied for table {table}" in refused(f"TRUNCATE {table}")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_event SET action = 'reasoning.flow.aborted'",
        "DELETE FROM audit_event",
        "UPDATE audit_chain_link SET hash = prev_hash",
        "DELETE FROM audit_chain_link",
        "DELETE FROM audit_tree_node",
        "UPDATE audit_checkpoint SET note = ''",
        "DELETE FROM audit_checkpoint",
        "UPDATE audit_pending SET event_id = event_id + 1000",
    ],
)
def test_the_application_cannot_change_or_remove_audit_rows(as_application: str, statement: str) -> None:
    _event()
    _event(2)
    chain_all()
    sign_checkpoint()
    _event(3)  # one left queued

    assert "permission denied" in refused(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only",
        "ALTER TABLE audit_event DISABLE TRIGGER audit_event_stamp",
        "ALTER TABLE audit_chain_link DISABLE TRIGGER ALL",
        "DROP TRIGGER audit_event_stamp ON audit_event",
        "DROP TABLE audit_checkpoint",
        "CREATE OR REPLACE FUNCTION audit_reject_change() RETURNS trigger LANGUAGE plpgsql"
        " AS $$BEGIN RETURN NEW; END$$",
        "SET session_replication_role = replica",
        "ALTER TABLE audit_event OWNER TO CURRENT_USER",
    ],
)
def test_the_application_cannot_switch_the_protections_off(as_application: str, statement: str) -> None:
    message = refused(statement)

    assert "must be owner" in message or "permission denied" in message, message


def test_the_queue_is_emptied_only_by_the_chainer_even_with_delete_granted(as_application: str) -> None:
    _event()

    assert "removed only by the audit chainer" in refused("DELETE FROM audit_pending")
    assert chain_all() == 1


# --- Time stamps: the database's, not the writer's ------------------------------------------


def test_an_event_and_its_link_carry_the_database_time_whatever_the_writer_clock_says(as_application: str) -> None:
    before = _database_now()
    with time_machine.travel(datetime(2020, 1, 1, tzinfo=UTC), tick=False):
        event_id = _event()
        chain_all()
    after = _database_now()

    event = AuditEvent.objects.get(pk=event_id)
    link = AuditChainLink.objects.get(event_id=event_id)
    assert before <= event.created_at <= link.linked_at <= after
    assert bytes(event.canonical) == rebuilt_canonical(event)


@pytest.mark.parametrize("ago", [timedelta(days=1), timedelta(seconds=2), timedelta(days=800)])
def test_an_insert_naming_its_own_time_is_refused_whatever_the_time(as_application: str, ago: timedelta) -> None:
    # The time is the column's default (the database clock, during the inserting statement): a
    # writer that names one, with the placeholder or with the time in the canonical bytes, is
    # refused. 800 days ago has no partition at all: refused by the routing before the trigger.
    old = _database_now() - ago
    insert = (
        "INSERT INTO audit_event (action, actor, target_type, target_id, payload, created_at, canonical)"
        " VALUES ('auth.api_token.created', 'system:cli', '', '', '{}'::jsonb, %s, %s) RETURNING id, created_at"
    )
    for created_at in (None, old):
        canonical = canonical_bytes(
            action="auth.api_token.created",
            actor="system:cli",
            target_type="",
            target_id="",
            payload={},
            created_at=created_at,
        )
        message = refused(insert, [old, canonical])
        assert "created_at is the database's time" in message or "no partition of relation" in message, message

    placeholder = canonical_bytes(
        action="auth.api_token.created", actor="system:cli", target_type="", target_id="", payload={}, created_at=None
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_event (action, actor, target_type, target_id, payload, canonical)"
            " VALUES ('auth.api_token.created', 'system:cli', '', '', '{}'::jsonb, %s) RETURNING id, created_at",
            [placeholder],
        )
        row = cursor.fetchone()
    assert row is not None
    stamped = row[1]
    assert abs(stamped - _database_now()) < timedelta(minutes=1)
    stored = bytes(AuditEvent.objects.get(pk=row[0]).canonical)
    assert f'"created_at":"{format_created_at(stamped)}"'.encode() in stored


def test_the_application_has_no_privilege_on_the_audit_partitions(as_application: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = 'audit_event'::regclass")
        partitions = [row[0] for row in cursor.fetchall()]
    assert len(partitions) >= 4  # this month and three ahead

    for partition in partitions:
        assert "permission denied" in refused(f"SELECT count(*) FROM {partition}")
        assert "permission denied" in refused(f"DELETE FROM {partition}")
    assert problems() == []


def test_a_link_inserted_with_an_old_linked_at_gets_the_database_time(as_application: str) -> None:
    event_id = _event()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_chain_link (position, event_id, prev_hash, hash, linked_at)"
            " VALUES (1000, %s, '', '', '2020-01-01T00:00:00Z') RETURNING linked_at",
            [event_id],
        )
        row = cursor.fetchone()
    assert row is not None
    assert abs(row[0] - _database_now()) < timedelta(minutes=1)


@pytest.mark.parametrize(
    "stamp",
    [
        datetime(2026, 12, 1, 8, 30, tzinfo=UTC),
        datetime(2026, 12, 1, 8, 30, 0, 120, tzinfo=UTC),
        datetime(2026, 12, 1, 8, 30, 59, 999999, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 100000, tzinfo=UTC),
        datetime(2026, 6, 1, 2, 0, 0, 1, tzinfo=UTC),
    ],
)
def test_the_database_writes_the_time_as_the_documented_text(stamp: datetime) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL TIME ZONE 'America/New_York'")  # the session's zone does not matter
        cursor.execute("SELECT audit_time_text(%s)", [stamp])
        row = cursor.fetchone()

    assert row is not None and row[0] == format_created_at(stamp)


# --- Settings -----------------------------------------------------------------------------


def _settings(**env: str) -> subprocess.CompletedProcess[str]:
    """Import the settings in a fresh interpreter with ``env`` (DATABASE_* replaced)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "RFT_TEST"))}
    environ.update(DJANGO_SECRET_KEY="x" * 50, FIELD_ENCRYPTION_KEY=Fernet.generate_key().decode(), **env)
    code = "from config import settings as s; print(s.DATABASE_MIGRATION['USER'], s.DATABASE_APPLICATION_ROLE)"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60, check=False
    )


def test_settings_take_the_owner_from_database_migration_url() -> None:
    run = _settings(
        DATABASE_URL="postgres://rft_app:a@localhost/rft",
        DATABASE_MIGRATION_URL="postgres://rft_owner:o@127.0.0.1:5433/rft",
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["rft_owner", "rft_app"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"DATABASE_URL": "postgres://app@h/rft", "DATABASE_MIGRATION_URL": "postgres://owner@h/other"},
            "DATABASE_MIGRATION_URL names database 'other', DATABASE_URL 'rft': they must be the same database",
        ),
        (
            {"DATABASE_URL": "postgres://app@h/rft", "DATABASE_MIGRATION_URL": "postgres://app@h/rft"},
            "DATABASE_MIGRATION_URL must name the owner role, not DATABASE_URL's role",
        ),
        (
            {"DATABASE_URL": "postgres://app@h/rft", "DATABASE_MIGRATION_URL": "mysql://owner@h/rft"},
            "DATABASE_MIGRATION_URL must point at PostgreSQL",
        ),
        (
            {"DATABASE_MIGRATION_URL": "postgres://owner@h/rft"},
            "DATABASE_MIGRATION_URL is set but DATABASE_URL is not: set both, or neither",
        ),
    ],
)
def test_settings_refuse_a_migration_url_that_does_not_fit(env: dict[str, str], message: str) -> None:
    run = _settings(**env)

    assert run.returncode != 0
    assert message in run.stderr
