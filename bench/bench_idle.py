"""What the stack costs while nobody uses it: CPU of ``make run``'s processes at rest.

1. Creates a throw-away database (``rft_bench_idle``) on the same Postgres server and migrates it.
2. Starts what ``make run`` starts (``scripts/run.py``: gunicorn's workers, the django-q2 cluster,
   the audit chainer) against it, waits until the server answers, sends nothing, and lets it
   settle for ``--settle`` seconds (the cluster's first schedule run, the workers' start).
3. Measures for ``--seconds`` the time each process of the stack ran on a CPU (the scheduler's
   count, ``run_time``), and that of the PostgreSQL server's processes (all of them: the chainer's
   and the job worker's queries run in their backends; anything else on the server counts too, so
   run it on a quiet server).
4. Prints ``idle_cpu_pct=<n> idle_web_cpu_pct=<n> idle_jobs_cpu_pct=<n> idle_chainer_cpu_pct=<n>
   idle_pg_cpu_pct=<n>``: percent of one core, the stack's processes and PostgreSQL's together,
   then by component, each against ``bench/baseline.txt``; drops the database.

An idle service should be idle: every poll loop (the chainer's, the job cluster's guard and
broker, the web workers' timers) shows here.

Run with ``make bench``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import psutil
from bench_common import (
    ROOT,
    child_env,
    drop_database,
    free_port,
    manage,
    postmaster_pid,
    recreate_database,
    report,
    server_url,
    wait_until_up,
    with_database,
)

BENCH_DB = "rft_bench_idle"


def role(process: psutil.Process) -> str:
    """Which part of the stack a process of ``scripts/run.py``'s tree is."""
    command = " ".join(process.cmdline())
    if "gunicorn" in command:
        return "web"
    if "qcluster" in command:
        return "jobs"
    if "audit_chainer" in command:
        return "chainer"
    return "supervisor"  # scripts/run.py itself


def cpu_by_role(supervisor: int, postgres: int | None) -> dict[int, tuple[str, float]]:
    """Each live process's role and CPU seconds so far."""
    seen: dict[int, tuple[str, float]] = {}
    root = psutil.Process(supervisor)
    groups: list[tuple[psutil.Process, str | None]] = [(root, None)]
    groups += [(child, None) for child in root.children(recursive=True)]
    if postgres is not None:
        pg_root = psutil.Process(postgres)
        groups += [(pg_root, "pg"), *((child, "pg") for child in pg_root.children(recursive=True))]
    for process, fixed in groups:
        try:
            seen[process.pid] = (fixed or role(process), run_time(process))
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
    return seen


def run_time(process: psutil.Process) -> float:
    """Seconds a process's threads have run: the scheduler's own count (``/proc/<pid>/task/*/schedstat``,
    nanoseconds) where there is one, else user + system time. At rest a process runs for moments,
    which the clock-tick count of user and system time charges to whichever process the tick finds
    running: it moved by points of a core from run to run."""
    try:
        return (
            sum(
                int(Path(f"/proc/{process.pid}/task/{task}/schedstat").read_text().split()[0])
                for task in os.listdir(f"/proc/{process.pid}/task")
            )
            / 1e9
        )
    except (OSError, ValueError, IndexError):
        times = process.cpu_times()
        return float(times.user + times.system)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds between start and measure (default 20)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds measured (default 20)")
    args = parser.parse_args()

    url = server_url()
    print(f"[1/3] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    manage(child_env(url, BENCH_DB), "migrate", "--no-input")
    port = free_port()
    env = dict(child_env(url, BENCH_DB), PORT=str(port))
    print("[2/3] starting scripts/run.py (web, jobs, chainer)", flush=True)
    stack = subprocess.Popen(
        [sys.executable, "scripts/run.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until_up(port, timeout=120)
        time.sleep(args.settle)
        postgres = postmaster_pid(with_database(url, BENCH_DB))
        print(f"[3/3] measuring {args.seconds:.0f} s at rest", flush=True)
        before = cpu_by_role(stack.pid, postgres)
        time.sleep(args.seconds)
        after = cpu_by_role(stack.pid, postgres)
    finally:
        os.killpg(stack.pid, signal.SIGTERM)
        stack.wait(timeout=60)
    used: dict[str, float] = defaultdict(float)
    for pid, (name, seconds) in after.items():
        used[name] += seconds - before.get(pid, (name, 0.0))[1]

    def pct(*names: str) -> str:
        return f"{100 * sum(used[name] for name in names) / args.seconds:.1f}"

    report(
        f"idle_cpu_pct={pct('web', 'jobs', 'chainer', 'supervisor', 'pg')} idle_web_cpu_pct={pct('web')} "
        f"idle_jobs_cpu_pct={pct('jobs')} idle_chainer_cpu_pct={pct('chainer')} idle_pg_cpu_pct={pct('pg')}"
    )
    drop_database(url, BENCH_DB)
    return 0


if __name__ == "__main__":
    sys.exit(main())
