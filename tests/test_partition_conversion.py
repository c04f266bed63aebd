"""The conversions to partitioned tables (migrations reasoning.0017 and audit.0006) on a database
that already holds rows: a scratch database on the test server is migrated to just before them,
filled with flows, steps and chained audit events dated over several months, then migrated on
by ``manage.py migrate`` as a deployment would; every row must come through unchanged, in its
month's partition, and the audit chain must still verify."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg import sql
from psycopg.types.json import Jsonb

from audit.canonical import canonical_bytes
from tests.servers import environment_for_test_database

ROOT = Path(__file__).resolve().parent.parent
MONTHS = [
    datetime(2025, 1, 15, 8, 0, tzinfo=UTC),
    datetime(2025, 11, 30, 23, 59, 59, 500000, tzinfo=UTC),
    datetime(2026, 3, 1, 0, 0, tzinfo=UTC),
]
STEPS_PER_FLOW = 3


@pytest.fixture
def scratch(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[str, dict[str, Any], dict[str, str]]]:
    """A new database on the test server, its name and the environment for manage.py on it."""
    with django_db_blocker.unblock():
        params = dict(connection.settings_dict)
    name = f"{params['NAME']}_conversion"
    server = {
        "dbname": "postgres",
        "user": params["USER"],
        "password": params["PASSWORD"] or None,
        "host": params["HOST"] or None,
        "port": params["PORT"] or None,
    }
    conninfo = {key: value for key, value in server.items() if value is not None}
    with psycopg.connect(**conninfo, autocommit=True) as admin:
        drop_database(admin, name)
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    env = environment_for_test_database()
    if "DATABASE_URL" in env:
        env["DATABASE_URL"] = env["DATABASE_URL"].replace(f"/{params['NAME']}", f"/{name}")
    else:
        env["RFT_EMBEDDED_DB_NAME"] = name
    try:
        yield name, {**conninfo, "dbname": name}, env
    finally:
        with psycopg.connect(**conninfo, autocommit=True) as admin:
            drop_database(admin, name)


def drop_database(admin: psycopg.Connection[Any], name: str, *, patience: float = 60.0) -> None:
    """Drop ``name``, ending its sessions. The test roles are not superusers, so ``FORCE``
    cannot end an autovacuum worker that happens to be on the database (it runs as the
    bootstrap superuser): PostgreSQL refuses with InsufficientPrivilege, and the worker
    is gone a moment later. Try again until it is."""
    deadline = time.monotonic() + patience
    while True:
        try:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            return
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ObjectInUse):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def manage(env: dict[str, str], *args: str) -> str:
    run = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, f"manage.py {' '.join(args)}:\n{run.stdout}\n{run.stderr}"
    return run.stdout


def insert(conn: psycopg.Connection[Any], table: str, values: dict[str, Any]) -> None:
    """One row of ``table`` with ``values``; every other NOT NULL column without a default gets
    a neutral value of its type (the test must not depend on the column list of the day)."""
    neutral = {
        "uuid": "00000000-0000-0000-0000-000000000000",
        "jsonb": "{}",
        "boolean": False,
        "integer": 0,
        "bigint": 0,
        "smallint": 0,
        "double precision": 0.0,
        "real": 0.0,
        "numeric": 0,
        "timestamp with time zone": datetime.now(UTC),
        "bytea": b"",
        "ARRAY": [],
    }
    columns = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s"
        " AND is_nullable = 'NO' AND column_default IS NULL AND is_identity = 'NO'",
        [table],
    ).fetchall()
    row = {column: neutral.get(kind, "") for column, kind in columns}
    row.update(values)
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(table),
            sql.SQL(", ").join(sql.Identifier(column) for column in row),
            sql.SQL(", ").join(sql.Placeholder() for _ in row),
        ),
        list(row.values()),
    )


def fill(conn: psycopg.Connection[Any]) -> tuple[dict[uuid.UUID, datetime], dict[uuid.UUID, uuid.UUID | None]]:
    """Flows in each of MONTHS with a chain of steps, and their audit events at those times."""
    flows: dict[uuid.UUID, datetime] = {}
    parents: dict[uuid.UUID, uuid.UUID | None] = {}
    for n, month in enumerate(MONTHS):
        flow_id = uuid.uuid4()
        flows[flow_id] = month
        insert(
            conn,
            "reasoning_flow",
            {"id": flow_id, "created_at": month, "flow_state": "completed", "trigger_type": "test", "agent": "a"},
        )
        parent: uuid.UUID | None = None
        for position in range(1, STEPS_PER_FLOW + 1):
            step_id = uuid.uuid4()
            insert(
                conn,
                "reasoning_step",
                {
                    "id": step_id,
                    "flow_id": flow_id,
                    "position": position,
                    "parent_step_id": parent,
                    "created_at": month,
                    "kind": "llm_prompt",
                    "summary_text": f"step {position} of flow {n}",
                    "confidence": 0.5,
                },
            )
            parents[step_id] = parent
            parent = step_id
    conn.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_stamp")
    for flow_id, month in flows.items():
        fields = {
            "action": "reasoning.flow.started",
            "actor": "token:agent",
            "target_type": "reasoning.reasoningflow",
            "target_id": str(flow_id),
            "payload": {"trigger_type": "test"},
        }
        canonical = canonical_bytes(**fields, created_at=month)  # type: ignore[arg-type]
        conn.execute(
            "INSERT INTO audit_event (action, actor, target_type, target_id, payload, created_at, canonical) VALUES"
            " (%(action)s, %(actor)s, %(target_type)s, %(target_id)s, %(payload)s::jsonb, %(at)s, %(canonical)s)",
            {**fields, "payload": Jsonb(fields["payload"]), "at": month, "canonical": canonical},
        )
    conn.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_stamp")
    conn.execute("INSERT INTO audit_pending (event_id) SELECT id FROM audit_event ORDER BY id")
    return flows, parents


def test_converting_tables_with_rows_keeps_every_row_in_its_months_partition_and_the_chain_intact(
    scratch: Any,
) -> None:
    _, conninfo, env = scratch
    manage(env, "migrate", "reasoning", "0016")
    manage(env, "migrate", "audit", "0005")
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        flows, parents = fill(conn)
        events_before = conn.execute("SELECT id, created_at, canonical FROM audit_event ORDER BY id").fetchall()
    manage(env, "audit_chainer", "--once")

    manage(env, "migrate")

    with psycopg.connect(**conninfo, autocommit=True) as conn:
        kinds = dict(
            conn.execute(
                "SELECT relname, relkind FROM pg_class WHERE relname IN ('reasoning_step', 'audit_event')"
            ).fetchall()
        )
        assert kinds == {"reasoning_step": "p", "audit_event": "p"}
        steps = conn.execute(
            "SELECT id, parent_step_id, flow_created_at, tableoid::regclass::text FROM reasoning_step"
        ).fetchall()
        assert {row[0]: row[1] for row in steps} == parents
        flow_of = dict(conn.execute("SELECT id, flow_id FROM reasoning_step").fetchall())
        for step_id, _, flow_created_at, partition in steps:
            assert flow_created_at == flows[flow_of[step_id]]
            assert partition == f"reasoning_step_{flow_created_at:%Y_%m}"
        registry = dict(conn.execute("SELECT id, flow_created_at FROM reasoning_step_registry").fetchall())
        assert registry == {row[0]: row[2] for row in steps}

        events_after = conn.execute(
            "SELECT id, created_at, canonical, tableoid::regclass::text FROM audit_event ORDER BY id"
        ).fetchall()
        assert [row[:3] for row in events_after] == events_before
        assert [row[3] for row in events_after] == [f"audit_event_{month:%Y_%m}" for month in MONTHS]
        last_old_id = events_before[-1][0]

    # Writing goes on: a new event continues the sequence, and the whole chain verifies.
    manage(env, "create_api_token", "--name", "after-conversion", "--scopes", "reasoning.read")
    manage(env, "audit_chainer", "--once")
    verified = manage(env, "audit_verify")
    assert "audit chain intact" in verified
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        (newest,) = conn.execute("SELECT max(id) FROM audit_event").fetchone() or (0,)
    assert newest > last_old_id
