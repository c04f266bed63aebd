"""Write-path benchmark: API step writes per second against raw single-row INSERTs.

1. Creates a throw-away database (``rft_bench``) on the same Postgres server, migrates
   it and makes a ``reasoning.write`` token.
2. Starts the real stack against it: gunicorn (``--workers``, persistent DB connections)
   and the audit chainer.
3. Drives the HTTP API with ``wrk`` (C, light on CPU): each connection opens a flow,
   writes 5 steps (each with a PII field, so encryption runs), closes it, repeats.
4. Measures, on the same database, a psycopg loop of single-row INSERTs, one row per
   transaction (autocommit), from one client.
5. Verifies the audit chain covers every write, prints the rates and their ratio as
   ``step_writes_per_s=<n> raw_inserts_per_s=<n> ratio=<r>``, drops the database.

Run with ``make bench``. Needs ``wrk`` (Debian package ``wrk``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid

import psycopg
from bench_common import (
    ROOT,
    child_env,
    create_token,
    drop_database,
    free_port,
    gunicorn_command,
    manage,
    postmaster_pid,
    recreate_database,
    report,
    server_url,
    tree_cpu_seconds,
    wait_until_up,
    with_database,
)

BENCH_DB = "rft_bench"


def run_wrk(port: int, token: str, connections: int, duration: int, mode: str) -> dict[str, int]:
    env = dict(os.environ, RFT_BENCH_TOKEN=token, RFT_BENCH_STEPS="5", RFT_BENCH_MODE=mode)
    result = subprocess.run(
        [
            "wrk",
            f"-t{connections}",
            f"-c{connections}",
            f"-d{duration}s",
            "--timeout",
            "10s",
            "-s",
            str(ROOT / "bench" / "bench_write_path.lua"),
            f"http://127.0.0.1:{port}",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"^RESULT (.*)$", result.stdout, re.MULTILINE)
    if not match:
        sys.exit(f"wrk printed no result:\n{result.stdout}\n{result.stderr}")
    if sample := re.search(r"^SAMPLE_ERROR (.*)$", result.stdout, re.MULTILINE):
        print(f"  sample error: {sample.group(1)}")
    return {key: int(value) for key, value in (item.split("=") for item in match.group(1).split())}


MODES = {
    "single": "per flow: open, 5 step requests, close",
    "batch": "per flow: open, 1 request with 5 steps, close",
}


def step_rate(result: dict[str, int]) -> float:
    return result["steps"] / (result["duration_us"] / 1e6)


def describe(result: dict[str, int]) -> str:
    seconds = result["duration_us"] / 1e6
    return (
        f"{result['requests']} requests ({result['requests'] / seconds:.0f}/s), {result['steps']} steps "
        f"({step_rate(result):.0f}/s), {result['flows']} flows, {result['errors']} errors; "
        f"latency p50 {result['p50_us'] / 1000:.1f} ms, p99 {result['p99_us'] / 1000:.1f} ms"
    )


def cpu_per_request(used: dict[str, float], result: dict[str, int]) -> str:
    """The CPU each component spent per request (PostgreSQL: every process of the server)."""
    requests = max(result["requests"], 1)
    parts = ", ".join(f"{name} {seconds * 1000 / requests:.2f}" for name, seconds in used.items())
    missing = "" if "pg" in used else " (PostgreSQL runs elsewhere: not measured)"
    return f"CPU per request (ms): {parts}, all {sum(used.values()) * 1000 / requests:.2f}{missing}"


def raw_insert_rate(url: str, seconds: float) -> float:
    """Single-row INSERTs, one transaction each, from one client, for ``seconds``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw ("
            "id bigserial PRIMARY KEY, flow_id uuid NOT NULL, payload jsonb NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now())"
        )
        flow_id = uuid.uuid4()
        payload = '{"kind":"retrieval","summary_text":"Benchmark step reviewed the evidence","hits":3}'
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        with conn.cursor() as cur:
            while time.perf_counter() < deadline:
                for _ in range(100):
                    cur.execute("INSERT INTO bench_raw (flow_id, payload) VALUES (%s, %s)", (flow_id, payload))
                count += 100
        return count / (time.perf_counter() - start)


def audit_check(env: dict[str, str]) -> str:
    out = manage(env, "audit_verify", "--chain-first", "--no-progress")
    return out.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=20, help="seconds of API load (default 20)")
    parser.add_argument("--connections", type=int, default=8, help="concurrent wrk clients (default 8)")
    # 3 workers on 2 cores: each worker waits on Postgres ~25% of the time.
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (default 3)")
    parser.add_argument("--raw-seconds", type=float, default=10.0, help="seconds of raw INSERT loop (default 10)")
    parser.add_argument("--keep-db", action="store_true", help="leave the rft_bench database for inspection")
    args = parser.parse_args()

    if not shutil.which("wrk"):
        sys.exit("wrk is not installed: apt-get install wrk")
    url = server_url()
    env = child_env(url, BENCH_DB)
    bench_url = with_database(url, BENCH_DB)

    print(f"[1/5] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    manage(env, "migrate", "--no-input")
    token = create_token(env, "bench", "reasoning.write")

    port = free_port()
    print(f"[2/5] starting gunicorn ({args.workers} workers) on :{port} and the audit chainer", flush=True)
    procs = [
        subprocess.Popen(gunicorn_command(port, args.workers), cwd=ROOT, env=env),
        subprocess.Popen([sys.executable, "manage.py", "audit_chainer"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL),
    ]
    results: dict[str, dict[str, int]] = {}
    cpu: dict[str, float] = {}
    postgres = postmaster_pid(bench_url)
    components = {"web": procs[0].pid, "chainer": procs[1].pid, **({"pg": postgres} if postgres else {})}
    try:
        wait_until_up(port)
        run_wrk(port, token, args.connections, 3, "single")  # warm-up: connections, imports, caches
        for mode, shape in MODES.items():
            print(f"[3/5] wrk, {mode}: {args.connections} clients for {args.duration}s ({shape})", flush=True)
            before = {name: tree_cpu_seconds(pid) for name, pid in components.items()}
            results[mode] = result = run_wrk(port, token, args.connections, args.duration, mode)
            used = {name: tree_cpu_seconds(pid) - before[name] for name, pid in components.items()}
            cpu[mode] = sum(used.values()) * 1000 / max(result["requests"], 1)
            print(f"  {describe(result)}", flush=True)
            print(f"  {cpu_per_request(used, result)}", flush=True)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)

    print(f"[4/5] raw psycopg single-row INSERT loop for {args.raw_seconds:.0f}s", flush=True)
    raw_rate = raw_insert_rate(bench_url, args.raw_seconds)
    print("[5/5] verifying the audit chain", flush=True)
    print(f"  {audit_check(env)}", flush=True)
    if not args.keep_db:
        drop_database(url, BENCH_DB)
    single, batch = step_rate(results["single"]), step_rate(results["batch"])
    # CPU per request: every part of the server (PostgreSQL too, when it runs here), the figure that
    # moves least with the machine's noise.
    report(
        f"one request per step: step_writes_per_s={single:.0f} ratio={single / raw_rate:.3f}"
        f" write_cpu_ms_per_request={cpu['single']:.2f} steps_per_request=1"
    )
    report(
        f"step_writes_per_s={batch:.0f} raw_inserts_per_s={raw_rate:.0f} ratio={batch / raw_rate:.3f}"
        f" write_cpu_ms_per_request={cpu['batch']:.2f} steps_per_request=5"
    )
    return 1 if any(result["errors"] for result in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
