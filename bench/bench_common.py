"""Helpers shared by the benchmarks (``make bench``): a throw-away database on the project's
Postgres server, ``manage.py`` against it, and gunicorn serving it."""

from __future__ import annotations

import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def server_url() -> str:
    """A libpq URL for the server (not the database) that the project uses."""
    if url := os.environ.get("DATABASE_URL"):
        return url
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from config.embedded_pg import embedded_server_url

    return embedded_server_url(ROOT / ".data")


def with_database(url: str, name: str) -> str:
    """``url`` with its database name replaced by ``name``."""
    return re.sub(r"^(postgres(?:ql)?://[^/]*/)([^?]*)", rf"\g<1>{name}", url)


def child_env(url: str, database: str) -> dict[str, str]:
    """The environment for ``manage.py``/gunicorn so that they use ``database``."""
    env = dict(os.environ)
    if "DATABASE_URL" in env:
        env["DATABASE_URL"] = with_database(url, database)
    else:
        env["RFT_EMBEDDED_DB_NAME"] = database
    env["LOG_LEVEL"] = "WARNING"
    # The benchmarks drive hundreds of writes a second from one token: no rate limit, unless set.
    env.setdefault("API_WRITE_RATE_LIMIT", "off")
    return env


def recreate_database(url: str, database: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def drop_database(url: str, database: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        sys.exit(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def create_token(env: dict[str, str], name: str, scopes: str) -> str:
    """A new API token; ``create_api_token`` prints the raw token alone on its last line."""
    return manage(env, "create_api_token", "--name", name, "--scopes", scopes).strip().splitlines()[-1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gunicorn_command(port: int, workers: int) -> list[str]:
    """The web server as ``make run`` starts it (``config.gunicorn.command``), quieter."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from config.gunicorn import command

    return command(port, workers, access_log=False, log_level="warning", gunicorn=BIN / "gunicorn")


def wait_until_up(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/reasoning/flows", timeout=1)
        except urllib.error.HTTPError:
            return  # any HTTP answer (401/405) means the server is serving
        except OSError:
            time.sleep(0.2)
    sys.exit("the web server did not come up")


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]
