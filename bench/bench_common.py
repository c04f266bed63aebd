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

import psutil
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


# --- Figures against the accepted baseline ------------------------------------------------------

BASELINE = ROOT / "bench" / "baseline.txt"
# A figure this much worse than its baseline is called out (benchmarks on a shared VM move ±10 %).
TOLERANCE = 0.15
# Figures where more is better; every other figure (a time, a size, CPU per unit) is better lower.
_HIGHER_IS_BETTER = re.compile(r"(_per_s|ratio|recall_at_\d+)$")
# Not figures: what was measured (a workload's size, its shape). A figure is compared only with
# the baseline line measured the same way.
CONTEXT_KEYS = frozenset(
    {"flows", "flows_per_request", "pathways", "events", "sessions", "size", "requests", "steps_per_request"}
)
_PAIR = re.compile(r"([a-z][a-z0-9_]*)=([-+]?\d+(?:\.\d+)?)")


def figures_of(line: str) -> tuple[dict[str, float], dict[str, float]]:
    """A ``key=value`` line's figures and its context (``CONTEXT_KEYS``)."""
    pairs = {key: float(value) for key, value in _PAIR.findall(line)}
    context = {key: value for key, value in pairs.items() if key in CONTEXT_KEYS}
    return {key: value for key, value in pairs.items() if key not in CONTEXT_KEYS}, context


def baseline_lines(path: Path = BASELINE) -> list[tuple[dict[str, float], dict[str, float]]]:
    """The accepted figures: ``bench/baseline.txt``, one benchmark line per line (``#`` comments)."""
    if not path.exists():
        return []
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [figures_of(line) for line in lines if line]


def regressions(line: str, baseline: Sequence[tuple[dict[str, float], dict[str, float]]]) -> list[str]:
    """What in ``line`` is more than ``TOLERANCE`` worse than the baseline line measured the same way."""
    found, context = figures_of(line)
    said = []
    for accepted, accepted_context in baseline:
        if accepted_context != context:
            continue
        for key, value in found.items():
            base = accepted.get(key)
            if base is None or base == 0:
                continue
            change = (value - base) / abs(base)
            worse = -change if _HIGHER_IS_BETTER.search(key) else change
            if worse > TOLERANCE:
                said.append(
                    f"REGRESSION {key}={value:g}: {worse:.0%} worse than the baseline's {base:g} "
                    f"(bench/baseline.txt; tolerance {TOLERANCE:.0%})"
                )
    return said


def report(line: str) -> list[str]:
    """Print a benchmark's ``key=value`` line, then any figure more than 15 % worse than its baseline."""
    print(line, flush=True)
    said = regressions(line, baseline_lines())
    for message in said:
        print(message, flush=True)
    return said


def postmaster_pid(url: str) -> int | None:
    """The PostgreSQL server's main process, when it runs on this machine (its data directory's
    ``postmaster.pid``); None for a server elsewhere or a role that may not read the setting."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        return int((Path(row[0]) / "postmaster.pid").read_text().split()[0]) if row else None
    except (psycopg.Error, OSError, ValueError, IndexError):
        return None


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its live descendants (gunicorn's master and workers)."""
    root = psutil.Process(pid)
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total
