"""Monthly partitions of the tables that grow with every event (docs/deploy.md, "Partitioned
history"): ``reasoning_step`` (converted by migration ``reasoning.0017``) and ``audit_event``
(``audit.0006``).

``reasoning_step`` is partitioned by its flow's ``created_at`` (copied into the step as
``flow_created_at``), so all the steps of a flow share one partition and retention drops whole
flows. ``audit_event`` is partitioned by its own ``created_at`` (the database's clock: the
column's default, checked by the stamp trigger, since PostgreSQL routes a row to its partition
before a BEFORE trigger runs and refuses a trigger that moves it).

Partitions are named ``<table>_<YYYY>_<MM>`` and cover ``[first of the month, first of the
next)`` in UTC. ``reasoning_step`` also has ``reasoning_step_default``, for steps of flows
dated outside every partition (imports, backdated test data): ``create_month`` moves such
rows into the month's partition when it creates it.

Why not django-postgres-extra: on Django 5.2 its ``PostgresPartitionedModel`` replaces the
model's primary key by a ``CompositePrimaryKey`` of (id, partition key), which turns ``pk``
into a tuple everywhere; its partition manager needs its own database backend, and it drops
old partitions with ``DROP TABLE`` (no detach, no legal-hold check). pg_partman is not part of
the embedded server. What is kept from them: partitions made ahead by a scheduled job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from django.db.backends.utils import CursorWrapper
from psycopg import sql

# Partitioned table -> its partition key column.
TABLES: dict[str, str] = {"reasoning_step": "flow_created_at", "audit_event": "created_at"}
# Tables with a DEFAULT partition (rows dated outside every month partition).
WITH_DEFAULT = frozenset({"reasoning_step"})
MONTHS_AHEAD = 3


def month_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def add_months(month: datetime, months: int) -> datetime:
    index = month.year * 12 + month.month - 1 + months
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


def partition_name(table: str, month: datetime) -> str:
    return f"{table}_{month:%Y_%m}"


def partition_names(cursor: CursorWrapper, table: str) -> list[str]:
    """The partitions of ``table`` by name: oldest month first, the DEFAULT one last."""
    cursor.execute("SELECT inhrelid::regclass::text FROM pg_inherits WHERE inhparent = %s::regclass", [table])
    return sorted(row[0] for row in cursor.fetchall())


def create_month(cursor: CursorWrapper, table: str, month: datetime) -> str | None:
    """Create ``table``'s partition for ``month`` unless it exists; returns its name, or None.

    Rows of that month already in the DEFAULT partition are moved into the new one first
    (PostgreSQL refuses a new partition while the default holds rows of its range): the new
    table is built standalone, filled from the default, and attached, in the caller's
    transaction."""
    name = partition_name(table, month)
    if name in partition_names(cursor, table):
        return None
    start, end = month, add_months(month, 1)
    key = sql.Identifier(TABLES[table])
    parent, child = sql.Identifier(table), sql.Identifier(name)
    default = sql.Identifier(f"{table}_default")
    bounds = [start.isoformat(), end.isoformat()]
    moved = 0
    if table in WITH_DEFAULT:
        cursor.execute(sql.SQL("SELECT count(*) FROM {} WHERE {} >= %s AND {} < %s").format(default, key, key), bounds)
        moved = cursor.fetchone()[0]
    # DDL takes no parameters (the connection binds them server-side): the bounds as literals.
    values = sql.SQL("FOR VALUES FROM ({}) TO ({})").format(*map(sql.Literal, bounds))
    if not moved:
        cursor.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} {}").format(child, parent, values))
        return name
    cursor.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(child, parent))
    cursor.execute(
        sql.SQL("INSERT INTO {} SELECT * FROM {} WHERE {} >= %s AND {} < %s").format(child, default, key, key), bounds
    )
    cursor.execute(sql.SQL("DELETE FROM {} WHERE {} >= %s AND {} < %s").format(default, key, key), bounds)
    cursor.execute(sql.SQL("ALTER TABLE {} ATTACH PARTITION {} {}").format(parent, child, values))
    return name


def is_partitioned(cursor: CursorWrapper, table: str) -> bool:
    cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)", [table])
    row = cursor.fetchone()
    return bool(row and row[0])


def ensure_ahead(
    cursor: CursorWrapper, now: datetime, months: int = MONTHS_AHEAD, tables: Iterable[str] = TABLES
) -> list[str]:
    """Partitions for this month and the ``months`` after it, for every table of ``tables``;
    and one for each month that has rows waiting in a DEFAULT partition. The names created,
    in order. A table not (yet) partitioned is skipped."""
    created: list[str] = []
    for table in tables:
        key = TABLES[table]
        if not is_partitioned(cursor, table):
            continue  # not converted (yet)
        wanted = [add_months(month_start(now), n) for n in range(months + 1)]
        if table in WITH_DEFAULT:
            cursor.execute(
                sql.SQL("SELECT DISTINCT date_trunc('month', {} AT TIME ZONE 'UTC') FROM {}").format(
                    sql.Identifier(key), sql.Identifier(f"{table}_default")
                )
            )
            wanted += [row[0].replace(tzinfo=UTC) for row in cursor.fetchall()]
        for month in sorted(set(wanted)):
            name = create_month(cursor, table, month)
            if name is not None:
                created.append(name)
    return created


def month_of(name: str) -> datetime | None:
    """The month a partition named ``<table>_<YYYY>_<MM>`` covers; None for the default one."""
    found = re.fullmatch(r".+_(\d{4})_(\d{2})", name)
    return datetime(int(found[1]), int(found[2]), 1, tzinfo=UTC) if found else None


def expired(cursor: CursorWrapper, table: str, cutoff: datetime) -> list[tuple[str, datetime]]:
    """``table``'s month partitions that end on or before ``cutoff``, oldest first (never the
    default partition)."""
    found = []
    for name in partition_names(cursor, table):
        month = month_of(name)
        if month is not None and add_months(month, 1) <= cutoff:
            found.append((name, month))
    return found


def drop(cursor: CursorWrapper, table: str, name: str) -> None:
    """Detach ``name`` from ``table`` and drop it, in the caller's transaction. (Not
    ``DETACH ... CONCURRENTLY``, which cannot run in a transaction: the drop, its audit event
    and its bookkeeping commit together; the parent is locked for the moment it takes.)"""
    cursor.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(sql.Identifier(table), sql.Identifier(name)))
    cursor.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
