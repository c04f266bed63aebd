"""OTLP ingest benchmark: spans per second through ``POST /v1/traces`` against raw batched INSERTs.

1. Creates a throw-away database (``rft_bench_ingest``) on the same Postgres server, migrates
   it and makes a ``reasoning.write,reasoning.admin`` token.
2. Builds the peer benchmark's workload (deterministic from a seed; built here so that the
   bench runs from a fresh clone): ``--flows`` traces, each a root span and 5 step spans
   (retrieval, llm_prompt, tool_call, reflection, verdict) with 10 ``reasoning.*`` attributes
   of ~530 bytes of JSON per span. It encodes them as OTLP protobuf
   ``ExportTraceServiceRequest`` bodies of ``--flows-per-request`` traces before the clock starts.
3. Starts the real stack against the database, gunicorn (``--workers``) and the audit chainer.
   It sends a warm-up (other seed, other trace ids), then the workload from ``--clients``
   threads, each with its own keep-alive connection, taking bodies from one queue. Only
   429/5xx and connection errors are retried. Every answer must be a 200 whose
   ``partial_success.rejected_spans`` is 0. The rate is spans / (last 2xx - first send): the
   server acknowledges only after its commit. This is done ``--rounds`` times (3), each round
   with new traces, one after the other on the same server; every figure printed is the median
   of the rounds' (a single round moves by up to a quarter on a shared 2-core machine).
4. Counts in SQL that every flow is stored completed with its 5 steps (and no span is left
   pending); any shortfall fails the bench.
5. Times a psycopg loop on the same database inserting rows of the same size (uuid,
   timestamptz, the workload's ~530-byte attribute JSON as jsonb), 100 rows per transaction,
   from one client.
6. Verifies the audit chain, prints the rates and their ratio as
   ``ingest_spans_per_s=<n> raw_batched_rows_per_s=<n> ratio=<r> flows_per_request=<n>``, and the
   CPU the workload cost per span, in all and by component (the web workers, PostgreSQL, the audit
   chainer) as ``ingest_server_cpu_ms_per_span=<n> ingest_web_cpu_ms_per_span=<n> …``, each against
   ``bench/baseline.txt`` (a figure 15 % worse is called out); drops the database.

While the workload runs, the active sessions of the bench database in ``pg_stat_activity`` are
sampled every 50 ms: the wait events they spend their time in (``CPU`` when none) are printed, the
lock waits among them, and the mean number of busy backends, to show what serialises writers.

Run with ``make bench``.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from statistics import median
from typing import Any

import psutil
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
    postmaster_pid,
    recreate_database,
    report,
    server_url,
    tree_cpu_seconds,
    wait_until_up,
    with_database,
)
from google.protobuf.message import DecodeError
from google.rpc.status_pb2 import Status as RpcStatus
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

BENCH_DB = "rft_bench_ingest"
PATH = "/v1/traces"

# --- The workload (the shape of the peer benchmark's workload.py) -------------------------

SEED = 20240601
WARMUP_SEED = SEED + 1
WARMUP_FLOWS = 20
STEP_KINDS = ("retrieval", "llm_prompt", "tool_call", "reflection", "verdict")
SPANS_PER_FLOW = len(STEP_KINDS) + 1
AGENTS = ("planner", "researcher", "critic", "coder", "support-bot", "triage")
MODELS = ("model-small", "model-medium", "model-large")
TOOLS = ("search_kb", "sql_query", "http_get", "calculator", "code_exec")
OUTCOMES = ("ok", "ok", "ok", "retry", "rejected", "accepted")
PHRASE = (
    "the user asks about quarterly revenue growth in the northern region and "
    "whether the forecast model over weights holiday effects so the agent "
    "retrieves recent reports compares the baseline with adjusted numbers checks "
    "the assumptions cites two sources and flags uncertainty where data is "
    "missing before proposing a concise answer with caveats and next steps"
)
WORDS = tuple(PHRASE.split())
FLOW_SPACING_NS = 50_000_000  # flows start 50 ms apart


@dataclass(frozen=True)
class BenchSpan:
    span_id: bytes
    parent_span_id: bytes  # b"" for the root
    name: str
    start_offset_ns: int  # from the flow's start
    duration_ns: int
    attributes: dict[str, Any]  # 10 reasoning.* attributes


@dataclass(frozen=True)
class BenchFlow:
    trace_id: bytes
    offset_ns: int  # from the workload's start
    spans: tuple[BenchSpan, ...]  # the root, then its 5 steps


def _id(nbytes: int, *parts: object) -> bytes:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:nbytes]
    return digest if any(digest) else b"\x01" * nbytes  # OTLP forbids all-zero ids


def _text(rng: random.Random, low: int, high: int) -> str:
    target = rng.randint(low, high)
    words: list[str] = []
    length = 0
    while length < target:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:target].rstrip()


def _attributes(rng: random.Random, flow_id: str, agent: str, kind: str, index: int, latency_ms: int) -> dict[str, Any]:
    detail = rng.choice(MODELS) if kind == "llm_prompt" else rng.choice(TOOLS) if kind == "tool_call" else kind
    return {
        "reasoning.kind": kind,
        "reasoning.agent": agent,
        "reasoning.flow_id": flow_id,
        "reasoning.step_index": index,
        "reasoning.summary_text": _text(rng, 150, 280),
        "reasoning.confidence": round(rng.random(), 3),
        "reasoning.latency_ms": latency_ms,
        "reasoning.refs": [f"doc:{rng.randint(1, 99999)}" for _ in range(rng.randint(1, 4))],
        "reasoning.detail": detail,
        "reasoning.outcome": rng.choice(OUTCOMES),
    }


def generate(flows: int, seed: int) -> list[BenchFlow]:
    """``flows`` flows; the same seed gives the same ids and content."""
    rng = random.Random(seed)
    result = []
    for i in range(flows):
        root_id = _id(8, seed, "", i, "root")
        flow_id = f"flow-{seed}-{i:06d}"
        agent = rng.choice(AGENTS)
        steps = []
        offset = rng.randint(1, 5) * 1_000_000  # the first step starts 1-5 ms after the root
        for j, kind in enumerate(STEP_KINDS):
            latency_ms = rng.randint(5, 1500) if kind == "llm_prompt" else rng.randint(1, 120)
            attributes = _attributes(rng, flow_id, agent, kind, j + 1, latency_ms)
            steps.append(BenchSpan(_id(8, seed, "", i, j), root_id, kind, offset, latency_ms * 1_000_000, attributes))
            offset += latency_ms * 1_000_000 + rng.randint(0, 3) * 1_000_000
        root_ms = offset // 1_000_000 + 1
        attributes = _attributes(rng, flow_id, agent, "flow", 0, root_ms)
        root = BenchSpan(root_id, b"", "flow", 0, root_ms * 1_000_000, attributes)
        result.append(BenchFlow(_id(16, seed, "", i), i * FLOW_SPACING_NS, (root, *steps)))
    return result


def _any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[_any_value(item) for item in value]))
    return AnyValue(string_value=str(value))


def encode(flows: list[BenchFlow], flows_per_request: int) -> list[tuple[int, bytes]]:
    """(span count, protobuf body) per request; timestamps in the recent past."""
    base = time.time_ns() - len(flows) * FLOW_SPACING_NS - 10_000_000_000
    resource = Resource(attributes=[KeyValue(key="service.name", value=AnyValue(string_value="reasoning-bench"))])
    scope = InstrumentationScope(name="reasoning-bench", version="1")
    bodies = []
    for first in range(0, len(flows), flows_per_request):
        spans = []
        for flow in flows[first : first + flows_per_request]:
            for span in flow.spans:
                start = base + flow.offset_ns + span.start_offset_ns
                spans.append(
                    Span(
                        trace_id=flow.trace_id,
                        span_id=span.span_id,
                        parent_span_id=span.parent_span_id,
                        name=span.name,
                        kind=Span.SPAN_KIND_INTERNAL,
                        start_time_unix_nano=start,
                        end_time_unix_nano=start + span.duration_ns,
                        attributes=[KeyValue(key=k, value=_any_value(v)) for k, v in span.attributes.items()],
                        status=Status(code=Status.STATUS_CODE_OK),
                    )
                )
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(scope=scope, spans=spans)])]
        )
        bodies.append((len(spans), request.SerializeToString()))
    return bodies


def attribute_payloads(flows: list[BenchFlow]) -> list[str]:
    return [json.dumps(span.attributes, separators=(",", ":")) for flow in flows for span in flow.spans]


# --- Sending ------------------------------------------------------------------------------

MAX_ATTEMPTS = 20


@dataclass
class SendResult:
    requests: int = 0
    spans: int = 0  # acknowledged: 200 with nothing rejected
    errors: int = 0
    retries: int = 0
    first_send: float = float("inf")
    last_ack: float = 0.0
    latencies: list[float] = field(default_factory=list)
    first_error: str = ""

    @property
    def seconds(self) -> float:
        return self.last_ack - self.first_send


def _error_message(status: int, body: bytes) -> str:
    """A non-200 answer's google.rpc.Status message (the route's error shape)."""
    answer = RpcStatus()
    try:
        answer.ParseFromString(body)
    except DecodeError:
        return f"HTTP {status}: {body[:300]!r}"
    return f"HTTP {status}: {answer.message}"


def send_all(port: int, token: str, bodies: list[tuple[int, bytes]], clients: int) -> SendResult:
    headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {token}"}
    work: queue.Queue[tuple[int, bytes]] = queue.Queue()
    for item in bodies:
        work.put(item)
    result = SendResult()
    lock = threading.Lock()

    def fail(message: str) -> None:
        with lock:
            result.errors += 1
            result.first_error = result.first_error or message

    def post(conn: http.client.HTTPConnection, spans: int, body: bytes) -> None:
        last = ""
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                with lock:
                    result.retries += 1
                time.sleep(0.05 * attempt)
            sent = time.monotonic()
            with lock:
                result.first_send = min(result.first_send, sent)
            try:
                conn.request("POST", PATH, body=body, headers=headers)
                response = conn.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()  # the next request reconnects
                last = f"connection error: {exc!r}"
                continue
            acked = time.monotonic()
            if response.status == 429 or response.status >= 500:
                last = _error_message(response.status, payload)
                continue
            if response.status != 200:
                fail(_error_message(response.status, payload))
                return
            answer = ExportTraceServiceResponse()
            answer.ParseFromString(payload)
            if answer.partial_success.rejected_spans:
                fail(f"{answer.partial_success.rejected_spans} spans rejected: {answer.partial_success.error_message}")
                return
            with lock:
                result.requests += 1
                result.spans += spans
                result.last_ack = max(result.last_ack, acked)
                result.latencies.append(acked - sent)
            return
        fail(f"gave up after {MAX_ATTEMPTS} attempts: {last}")

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while True:
                try:
                    spans, body = work.get_nowait()
                except queue.Empty:
                    return
                post(conn, spans, body)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, name=f"client-{n}") for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


# audit.chain.CHAINER_LOOP_LOCK_KEY: the chainer's session holds this advisory lock while it runs.
CHAINER_LOOP_LOCK_KEY = 0x5246544C


class WaitSampler(threading.Thread):
    """Samples what the bench database's busy sessions wait on (``pg_stat_activity``) until stopped."""

    def __init__(self, url: str, database: str, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.url, self.database, self.interval = url, database, interval
        self.waits: Counter[str] = Counter()
        self.samples = 0
        self.busy = 0
        self._halt = threading.Event()
        # PostgreSQL's CPU by whom it served: each server process's CPU (from /proc) at its first and
        # last sample, and its part: the web workers' sessions, the chainer's, or the server's own.
        self._cpu: dict[int, tuple[float, float]] = {}
        self._part: dict[int, str] = {}

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._halt.wait(self.interval):
                rows = conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), state FROM pg_stat_activity"
                    " WHERE datname = %s AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    " AND state NOT IN ('idle')",
                    [self.database],
                ).fetchall()
                self.samples += 1
                for wait, state in rows:
                    self.waits[wait if state == "active" else f"{state} ({wait})"] += 1
                    self.busy += 1
                self._sample_cpu(conn)

    def _sample_cpu(self, conn: psycopg.Connection[Any]) -> None:
        # The chainer's session holds its loop lock (audit.chain.CHAINER_LOOP_LOCK_KEY, a shared
        # advisory lock on a key below 2**32: classid 0, objid the key).
        processes = conn.execute(
            "SELECT a.pid, CASE WHEN a.pid = pg_backend_pid() THEN 'sampler'"
            " WHEN l.pid IS NOT NULL THEN 'chainer' WHEN a.datname = %s AND a.backend_type = 'client backend'"
            " THEN 'web' WHEN a.backend_type = 'client backend' THEN 'other' ELSE 'server' END"
            " FROM pg_stat_activity a LEFT JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory'"
            " AND l.classid = 0 AND l.objid = %s AND l.granted",
            [self.database, CHAINER_LOOP_LOCK_KEY],
        ).fetchall()
        for pid, part in processes:
            try:
                cpu = _process_cpu_seconds(pid)
            except OSError:
                continue
            first = self._cpu.get(pid, (cpu, cpu))[0]
            self._cpu[pid] = (first, cpu)
            self._part[pid] = part

    def cpu_by_part(self) -> dict[str, float]:
        """PostgreSQL CPU seconds spent while sampling, by part (web, chainer, server, other)."""
        parts: dict[str, float] = {}
        for pid, (first, last) in self._cpu.items():
            parts[self._part[pid]] = parts.get(self._part[pid], 0.0) + last - first
        return parts

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)

    def summary(self) -> list[str]:
        total = sum(self.waits.values())
        if not total:
            return ["  waits: no busy session was sampled"]
        lines = [
            f"  waits of the busy sessions ({self.samples} samples, {self.busy / max(self.samples, 1):.2f} busy on"
            " average):"
        ]
        for wait, count in self.waits.most_common(8):
            lines.append(f"    {count / total:6.1%}  {wait}")
        locks = sum(count for wait, count in self.waits.items() if wait.startswith("Lock:") or "(Lock:" in wait)
        lines.append(f"    lock waits: {locks / total:.1%} of the busy samples")
        return lines


def _process_cpu_seconds(pid: int) -> float:
    """User + system CPU of one process, from /proc (cheaper than psutil at 20 samples a second)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- Checks and the raw baseline ----------------------------------------------------------


def stored_counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM reasoning_flow),"
            " (SELECT count(*) FROM reasoning_flow WHERE flow_state = 'completed'),"
            " (SELECT count(*) FROM reasoning_step),"
            " (SELECT count(*) FROM reasoning_pending_span)"
        ).fetchone()
    assert row is not None
    return dict(zip(("flows", "completed", "steps", "pending"), row, strict=True))


def raw_batched_rate(url: str, seconds: float, payloads: list[str]) -> float:
    """INSERTs of rows like a stored span (uuid, timestamptz, ~530-byte jsonb), 100 per transaction."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw_batched ("
            "id bigserial PRIMARY KEY, span_id uuid NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL)"
        )
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        with conn.cursor() as cur:
            while time.perf_counter() < deadline:
                now = datetime.now(UTC)
                rows = [(uuid.uuid4(), payloads[(count + k) % len(payloads)], now) for k in range(100)]
                with conn.transaction():
                    cur.executemany(
                        "INSERT INTO bench_raw_batched (span_id, payload, created_at) VALUES (%s, %s, %s)", rows
                    )
                count += len(rows)
        return count / (time.perf_counter() - start)


def audit_check(env: dict[str, str]) -> str:
    out = manage(env, "audit_verify", "--chain-first", "--no-progress")
    return out.strip().splitlines()[-1]


def describe(result: SendResult, seconds: float) -> str:
    return (
        f"{result.requests} requests ({result.requests / seconds:.1f}/s), {result.spans} spans "
        f"({result.spans / seconds:.0f}/s) in {seconds:.2f} s, {result.errors} errors, {result.retries} retries; "
        f"latency p50 {percentile(result.latencies, 50) * 1000:.0f} ms, "
        f"p99 {percentile(result.latencies, 99) * 1000:.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flows", type=int, default=2000, help="traces to send (default 2000)")
    parser.add_argument("--flows-per-request", type=int, default=10, help="traces per OTLP request (default 10)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent client threads (default 4)")
    # 3 workers on 2 cores, as in bench_write_path.py.
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (default 3)")
    parser.add_argument("--raw-seconds", type=float, default=10.0, help="seconds of raw INSERT loop (default 10)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="workloads sent one after the other to the same server, each of --flows new traces; the figures "
        "are the rounds' medians (default 3: one round moves by up to a quarter on a shared 2-core machine)",
    )
    parser.add_argument("--keep-db", action="store_true", help=f"leave the {BENCH_DB} database for inspection")
    parser.add_argument(
        "--setup-sql",
        action="append",
        default=[],
        help="an SQL statement run on the bench database after migrating (repeatable): an experiment, e.g. "
        "'DROP INDEX reasoning_flow_words' to see what an index costs; its figures are not the product's",
    )
    args = parser.parse_args()

    url = server_url()
    env = child_env(url, BENCH_DB)
    bench_url = with_database(url, BENCH_DB)

    print(f"[1/5] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    manage(env, "migrate", "--no-input")
    if args.setup_sql:
        with psycopg.connect(bench_url, autocommit=True) as conn:
            for statement in args.setup_sql:
                print(f"  experiment: {statement}", flush=True)
                conn.execute(statement)  # the operator's own statement
    token = create_token(env, "bench-ingest", "reasoning.write,reasoning.admin")

    flows = generate(args.flows, SEED)
    # Each round its own traces (the same ones from run to run): round 0 is the seed's workload.
    rounds = [encode(flows, args.flows_per_request)] + [
        encode(generate(args.flows, SEED + 100 * n), args.flows_per_request) for n in range(1, args.rounds)
    ]
    bodies = rounds[0]
    warmup = encode(generate(WARMUP_FLOWS, WARMUP_SEED), args.flows_per_request)
    payloads = attribute_payloads(flows)
    total_spans = sum(spans for spans, _ in bodies)
    mean_json = sum(len(p.encode()) for p in payloads) / len(payloads)
    megabytes = sum(len(body) for _, body in bodies) / 1e6
    print(
        f"  workload: {args.rounds} round(s) of {args.flows} flows, {total_spans} spans in {len(bodies)} requests "
        f"({megabytes:.1f} MB of protobuf); attributes {mean_json:.0f} bytes of JSON per span",
        flush=True,
    )

    port = free_port()
    print(f"[2/5] starting gunicorn ({args.workers} workers) on :{port} and the audit chainer", flush=True)
    gunicorn = subprocess.Popen(gunicorn_command(port, args.workers), cwd=ROOT, env=env)
    procs = [
        gunicorn,
        subprocess.Popen([sys.executable, "manage.py", "audit_chainer"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL),
    ]
    try:
        wait_until_up(port)
        warm = send_all(port, token, warmup, args.clients)  # connections, imports, caches
        if warm.errors:
            sys.exit(f"FAILED: warm-up: {warm.first_error}; {BENCH_DB} kept")
        print(
            f"[3/5] OTLP: {args.rounds} round(s) of {len(bodies)} requests of {args.flows_per_request} flows "
            f"from {args.clients} clients",
            flush=True,
        )
        postgres = postmaster_pid(bench_url)
        components = {"web": gunicorn.pid, "chainer": procs[1].pid, **({"pg": postgres} if postgres else {})}
        sampler = WaitSampler(bench_url, BENCH_DB)
        sampler.start()
        measured: list[tuple[SendResult, dict[str, float]]] = []
        for number, round_bodies in enumerate(rounds, 1):
            before = {name: tree_cpu_seconds(pid) for name, pid in components.items()}
            round_result = send_all(port, token, round_bodies, args.clients)
            round_used = {name: tree_cpu_seconds(pid) - before[name] for name, pid in components.items()}
            measured.append((round_result, round_used))
            if args.rounds > 1:
                print(f"  round {number}: {_round_line(round_result, round_used)}", flush=True)
        sampler.stop()
        result, used = _median_round(measured)
        cpu = used["web"]
        counts = stored_counts(bench_url)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)

    if not result.requests:
        sys.exit(f"no request succeeded: {result.first_error}")
    print(f"  {describe(result, result.seconds)}", flush=True)
    print(f"  server CPU: {cpu:.1f} s for {result.spans} spans ({cpu * 1000 / result.spans:.2f} ms/span)", flush=True)
    print(
        "  CPU by component: "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in used.items())
        + ("" if "pg" in used else " (PostgreSQL runs elsewhere: not measured)")
        + f"; wall {result.seconds:.1f} s on {psutil.cpu_count()} cores",
        flush=True,
    )
    if "pg" in used:
        parts = sampler.cpu_by_part()  # over every round
        all_spans = sum(round_result.spans for round_result, _ in measured)
        print(
            "  PostgreSQL CPU by session: "
            + ", ".join(
                f"{part} {parts.get(part, 0.0):.1f} s ({parts.get(part, 0.0) * 1000 / all_spans:.3f} ms/span)"
                for part in ("web", "chainer", "server")
            )
            + " (server: WAL writer, checkpointer, autovacuum, ...)",
            flush=True,
        )
    for line in sampler.summary():
        print(line, flush=True)
    if result.errors:
        print(f"  first error: {result.first_error}", flush=True)

    expected_flows = args.flows * args.rounds + WARMUP_FLOWS
    expected = {
        "flows": expected_flows,
        "completed": expected_flows,
        "steps": expected_flows * (SPANS_PER_FLOW - 1),
        "pending": 0,
    }
    print(
        f"  stored: {counts['completed']} completed flows of {counts['flows']}, {counts['steps']} steps, "
        f"{counts['pending']} pending spans (expected {expected['completed']} and {expected['steps']}, "
        "warm-up included)",
        flush=True,
    )
    errors = sum(round_result.errors for round_result, _ in measured)
    if errors or counts != expected:
        sys.exit(f"FAILED: {errors} failed requests, stored {counts}, expected {expected}; {BENCH_DB} kept")

    print(f"[4/5] raw psycopg INSERT loop, 100 rows per transaction, for {args.raw_seconds:.0f}s", flush=True)
    raw_rate = raw_batched_rate(bench_url, args.raw_seconds, payloads)
    print("[5/5] verifying the audit chain", flush=True)
    print(f"  {audit_check(env)}", flush=True)
    if not args.keep_db:
        drop_database(url, BENCH_DB)
    rate = median(round_result.spans / round_result.seconds for round_result, _ in measured)
    shape = f"flows_per_request={args.flows_per_request}"
    report(f"ingest_spans_per_s={rate:.0f} raw_batched_rows_per_s={raw_rate:.0f} ratio={rate / raw_rate:.3f} {shape}")
    per_span = {
        name: median(round_used[name] * 1000 / round_result.spans for round_result, round_used in measured)
        for name in used
    }
    server = median(sum(round_used.values()) * 1000 / round_result.spans for round_result, round_used in measured)
    report(
        f"ingest_server_cpu_ms_per_span={server:.3f} "
        + " ".join(f"ingest_{name}_cpu_ms_per_span={value:.3f}" for name, value in per_span.items())
        + f" {shape}"
    )
    return 0


def _round_line(result: SendResult, used: dict[str, float]) -> str:
    per_span = {name: seconds * 1000 / max(result.spans, 1) for name, seconds in used.items()}
    return (
        f"{result.spans / max(result.seconds, 1e-9):.0f} spans/s, CPU a span {sum(per_span.values()):.3f} ms ("
        + ", ".join(f"{name} {value:.3f}" for name, value in per_span.items())
        + ")"
    )


def _median_round(measured: list[tuple[SendResult, dict[str, float]]]) -> tuple[SendResult, dict[str, float]]:
    """The round of median rate, for the details printed (each key=value figure is its own median)."""
    ordered = sorted(measured, key=lambda pair: pair[0].spans / max(pair[0].seconds, 1e-9))
    return ordered[len(ordered) // 2]


if __name__ == "__main__":
    sys.exit(main())
