"""Audit log benchmark: inclusion proofs served, and the standalone verifier against raw SHA-256.

1. Creates a throw-away database (``rft_bench_audit``) on the same Postgres server and migrates it.
2. Loads ``--events`` audit events (default 1,000,000) with one ``INSERT ... SELECT`` over
   ``generate_series``: flows of 5 events (started, 3 steps, completed) from 8 agent tokens over
   the last 30 days, each with ~320 bytes of canonical JSON built in SQL, and queues them all in
   ``audit_pending``. Then, in process, the real chainer (``audit.chain.chain_all``) links them
   and builds the Merkle tree, and ``audit.checkpoints.sign_checkpoint`` signs it; both are timed.
3. Starts gunicorn (2 workers) and asks for inclusion proofs of random positions in the signed
   tree (seeded) with an ``audit.read`` token: ``--requests`` one after the other (latency
   p95), then from 4 client threads for ``--seconds`` (proofs per second). Every answer must be
   a 200; one in ``VERIFY_EVERY`` is checked with ``audit.merkle.verify_inclusion`` against the
   checkpoint's root, and any failure fails the bench.
4. ``manage.py audit_export``, then times ``tools/verify_audit_log.py --dir`` as a subprocess
   (events per second, wall time) and ``hashlib.sha256(0x00 || leaf data)`` over the same
   exported leaves in this process (the floor any verifier pays).
5. Prints the machine, then, last,
   ``proofs_per_s=<n> proofs_p95_ms=<x> verify_events_per_s=<n> sha256_events_per_s=<n> verify_ratio=<r> events=<n>``.
   Stops gunicorn, drops the database (unless ``--keep-db``), removes the export.

Run with ``make bench-audit`` (or ``make bench``) or alone: ``.venv/bin/python bench/bench_audit_log.py``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from bench_common import (
    ROOT,
    child_env,
    create_token,
    drop_database,
    free_port,
    gunicorn_command,
    manage,
    percentile,
    recreate_database,
    report,
    server_url,
    wait_until_up,
    with_database,
)

BENCH_DB = "rft_bench_audit"
SEED = 20261201
WORKERS = 2
CLIENTS = 4
WARMUP_SECONDS = 2.0
VERIFY_EVERY = 10  # one answer in 10 is checked against the signed root
CHAIN_BATCH = 5000
HASH_CHUNK = 100_000  # leaves decoded at a time for the raw SHA-256 loop (bounded memory)
VERIFIER = ROOT / "tools" / "verify_audit_log.py"
PROOF_PATH = "/audit/v1/proof/inclusion"

# Event i (1-based) is event k = (i - 1) % 5 of flow f = (i - 1) / 5. The canonical bytes are the
# documented encoding of the columns (keys sorted, no whitespace, integers and plain strings only,
# ".ffffff" only when the microseconds are not zero), so audit_verify would accept them too.
LOAD = """
INSERT INTO audit_event (action, actor, target_type, target_id, payload, created_at, canonical)
SELECT e.action, e.actor, e.target_type, e.target_id, e.payload::jsonb, t.at,
       convert_to(
           '{"action":"' || e.action || '","actor":"' || e.actor || '","created_at":"' || e.stamp
           || '","payload":' || e.payload || ',"target_id":"' || e.target_id
           || '","target_type":"' || e.target_type || '"}',
           'UTF8'
       )
FROM generate_series(1, %(events)s) AS i,
LATERAL (SELECT (i - 1) / 5 AS f, (i - 1) %% 5 AS k) AS n,
LATERAL (SELECT now() - make_interval(secs => (%(events)s - i) * %(spacing)s) AS at) AS t,
LATERAL (
    SELECT
        (ARRAY['reasoning.flow.started', 'reasoning.step.created', 'reasoning.step.created',
               'reasoning.step.created', 'reasoning.flow.completed'])[1 + n.k] AS action,
        'token:bench-agent-' || (n.f %% 8) AS actor,
        'reasoning.reasoningflow' AS target_type,
        md5('flow-' || n.f)::uuid::text AS target_id,
        to_char(
            t.at AT TIME ZONE 'UTC',
            CASE WHEN extract(microseconds FROM t.at)::bigint %% 1000000 = 0
                 THEN 'YYYY-MM-DD"T"HH24:MI:SS' ELSE 'YYYY-MM-DD"T"HH24:MI:SS.US' END
        ) || '+00:00' AS stamp,
        '{"agent":"agent-' || (n.f %% 8) || '","flow_id":"' || md5('flow-' || n.f)::uuid
        || '","step":' || n.k || ',"trigger_type":"'
        || (ARRAY['user_question', 'lab_result', 'refill_request', 'triage'])[1 + (n.f * 7) %% 4] || '"}' AS payload
) AS e
ORDER BY i
"""


def load(url: str, events: int) -> tuple[float, float]:
    """Seconds to load and queue the events; their mean canonical size in bytes."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        # A month of history, so the database's time stamp (trigger audit_event_stamp) is off
        # while it loads: the bench connects as the embedded server's superuser.
        conn.execute("SET session_replication_role = replica")
        # audit_event is partitioned by month (core.partitions): last month's partition too.
        sys.path.insert(0, str(ROOT))
        from core.partitions import create_month, month_start

        now = datetime.now(UTC)
        for month in {month_start(now - timedelta(days=30)), month_start(now)}:
            create_month(psycopg.ClientCursor(conn), "audit_event", month)  # type: ignore[arg-type]
        conn.execute(LOAD, {"events": events, "spacing": 30 * 86400 / events})
        conn.execute("RESET session_replication_role")
        conn.execute("INSERT INTO audit_pending (event_id) SELECT id FROM audit_event ORDER BY id")
        conn.execute("ANALYZE audit_event")
        conn.execute("ANALYZE audit_pending")
        row = conn.execute("SELECT avg(length(canonical)) FROM audit_event").fetchone()
    return time.perf_counter() - started, float(row[0]) if row and row[0] is not None else 0.0


# --- Chaining and signing, in process ---------------------------------------------------------


def setup_django(env: dict[str, str]) -> None:
    wanted = ("DATABASE_URL", "RFT_EMBEDDED_DB_NAME", "LOG_LEVEL")
    os.environ.update({key: value for key, value in env.items() if key in wanted})
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()


def watch_chain(url: str, total: int, stop: threading.Event, every: float = 15.0) -> None:
    """Print the committed chain length every ``every`` seconds until ``stop`` is set."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.wait(every):
            row = conn.execute("SELECT coalesce(max(position), 0) FROM audit_chain_link").fetchone()
            done = int(row[0]) if row else 0
            elapsed = time.perf_counter() - started
            print(f"    chained {done:,} / {total:,} ({done / elapsed:,.0f} events/s)", flush=True)


def chain_and_sign(url: str, events: int) -> tuple[float, float, int, bytes]:
    """Seconds of ``chain_all`` and of ``sign_checkpoint``; the signed tree size and root."""
    from audit.chain import chain_all
    from audit.checkpoints import sign_checkpoint

    stop = threading.Event()
    watcher = threading.Thread(target=watch_chain, args=(url, events, stop), daemon=True)
    watcher.start()
    started = time.perf_counter()
    try:
        linked = chain_all(batch_size=CHAIN_BATCH)
    finally:
        stop.set()
        watcher.join()
    chain_seconds = time.perf_counter() - started
    if linked != events:
        sys.exit(f"FAILED: the chainer consumed {linked} queue rows, expected {events}")
    started = time.perf_counter()
    signed = sign_checkpoint()
    sign_seconds = time.perf_counter() - started
    if signed.checkpoint is None or signed.tree_size != events:
        sys.exit(f"FAILED: expected a checkpoint of {events} leaves, got {signed}")
    return chain_seconds, sign_seconds, signed.tree_size, bytes(signed.checkpoint.root_hash)


# --- Inclusion proofs over HTTP ---------------------------------------------------------------


@dataclass
class ProofRun:
    requests: int = 0
    verified: int = 0
    reconnects: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


class ProofClient:
    """One persistent HTTP/1.1 connection asking for proofs of random positions."""

    def __init__(self, port: int, token: str, size: int, root: bytes, seed: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Connection": "keep-alive"}
        self.size = size
        self.root = root
        self.rng = random.Random(seed)

    def one(self, run: ProofRun, check: bool) -> None:
        from audit.merkle import verify_inclusion

        position = self.rng.randint(1, self.size)
        started = time.perf_counter()
        try:
            self.conn.request("GET", f"{PROOF_PATH}?position={position}&tree_size={self.size}", headers=self.headers)
            response = self.conn.getresponse()
            body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            run.failures.append(f"position {position}: connection error {exc!r}")
            return
        elapsed = time.perf_counter() - started
        if response.will_close:
            run.reconnects += 1  # http.client reopens the connection on the next request
        if response.status != 200:
            run.failures.append(f"position {position}: HTTP {response.status}: {body[:300]!r}")
            return
        run.requests += 1
        run.latencies.append(elapsed)
        if not check:
            return
        answer = json.loads(body)
        leaf = base64.b64decode(answer["leaf_hash"])
        path = [base64.b64decode(item) for item in answer["audit_path"]]
        shape = (answer["position"], answer["leaf_index"], answer["tree_size"]) == (position, position - 1, self.size)
        if not shape or not verify_inclusion(position - 1, self.size, leaf, path, self.root):
            run.failures.append(f"position {position}: the proof does not verify against the signed root: {answer}")
            return
        run.verified += 1

    def close(self) -> None:
        self.conn.close()


def sequential(port: int, token: str, size: int, root: bytes, requests: int) -> ProofRun:
    run = ProofRun()
    client = ProofClient(port, token, size, root, SEED)
    try:
        for n in range(requests):
            client.one(run, check=n % VERIFY_EVERY == 0)
    finally:
        client.close()
    return run


def concurrent(port: int, token: str, size: int, root: bytes, clients: int, seconds: float) -> tuple[ProofRun, float]:
    runs = [ProofRun() for _ in range(clients)]
    start = threading.Barrier(clients + 1)
    deadline = 0.0

    def work(n: int) -> None:
        client = ProofClient(port, token, size, root, SEED + 1 + n)
        try:
            start.wait()
            count = 0
            while time.perf_counter() < deadline:
                client.one(runs[n], check=count % VERIFY_EVERY == 0)
                count += 1
        finally:
            client.close()

    threads = [threading.Thread(target=work, args=(n,), name=f"proof-client-{n}") for n in range(clients)]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    deadline = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    total = ProofRun()
    for run in runs:
        total.requests += run.requests
        total.verified += run.verified
        total.reconnects += run.reconnects
        total.latencies.extend(run.latencies)
        total.failures.extend(run.failures)
    return total, elapsed


def check_run(name: str, run: ProofRun) -> None:
    if run.failures:
        sys.exit(f"FAILED: {name}: {len(run.failures)} bad answers, the first: {run.failures[0]}")
    if not run.requests or not run.verified:
        sys.exit(f"FAILED: {name}: no proof answered and verified")


def serve_proofs(
    env: dict[str, str], size: int, root: bytes, requests: int, seconds: float
) -> tuple[ProofRun, ProofRun, float]:
    token = create_token(env, "bench-audit", "audit.read")
    port = free_port()
    print(f"[3/5] gunicorn ({WORKERS} workers) on :{port}: inclusion proofs in the tree of {size:,}", flush=True)
    gunicorn = subprocess.Popen(gunicorn_command(port, WORKERS), cwd=ROOT, env=env)
    try:
        wait_until_up(port)
        # Both workers: connections, imports, the token lookup, the first pages of the node table.
        warm, _ = concurrent(port, token, size, root, CLIENTS, WARMUP_SECONDS)
        check_run("warm-up", warm)
        seq = sequential(port, token, size, root, requests)
        check_run("sequential", seq)
        print(
            f"  sequential: {seq.requests} proofs, p50 {percentile(seq.latencies, 50) * 1000:.1f} ms, "
            f"p95 {percentile(seq.latencies, 95) * 1000:.1f} ms, p99 {percentile(seq.latencies, 99) * 1000:.1f} ms; "
            f"{seq.verified} verified against the signed root",
            flush=True,
        )
        par, elapsed = concurrent(port, token, size, root, CLIENTS, seconds)
        check_run("concurrent", par)
        print(
            f"  {CLIENTS} clients for {elapsed:.1f} s: {par.requests} proofs ({par.requests / elapsed:.0f}/s), "
            f"p50 {percentile(par.latencies, 50) * 1000:.1f} ms, p95 {percentile(par.latencies, 95) * 1000:.1f} ms; "
            f"{par.verified} verified against the signed root",
            flush=True,
        )
        if seq.reconnects or par.reconnects:
            print(
                f"  note: the server closed the connection after {seq.reconnects + par.reconnects} answers "
                "(gunicorn's sync workers: no keep-alive; http.client reconnects)",
                flush=True,
            )
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        gunicorn.wait(timeout=30)
    return seq, par, elapsed


# --- The standalone verifier against raw SHA-256 ------------------------------------------------


def run_verifier(out: Path, events: int) -> float:
    """Events per second of ``tools/verify_audit_log.py --dir`` (0 when it does not exist yet)."""
    if not VERIFIER.exists():
        print(f"  WARNING: {VERIFIER.relative_to(ROOT)} does not exist yet: verify_events_per_s=0", flush=True)
        return 0.0
    key = (out / "public-keys.txt").read_text().splitlines()[0]
    command = [sys.executable, "-I", str(VERIFIER), "--key", key, "--dir", str(out)]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    last = (result.stdout.strip().splitlines() or result.stderr.strip().splitlines() or [""])[-1]
    if result.returncode != 0:
        sys.exit(f"FAILED: the verifier exited {result.returncode}: {last}\n{result.stderr[-2000:]}")
    print(f"  verifier: {seconds:.2f} s wall ({events / seconds:,.0f} events/s): {last}", flush=True)
    return events / seconds


def sha256_rate(events_file: Path) -> tuple[float, int]:
    """Leaves per second of ``sha256(0x00 || leaf data)`` alone (parsing not timed); leaves hashed.
    ``events.txt`` is format ``rft-audit-export/2``: line *p* is ``<event id> <canonical bytes>``,
    and the leaf data is ``<event id> LF <canonical bytes>``."""
    sha256 = hashlib.sha256
    hashed = 0
    seconds = 0.0
    with events_file.open("rb") as handle:
        while True:
            chunk: list[bytes] = []
            for line in handle:
                event_id, canonical = line.rstrip(b"\n").split(b" ", 1)
                chunk.append(event_id + b"\n" + canonical)
                if len(chunk) == HASH_CHUNK:
                    break
            if not chunk:
                break
            started = time.perf_counter()
            for data in chunk:
                sha256(b"\x00" + data).digest()
            seconds += time.perf_counter() - started
            hashed += len(chunk)
    return (hashed / seconds if seconds else 0.0), hashed


def machine() -> str:
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"machine: {os.cpu_count()} CPUs, {model or 'unknown CPU'}, Python {platform.python_version()}"


def verify_phase(env: dict[str, str], out: Path, events: int) -> tuple[float, float]:
    print(f"[4/5] audit_export, then {VERIFIER.relative_to(ROOT)} --dir and raw SHA-256 over the leaves", flush=True)
    started = time.perf_counter()
    manage(env, "audit_export", "--out", str(out), "--no-progress")
    export_seconds = time.perf_counter() - started
    # The loaded events, then the token's and the first checkpoint's own audit events: audit_export
    # links them and signs the tree again, since the token's event is not a checkpoint event.
    exported = int(json.loads((out / "manifest.json").read_text())["tree_size"])
    if not events <= exported <= events + 2:
        sys.exit(f"FAILED: the export holds {exported} events, expected {events} (+ 2)")
    megabytes = (out / "events.txt").stat().st_size / 1e6
    print(f"  exported {exported:,} events in {export_seconds:.1f} s (events.txt {megabytes:.0f} MB)", flush=True)
    verify = run_verifier(out, exported)
    sha, hashed = sha256_rate(out / "events.txt")
    if hashed != exported:
        sys.exit(f"FAILED: events.txt holds {hashed} leaves, the manifest says {exported}")
    print(f"  hashlib.sha256(0x00 || leaf data): {sha:,.0f} leaves/s over {hashed:,} leaves", flush=True)
    return verify, sha


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="audit events to load (default 1,000,000)")
    parser.add_argument("--requests", type=int, default=2000, help="sequential proof requests (default 2000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of the 4-client phase (default 10)")
    parser.add_argument("--keep-db", action="store_true", help=f"leave the {BENCH_DB} database for inspection")
    args = parser.parse_args()

    url = server_url()
    env = child_env(url, BENCH_DB)
    bench_url = with_database(url, BENCH_DB)
    tmp = Path(tempfile.mkdtemp(prefix="rft-bench-audit-"))
    django_ready = False
    try:
        print(f"[1/5] creating database {BENCH_DB} and migrating", flush=True)
        recreate_database(url, BENCH_DB)
        manage(env, "migrate", "--no-input")
        print(f"[2/5] loading {args.events:,} audit events, chaining them and signing a checkpoint", flush=True)
        load_seconds, mean_size = load(bench_url, args.events)
        print(f"  loaded and queued in {load_seconds:.1f} s ({mean_size:.0f} bytes of canonical JSON each)")
        setup_django(env)
        django_ready = True
        chain_seconds, sign_seconds, size, root = chain_and_sign(bench_url, args.events)
        print(
            f"  chain_all(batch_size={CHAIN_BATCH}): {chain_seconds:.1f} s "
            f"({args.events / chain_seconds:,.0f} events/s, links and Merkle tree)",
            flush=True,
        )
        print(f"  sign_checkpoint: {sign_seconds * 1000:.0f} ms (tree size {size:,})", flush=True)
        seq, par, elapsed = serve_proofs(env, size, root, args.requests, args.seconds)
        verify, sha = verify_phase(env, tmp / "export", args.events)
    finally:
        print("[5/5] cleaning up" + (f" (keeping {BENCH_DB})" if args.keep_db else ""), flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
        if django_ready:
            from django.db import connections

            connections.close_all()
        if not args.keep_db:
            drop_database(url, BENCH_DB)
    print(machine())
    report(
        f"proofs_per_s={par.requests / elapsed:.0f} proofs_p95_ms={percentile(seq.latencies, 95) * 1000:.1f} "
        f"verify_events_per_s={verify:.0f} sha256_events_per_s={sha:.0f} verify_ratio={verify / sha:.2f} "
        f"events={args.events}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
