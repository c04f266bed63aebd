"""Least privilege in the database (docs/deploy.md, "Database roles").

Two roles: the *owner* owns every table and runs ``manage.py migrate``
(``DATABASE_MIGRATION_URL``); the *application* (``DATABASE_URL``) owns nothing. On the audit
tables it may only add and read rows (and the chainer may take rows off its queue), so with
the application's credentials nobody can ``UPDATE``, ``DELETE`` or ``TRUNCATE`` the trail,
disable its triggers, or set ``session_replication_role``; and since the database stamps
every event's time (migration ``audit.0005``), nobody can backdate one either. What the owner
can still do is covered by the signed checkpoints: a rewrite contradicts the last one a
witness kept.

``migrate`` (``audit/management/commands/migrate.py``) connects as the owner when
``DATABASE_MIGRATION_URL`` is set and ends with ``grant_application_role``, so every table a
migration adds gets the right grants.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper
from psycopg import sql

# What the application may do on each audit table; on every other table of the schema it
# may SELECT, INSERT, UPDATE and DELETE (never TRUNCATE), and on django_migrations only read.
AUDIT_TABLES: dict[str, tuple[str, ...]] = {
    "audit_event": ("SELECT", "INSERT"),
    "audit_chain_link": ("SELECT", "INSERT"),
    "audit_tree_node": ("SELECT", "INSERT"),
    "audit_checkpoint": ("SELECT", "INSERT"),
    # The chainer's queue: DELETE too, which the audit_pending_chainer_only trigger allows
    # only inside the chainer's transaction.
    "audit_pending": ("SELECT", "INSERT", "DELETE"),
}
# audit_dropped_partition is written by the retention job, which runs as the owner.
READ_ONLY_TABLES = ("django_migrations", "audit_dropped_partition")
_CONNECTION_KEYS = ("USER", "PASSWORD", "HOST", "PORT", "OPTIONS")


def application_role() -> str | None:
    """The role the application connects as, when it is not the owner; else None."""
    return settings.DATABASE_APPLICATION_ROLE


@contextmanager
def as_owner(alias: str = "default") -> Iterator[None]:
    """Connect ``alias`` as the owner role (``DATABASE_MIGRATION_URL``) for the duration, to
    the same database name (in tests, the test database)."""
    owner = settings.DATABASE_MIGRATION
    if owner is None:
        yield
        return
    connection = connections[alias]
    saved = {key: connection.settings_dict.get(key) for key in _CONNECTION_KEYS}
    connection.close()
    connection.settings_dict.update(owner)
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def grant_application_role(alias: str = "default", role: str | None = None) -> str | None:
    """Grant the application role exactly its privileges on every table and sequence of the
    schema (idempotent; run as the owner). Returns the role, or None when there is none."""
    role = role or application_role()
    if role is None:
        return None
    who = sql.Identifier(role)
    audit = sql.SQL(", ").join(sql.Identifier(table) for table in AUDIT_TABLES)
    statements: list[sql.Composable] = [
        sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(who),
        sql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {}").format(who),
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}").format(who),
        sql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {}").format(who),
        sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(who),
        sql.SQL("REVOKE ALL ON {} FROM {}, PUBLIC").format(audit, who),
    ]
    for table, privileges in AUDIT_TABLES.items():
        statements.append(
            sql.SQL("GRANT {} ON {} TO {}").format(sql.SQL(", ".join(privileges)), sql.Identifier(table), who)
        )
    # A partitioned audit table is reached through its parent only: its partitions (the
    # ``GRANT ... ON ALL TABLES`` above included them) get nothing.
    with connections[alias].cursor() as cursor:
        partitions = _partitions_of(cursor, list(AUDIT_TABLES))
        # A migration run part of the way (``migrate audit 0005``) may not have made them all yet.
        cursor.execute(
            "SELECT t FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NOT NULL", [list(READ_ONLY_TABLES)]
        )
        read_only = [row[0] for row in cursor.fetchall()]
    if partitions:
        statements.append(
            sql.SQL("REVOKE ALL ON {} FROM {}, PUBLIC").format(
                sql.SQL(", ").join(sql.Identifier(name) for name in partitions), who
            )
        )
    for table in read_only:
        statements.append(sql.SQL("REVOKE ALL ON {} FROM {}").format(sql.Identifier(table), who))
        statements.append(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(table), who))
    # One transaction: sessions of the running application see the old grants or the new.
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
    return role


def _partitions_of(cursor: CursorWrapper, tables: list[str]) -> list[str]:
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = ANY (SELECT to_regclass(t) FROM unnest(%s::text[]) AS t) ORDER BY c.relname",
        [tables],
    )
    return [row[0] for row in cursor.fetchall()]


def problems(alias: str = "default") -> list[str]:
    """What the connected role may do to the audit tables that the application must not:
    empty when it runs with least privilege."""
    found: list[str] = []
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
        row = cursor.fetchone()
        assert row is not None
        user, superuser = row
        if superuser:
            return [f"the application connects as {user}, a superuser: it can rewrite the audit tables"]
        checked = list(AUDIT_TABLES.items())
        checked += [(partition, ()) for partition in _partitions_of(cursor, list(AUDIT_TABLES))]
        for table, allowed in checked:
            cursor.execute(
                "SELECT pg_has_role(current_user, c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = to_regclass(%s)",
                [table],
            )
            owner = cursor.fetchone()
            if owner and owner[0]:
                found.append(
                    f"{user} owns {table} (or is a member of its owner): it can truncate it and disable its triggers"
                )
                continue
            for privilege in ("INSERT", "UPDATE", "DELETE", "TRUNCATE", "TRIGGER", "REFERENCES"):
                if privilege in allowed:
                    continue
                cursor.execute("SELECT has_table_privilege(current_user, %s, %s)", [table, privilege])
                granted = cursor.fetchone()
                if granted and granted[0]:
                    found.append(f"{user} may {privilege} {table}")
    return found
