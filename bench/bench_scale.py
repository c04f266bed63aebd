"""Growth benchmark: what reads, writes and verification cost as the history grows to 10M steps.

One database (``rft_bench_scale``) is grown in place and measured at each size of ``--sizes``
(default 1M, 3M and 10M steps):

1. Creates the database on the project's Postgres server and migrates it; makes the tokens,
   an operator and ``PATIENTS`` consenting patients (each with a patient-bound
   ``reasoning.read`` token). Then loads the pathway library once, ``--pathways`` (default
   1,000,000) with ``bench_matcher.load`` (hash_bucket_v1 embeddings, HNSW index): its 1M seed
   flows (no steps, spread over a year) stay in the flow table at every size.
2. Per size, loads the steps missing to reach it by COPY, in chunks of ``CHUNK_FLOWS`` flows,
   with every product index, constraint and trigger in place (the step id registry is filled
   by its own statement trigger): flows of 5 steps at a constant rate of 1M steps per 30 days,
   so each size adds *older* history and one more month of partitions (``core.partitions.
   create_month`` for ``reasoning_step`` and ``audit_event``). ~96 % of the flows are completed,
   4 % aborted, 3 % blocked by the summary guard; one in 10 is about a bench patient. Steps
   carry ~350 bytes of inputs/outputs JSON (the PII columns stay null). Each flow gets the
   audit events the write path records (flow started, one per step, flow closed) with their
   canonical bytes as ``audit.canonical.canonical_bytes`` writes them at their historical time
   (filled into a template; one event in ``CHECK_EVERY`` is compared with ``canonical_bytes``
   itself, and ``audit_verify`` rebuilds all of them), loaded with ``session_replication_role
   = replica``: the stamp trigger accepts only *now*. Shortcut, because ``audit.chain.chain_all``
   links ~10,000 events/s here (14M events would take 24 minutes): the bench links the bulk
   events itself, with the chainer's own functions (``audit.canonical.link_hash``,
   ``audit.tree.leaf_hash``, ``audit.merkle.append``, from the chain head and tree frontier the
   database holds) and COPYs the links and tree nodes; every later event goes through the real
   chainer. The five tables load in parallel, one connection and thread each
   (``synchronous_commit = off``). Then ``VACUUM (ANALYZE)`` of each (in parallel): the steady
   state of a database written at that rate, where autovacuum keeps up, instead of autovacuum
   catching up with months of history during the measurements; and a real signed checkpoint
   (``audit.checkpoints.sign_checkpoint``).
3. Starts gunicorn (``--workers``) and the audit chainer and measures, after a warm-up, with
   ``--requests`` sequential requests of random existing targets (seeded): the flow DAG page
   ``/dashboard/admin/reasoning/<id>`` (operator session), the admin flow list filtered by
   ``trace_id`` (``/admin/v1/reasoning/flows?trace_id=``, ``reasoning.admin``), the patient
   narrative ``/api/reasoning/flows/<id>`` (the patient's token; ``NARRATIVE_RATE_LIMIT=off``)
   and the pathway match route (``bench_matcher.time_route``): p50/p95 client-side; the match
   route twice, as the load left the page cache and after reading the library into it
   (``prewarm``), with the megabytes read from disk meanwhile (``pgpgin``). Then the
   writes: one request per step with ``wrk`` for ``--write-seconds`` (``bench_write_path``'s
   single mode: open, 5 steps with a PII field, close) and OTLP ingest of ``--ingest-flows``
   traces of 6 spans (``bench_ingest``'s workload, 4 clients): steps/s and spans/s.
4. Stops the server; runs ``manage.py reasoning_export --format raw`` for one day in the
   oldest month of the first size (the same day at every size: ~6,400 completed flows, plus the
   pathway seed flows of that day): seconds and rows/s.
5. Links what the server wrote, signs a checkpoint, appends ``--verify-events`` (default
   10,000) events with ``audit.services.record_many`` and links them with ``chain_all``. Then
   it times ``manage.py audit_verify --since-checkpoint`` (the incremental verification: what
   follows the latest signed checkpoint) and ``manage.py audit_verify`` of everything, cut at
   ``--verify-timeout`` seconds. A cut run is projected from the share of links it walked (a
   lower bound: the tree check comes after the walk); cut before its first link, it is
   reported as more than the timeout.
6. Prints one ``size=<steps> <figure>=<value>`` line per figure, then a table of all sizes,
   draws ``--plot`` (latency and rates against size, log x; matplotlib, Agg) and drops the
   database (unless ``--keep-db``).

Run with ``make bench-scale``; ``--sizes 10000,30000,100000 --pathways 20000`` is a quick run, and
``--from-log <saved output>`` prints the table and draws the plot again from a run's ``size=`` lines.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import bench_ingest
import bench_matcher
import httpx
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
    server_url,
    wait_until_up,
    with_database,
)
from bench_export import SUMMARY as EXPORT_SUMMARY
from bench_write_path import run_wrk, step_rate
from tqdm import tqdm

BENCH_DB = "rft_bench_scale"
ACTOR = "system:bench"
SEED = 20261203
STEPS_PER_FLOW = 5
# History density: 1M steps per 30 days (200,000 flows), so each 1M steps is one more month.
FLOWS_PER_DAY = 1_000_000 // STEPS_PER_FLOW / 30
FLOW_SPACING_S = 86400 / FLOWS_PER_DAY
CHUNK_FLOWS = 10_000  # flows per COPY statement and commit
SAMPLE_EVERY = 50  # flow i is a read target when i % SAMPLE_EVERY is 0 (any flow) or 3 (a patient's)
PATIENTS = 10
WARMUP_REQUESTS = 20
PLOT = ROOT / "docs" / "img" / "bench-scale.svg"

AGENTS = ("researcher", "researcher", "researcher", "critic", "critic", "correlator", "triage", "intake")
TRIGGER_TYPES = ("user_question", "claim_review", "correlation_request", "lab_result", "refill_request", "triage")
KINDS = ("retrieval", "llm_prompt", "evidence_assembly", "llm_prompt", "verdict")
SUMMARIES = (
    "Retrieved candidate evidence for the question",
    "Asked the model to weigh the evidence",
    "Checked that the evidence is sufficient",
    "Asked the model to summarise the evidence",
    "Reached a verdict",
)
WORDS = (
    *("recent", "readings", "guideline", "targets", "dose", "change", "follow-up", "visit", "potassium"),
    *("creatinine", "trend", "renal", "function", "interaction", "warfarin", "statin", "adherence"),
    *("reported", "symptoms", "blood", "pressure"),
)

FLOW_COLUMNS = (
    "id, trigger_type, trigger_ref, trigger_summary, trace_id, session_id, agent, opened_by, patient_id, flow_state,"
    " step_count, outcome_type, outcome_summary, outcome_confidence, abort_reason, outcome_metrics,"
    " dispatched_from_backlog, dimensions_snapshot, patient_safe_summary, summary_guard_rule, request_hash,"
    " root_span_id, created_at, closed_at"
)
STEP_COLUMNS = (
    "id, flow_id, position, parent_step_id, extra_parent_ids, kind, agent, summary_text, rationale, inputs, outputs,"
    " pii_fields, confidence, latency_ms, llm_call_log_ref, experiment_trace_ref, decision_graph_node_ref,"
    " memory_claim_ref, span_id, model, input_tokens, output_tokens, started_at, request_hash, created_at,"
    " flow_created_at"
)
EVENT_COLUMNS = "id, action, actor, target_type, target_id, payload, canonical, created_at"
# canonical_bytes' encoding of an event (keys sorted, no whitespace), filled in by the loader;
# one event in CHECK_EVERY is compared with canonical_bytes() itself.
CANONICAL = '{{"action":"{}","actor":"{}","created_at":"{}","payload":{},"target_id":"{}","target_type":"{}"}}'
CHECK_EVERY = 997
ANALYZED = (
    "reasoning_flow",
    "reasoning_step",
    "reasoning_step_registry",
    "audit_event",
    "audit_chain_link",
    "audit_tree_node",
)

FLOW_TYPE = "reasoning.reasoningflow"
STEP_TYPE = "reasoning.reasoningstep"

# Figures: (key, column header, unit); "lower is better" for latencies, higher for rates.
READS = (
    ("dag_page", "flow DAG page"),
    ("trace_list", "admin flow list by trace_id"),
    ("narrative", "patient narrative"),
    ("match_route", "pathway match route"),
    ("match_resident", "pathway match route, library in memory"),
)


# --- The synthetic history ------------------------------------------------------------------


@dataclass
class Targets:
    """Read targets among the loaded flows: (flow id, trace id) and (flow id, patient index)."""

    flows: list[tuple[str, str]] = field(default_factory=list)
    narratives: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class Chain:
    """The head of the audit chain and the right edge of its Merkle tree."""

    size: int
    head: str
    frontier: dict[tuple[int, int], bytes]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def content_pools(rng: random.Random) -> tuple[list[str], list[str], list[str], list[str]]:
    """Pre-serialised inputs, outputs, rationales and radar snapshots (~350 B of JSON a step)."""
    from reasoning.dimensions import AXES, bucket

    inputs, outputs, rationales, radars = [], [], [], []
    for n in range(256):
        inputs.append(
            _json(
                {
                    "query": _text(rng, 8),
                    "top_k": 8,
                    "filters": {"sources": ["guidelines", "labs", "notes"], "since_days": 30 + n % 300},
                    "context_ref": f"doc-{rng.randrange(10**6)}",
                    "note": _text(rng, 12),
                }
            )
        )
        outputs.append(
            _json(
                {
                    "hits": 1 + n % 9,
                    "best": f"doc-{rng.randrange(10**6)}",
                    "scores": [round(rng.uniform(0.5, 1), 3) for _ in range(3)],
                    "summary": _text(rng, 10),
                }
            )
        )
        rationales.append(_text(rng, 18))
    for _ in range(16):
        scores = {axis: rng.randint(0, 7) for axis in AXES}
        radars.append(_json({axis: {"score": s, "bucket": bucket(s)} for axis, s in scores.items()}))
    return inputs, outputs, rationales, radars


def flow_time(t0: datetime, i: int) -> datetime:
    """Flow i's created_at: flow 0 is the newest, each one FLOW_SPACING_S older."""
    return t0 - timedelta(seconds=i * FLOW_SPACING_S)


def months_between(start: datetime, end: datetime) -> list[datetime]:
    from core.partitions import add_months, month_start

    months, month = [], month_start(start)
    while month <= end:
        months.append(month)
        month = add_months(month, 1)
    return months


def _copy_text(value: Any) -> str:
    """One field in COPY's text format (the bench's own strings hold no tab, newline or backslash)."""
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _line(values: Sequence[Any]) -> str:
    return "\t".join([_copy_text(value) for value in values]) + "\n"


class Writer(threading.Thread):
    """COPYs one table's chunks on its own connection, one transaction a chunk, so the five
    tables load in parallel while the main thread generates the next chunk. A writer with
    ``after`` commits chunk n only once ``after`` has committed it (the steps' foreign key to
    their flows is checked at commit)."""

    def __init__(self, url: str, sql: str, after: Writer | None = None, replica: bool = False) -> None:
        super().__init__(daemon=True)
        self.url, self.sql, self.after, self.replica = url, sql, after, replica
        self.chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=2)
        self.committed = 0
        self.done = threading.Condition()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute("SET synchronous_commit = off")
                if self.replica:
                    conn.execute("SET session_replication_role = replica")
                while (data := self.chunks.get()) is not None:
                    with conn.transaction():
                        with conn.cursor().copy(self.sql) as copy:
                            copy.write(data)
                        if self.after is not None:
                            self.after.wait_for(self.committed + 1)
                    with self.done:
                        self.committed += 1
                        self.done.notify_all()
        except BaseException as exc:  # re-raised by the main thread
            self.error = exc
            with self.done:
                self.committed = -1  # wakes a dependent writer, which then fails too
                self.done.notify_all()

    def wait_for(self, chunks: int) -> None:
        with self.done:
            self.done.wait_for(lambda: self.committed >= chunks or self.committed < 0)
        if self.committed < 0:
            raise RuntimeError(f"the writer of {self.sql!r} failed")

    def put(self, data: bytes | None) -> None:
        while self.is_alive():
            try:
                self.chunks.put(data, timeout=1)
                return
            except queue.Full:
                continue
        raise RuntimeError(f"the writer of {self.sql!r} stopped: {self.error!r}")


class Loader:
    """Generates flows ``[lo, hi)`` (oldest first) with their steps, audit events, chain links
    and tree nodes, and COPYs them (``Writer``)."""

    def __init__(self, url: str, t0: datetime, patients: Sequence[str], targets: Targets, seed: int) -> None:
        self.url = url
        self.t0 = t0
        self.patients = patients
        self.targets = targets
        self.rng = random.Random(seed)
        self.inputs, self.outputs, self.rationales, self.radars = content_pools(self.rng)
        self.checked = 0

    def load(self, lo: int, hi: int) -> dict[str, float]:
        from core.partitions import create_month

        started = time.perf_counter()
        months = months_between(flow_time(self.t0, hi - 1), flow_time(self.t0, lo) + timedelta(minutes=5))
        with psycopg.connect(self.url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            for month in months:
                for table in ("reasoning_step", "audit_event"):
                    if partitioned(conn, table):
                        create_month(conn.cursor(), table, month)  # type: ignore[arg-type]
        chain = read_chain(self.url)
        first_id = next_event_id(self.url)
        flows = Writer(self.url, f"COPY reasoning_flow ({FLOW_COLUMNS}) FROM STDIN")
        writers = {
            "flows": flows,
            "steps": Writer(self.url, f"COPY reasoning_step ({STEP_COLUMNS}) FROM STDIN", after=flows),
            # Historical times: the stamp trigger accepts only the database's own clock.
            "events": Writer(self.url, f"COPY audit_event ({EVENT_COLUMNS}) FROM STDIN", replica=True),
            "links": Writer(self.url, "COPY audit_chain_link (position, event_id, prev_hash, hash) FROM STDIN"),
            "nodes": Writer(self.url, "COPY audit_tree_node (level, idx, hash) FROM STDIN"),
        }
        for writer in writers.values():
            writer.start()
        event_id = first_id - 1
        try:
            with tqdm(total=hi - lo, unit="flow", desc="  COPY", mininterval=2.0) as progress:
                for top in range(hi, lo, -CHUNK_FLOWS):
                    bottom = max(lo, top - CHUNK_FLOWS)
                    lines = self._chunk(range(top - 1, bottom - 1, -1), chain, event_id)
                    event_id += len(lines["events"])
                    for name, writer in writers.items():
                        writer.put("".join(lines[name]).encode())
                    progress.update(top - bottom)
        finally:
            for writer in writers.values():
                with suppress(RuntimeError):  # a writer that failed has stopped already
                    writer.put(None)
            for writer in writers.values():
                writer.join()
        failed = [writer.error for writer in writers.values() if writer.error is not None]
        if failed:
            raise failed[0]
        with psycopg.connect(self.url, autocommit=True) as conn:
            # The events took explicit sequence numbers: the identity sequence continues after them.
            conn.execute("SELECT setval(pg_get_serial_sequence('audit_event', 'id'), %s)", [event_id])
        copy_seconds = time.perf_counter() - started
        started = time.perf_counter()
        vacuum(self.url, ANALYZED)
        return {"copy_s": copy_seconds, "analyze_s": time.perf_counter() - started, "events": event_id - first_id + 1}

    def _chunk(self, flows: range, chain: Chain, last_id: int) -> dict[str, list[str]]:
        """COPY lines of one chunk of flows, per table; ``chain`` moves to its end."""
        from audit import merkle, tree
        from audit.canonical import link_hash

        lines: dict[str, list[str]] = {"flows": [], "steps": [], "events": [], "links": [], "nodes": []}
        leaves: list[bytes] = []
        event_id, head, position = last_id, chain.head, chain.size
        events, links = lines["events"], lines["links"]
        for i in flows:
            for action, actor, target_type, target_id, payload, at in self._flow(i, lines):
                event_id += 1
                position += 1
                stamp = at.isoformat()
                canonical = CANONICAL.format(action, actor, stamp, payload, target_id, target_type).encode()
                if event_id % CHECK_EVERY == 0:
                    self._check(canonical, action, actor, target_type, target_id, payload, at)
                events.append(
                    f"{event_id}\t{action}\t{actor}\t{target_type}\t{target_id}\t{payload}\t\\\\x{canonical.hex()}"
                    f"\t{stamp}\n"
                )
                digest = link_hash(head, position, event_id, canonical)
                links.append(f"{position}\t{event_id}\t{head}\t{digest}\n")
                head = digest
                leaves.append(tree.leaf_hash(event_id, canonical))
        nodes = merkle.append(chain.size, chain.frontier, leaves)
        lines["nodes"] = [f"{level}\t{idx}\t\\\\x{digest.hex()}\n" for level, idx, digest in nodes]
        created = {(level, idx): digest for level, idx, digest in nodes}
        chain.frontier = {key: created.get(key) or chain.frontier[key] for key in merkle.frontier_keys(position)}
        chain.size, chain.head = position, head
        return lines

    def _check(
        self, canonical: bytes, action: str, actor: str, target_type: str, target_id: str, payload: str, at: datetime
    ) -> None:
        """The templated bytes are exactly what ``audit.canonical.canonical_bytes`` writes
        (``audit_verify`` rebuilds every event's bytes from its columns, too)."""
        from audit.canonical import canonical_bytes

        expected = canonical_bytes(
            action=action,
            actor=actor,
            target_type=target_type,
            target_id=target_id,
            payload=json.loads(payload),
            created_at=at,
        )
        if canonical != expected:
            sys.exit(f"FAILED: the bench's canonical bytes differ from canonical_bytes():\n{canonical!r}\n{expected!r}")
        self.checked += 1

    def _flow(self, i: int, lines: dict[str, list[str]]) -> Iterator[tuple[str, str, str, str, str, datetime]]:
        """Flow i and its steps as COPY lines; yields its audit events (action, actor, target type,
        target id, payload JSON with sorted keys, time)."""
        rng = self.rng
        flow_id = str(uuid.UUID(int=rng.getrandbits(128)))
        trace_id = f"{rng.getrandbits(128):032x}"
        created = flow_time(self.t0, i)
        closed = created + timedelta(seconds=2 + (i % 1800) / 100)
        aborted = i % 25 == 7
        unsafe = i % 33 == 5
        patient = (i // 10) % len(self.patients) if i % 10 == 3 else None
        agent = AGENTS[i % len(AGENTS)]
        trigger_type = TRIGGER_TYPES[(i * 7) % len(TRIGGER_TYPES)]
        actor = f"token:bench-agent-{i % 8}"
        confidence = round(0.5 + (i % 50) / 100, 2)
        lines["flows"].append(
            _line(
                (
                    flow_id,
                    trigger_type,
                    f"scale/{i % 997}/case-{i}",
                    "A question about a recent change in treatment",
                    trace_id,
                    f"s-{i // 20}",
                    agent,
                    actor,
                    self.patients[patient] if patient is not None else None,
                    "aborted" if aborted else "completed",
                    STEPS_PER_FLOW,
                    "" if aborted else "recommendation_delivered",
                    "" if aborted else "Suggested a follow-up visit with the care team",
                    None if aborted else confidence,
                    "timeout" if aborted else "",
                    "{}",
                    False,
                    None if aborted else self.radars[i % len(self.radars)],
                    not unsafe,
                    "email" if unsafe else "",
                    f"{rng.getrandbits(256):064x}",
                    "",
                    created,
                    closed,
                )
            )
        )
        if i % SAMPLE_EVERY == 0:
            self.targets.flows.append((flow_id, trace_id))
        elif i % SAMPLE_EVERY == 3 and patient is not None and not aborted and not unsafe:
            self.targets.narratives.append((flow_id, patient))
        has_patient = "false" if patient is None else "true"
        yield (
            "reasoning.flow.started",
            actor,
            FLOW_TYPE,
            flow_id,
            f'{{"agent":"{agent}","has_patient":{has_patient},"trigger_type":"{trigger_type}"}}',
            created,
        )
        parent: str | None = None
        for position in range(1, STEPS_PER_FLOW + 1):
            step_id = str(uuid.UUID(int=rng.getrandbits(128)))
            at = created + timedelta(seconds=0.2 * position)
            kind = KINDS[position - 1]
            llm = kind == "llm_prompt"
            latency = 50 + (i * position) % 1500
            lines["steps"].append(
                _line(
                    (
                        step_id,
                        flow_id,
                        position,
                        parent,
                        "{}",
                        kind,
                        agent,
                        SUMMARIES[position - 1],
                        self.rationales[(i + position) % len(self.rationales)],
                        self.inputs[(i * 3 + position) % len(self.inputs)],
                        self.outputs[(i * 5 + position) % len(self.outputs)],
                        "{}",
                        round(0.5 + ((i + position) % 50) / 100, 2),
                        latency,
                        f"llm-log-{i}-{position}" if llm else "",
                        "",
                        "",
                        f"claim-{i}" if position == STEPS_PER_FLOW else "",
                        "",
                        "offline-reasoner-1" if llm else "",
                        400 + i % 300 if llm else None,
                        80 + i % 90 if llm else None,
                        at - timedelta(milliseconds=latency),
                        f"{rng.getrandbits(256):064x}",
                        at,
                        created,
                    )
                )
            )
            parents = int(parent is not None)
            yield (
                "reasoning.step.created",
                actor,
                STEP_TYPE,
                step_id,
                f'{{"agent":"{agent}","flow_id":"{flow_id}","kind":"{kind}","parent_count":{parents},'
                f'"pii_field_count":0,"position":{position},"reasoning_content_chars":null}}',
                at,
            )
            parent = step_id
        outcome = (
            '"outcome_confidence":null,"outcome_type":""'
            if aborted
            else (f'"outcome_confidence":{confidence},"outcome_type":"recommendation_delivered"')
        )
        rule = '"email"' if unsafe else "null"
        yield (
            "reasoning.flow.aborted" if aborted else "reasoning.flow.completed",
            actor,
            FLOW_TYPE,
            flow_id,
            f'{{{outcome},"patient_safe_summary":{"false" if unsafe else "true"},"step_count":{STEPS_PER_FLOW},'
            f'"summary_guard_rule":{rule},"timeout":{"true" if aborted else "false"}}}',
            closed,
        )


def partitioned(conn: psycopg.Connection[Any], table: str) -> bool:
    row = conn.execute("SELECT relkind = 'p' FROM pg_class WHERE relname = %s", [table]).fetchone()
    return bool(row and row[0])


def read_chain(url: str) -> Chain:
    """The chain head and tree frontier as the database holds them (nothing may be queued)."""
    from audit import merkle

    with psycopg.connect(url) as conn:
        queued = conn.execute("SELECT count(*) FROM audit_pending").fetchone()
        if queued and queued[0]:
            sys.exit(f"FAILED: {queued[0]} events still queued for the chainer before a bulk load")
        row = conn.execute("SELECT position, hash FROM audit_chain_link ORDER BY position DESC LIMIT 1").fetchone()
        size, head = (int(row[0]), str(row[1])) if row else (0, "0" * 64)
        keys = merkle.frontier_keys(size)
        frontier = {
            (int(level), int(idx)): bytes(digest)
            for level, idx, digest in conn.execute(
                "SELECT level, idx, hash FROM audit_tree_node WHERE (level, idx) IN"
                " (SELECT * FROM unnest(%s::smallint[], %s::bigint[]))",
                [[k[0] for k in keys], [k[1] for k in keys]],
            )
        }
    if len(frontier) != len(keys):
        sys.exit(f"FAILED: the tree of {size} leaves lacks frontier nodes")
    return Chain(size, head, frontier)


def vacuum(url: str, tables: Sequence[str]) -> None:
    """``VACUUM (ANALYZE)`` of ``tables``, one connection (thread) each.

    The bulk load writes months of history in minutes; left to autovacuum, its catch-up (three
    workers reading every new partition) would run during the measurements, which a database
    written at the loaded rate (1M steps a month) never sees."""
    errors: list[BaseException] = []

    def run(table: str) -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"VACUUM (ANALYZE) {table}")
        except BaseException as error:  # re-raised below, in the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(table,)) for table in tables]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def next_event_id(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT greatest((SELECT coalesce(max(id), 0) FROM audit_event), (SELECT last_value FROM pg_sequences"
            " WHERE schemaname || '.' || sequencename = pg_get_serial_sequence('audit_event', 'id')))"
        ).fetchone()
    return int(row[0] if row and row[0] is not None else 0) + 1


# --- Django in this process ------------------------------------------------------------------


def setup_people(env: dict[str, str]) -> tuple[Any, list[str], list[str]]:
    """The operator, and PATIENTS consenting patients: their ids and patient-bound read tokens."""
    from patients.services import create_patient
    from reasoning.tokens import create_api_token, create_operator

    operator = create_operator(username="bench-operator", password=uuid.uuid4().hex, actor=ACTOR)
    ids, tokens = [], []
    for n in range(PATIENTS):
        patient = create_patient(username=f"bench-patient-{n}", password=uuid.uuid4().hex, consent=True, actor=ACTOR)
        _, token = create_api_token(
            name=f"bench-patient-{n}", scopes=["reasoning.read"], actor=ACTOR, patient_id=patient.pk
        )
        ids.append(str(patient.pk))
        tokens.append(token)
    return operator, ids, tokens


def operator_cookie(operator: Any) -> dict[str, str]:
    """A fresh session for the operator (the idle timeout would end an old one)."""
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(operator)
    return {settings.SESSION_COOKIE_NAME: client.cookies[settings.SESSION_COOKIE_NAME].value}


def drain() -> int:
    """Link every queued event with the real chainer."""
    from audit.chain import chain_all

    return chain_all(batch_size=5000)


def sign() -> int:
    from audit.checkpoints import sign_checkpoint

    drain()
    return sign_checkpoint().tree_size


def append_events(count: int, flows: Sequence[tuple[str, str]]) -> float:
    """``count`` new events by ``record_many`` (1,000 a transaction), then linked by the real
    chainer; returns the seconds of the chaining."""
    from django.db import transaction

    from audit.actions import Action
    from audit.chain import chain_all
    from audit.services import Event, record_many

    for first in range(0, count, 1000):
        with transaction.atomic():
            record_many(
                [
                    Event(
                        Action.ADMIN_FLOW_READ,
                        "system:bench",
                        (FLOW_TYPE, flows[n % len(flows)][0]),
                        {"step_count": STEPS_PER_FLOW, "page": 1},
                    )
                    for n in range(first, min(count, first + 1000))
                ]
            )
    started = time.perf_counter()
    chain_all(batch_size=5000)
    return time.perf_counter() - started


# --- Measurements ----------------------------------------------------------------------------


@contextmanager
def serving(env: dict[str, str], workers: int) -> Iterator[int]:
    port = free_port()
    procs = [
        subprocess.Popen(gunicorn_command(port, workers), cwd=ROOT, env=env),
        subprocess.Popen([sys.executable, "manage.py", "audit_chainer"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL),
    ]
    try:
        wait_until_up(port)
        yield port
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)


def time_gets(
    port: int, requests: Sequence[tuple[str, dict[str, str]]], cookies: dict[str, str], desc: str
) -> tuple[list[float], int]:
    """Milliseconds per GET (path, headers), sequentially; the count of answers other than 200."""
    latencies, errors = [], 0
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", cookies=cookies, timeout=60.0) as http:
        for path, headers in tqdm(requests, desc=desc, unit="req", mininterval=1.0, leave=False, disable=None):
            started = time.perf_counter()
            response = http.get(path, headers=headers)
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                errors += 1
                if errors == 1:
                    print(f"    first bad answer: {path}: HTTP {response.status_code} {response.text[:200]}")
    return latencies, errors


def measure_reads(
    url: str,
    port: int,
    targets: Targets,
    tokens: dict[str, str],
    patient_tokens: Sequence[str],
    cookies: dict[str, str],
    library: bench_matcher.Library | None,
    count: int,
    rng: random.Random,
) -> dict[str, float]:
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    flows = [rng.choice(targets.flows) for _ in range(count + WARMUP_REQUESTS)]
    narratives = [rng.choice(targets.narratives) for _ in range(count + WARMUP_REQUESTS)]
    routes: dict[str, list[tuple[str, dict[str, str]]]] = {
        "dag_page": [(f"/dashboard/admin/reasoning/{flow_id}", {}) for flow_id, _ in flows],
        "trace_list": [(f"/admin/v1/reasoning/flows?trace_id={trace_id}", admin) for _, trace_id in flows],
        "narrative": [
            (f"/api/reasoning/flows/{flow_id}", {"Authorization": f"Bearer {patient_tokens[patient]}"})
            for flow_id, patient in narratives
        ],
    }
    figures: dict[str, float] = {}
    for name, requests in routes.items():
        time_gets(port, requests[:WARMUP_REQUESTS], cookies, f"  {name} warm-up")
        latencies, errors = time_gets(port, requests[WARMUP_REQUESTS:], cookies, f"  {name}")
        figures.update(summarise(name, latencies, errors))
    if library is not None:
        # Twice: as the history left the page cache, then with the library read into it. The
        # route reads only the pathway table and its indexes (the same 1M rows at every size).
        pairs = bench_matcher.query_pairs(library, 2 * count + WARMUP_REQUESTS, rng)
        bench_matcher.time_route(port, tokens["admin"], pairs[:WARMUP_REQUESTS], "  match warm-up")
        timed = pairs[WARMUP_REQUESTS:]
        for name, queries in (("match_route", timed[:count]), ("match_resident", timed[count:])):
            if name == "match_resident":
                prewarmed = prewarm(url, bench_matcher.TABLE)
                print(f"  pathway library read into memory ({prewarmed})", flush=True)
                figures |= library_sizes(url)
            with DiskReads() as read:
                latencies, errors = bench_matcher.time_route(port, tokens["admin"], queries, f"  {name}")
            figures.update(summarise(name, latencies, errors))
            figures[f"{name}_disk_mb"] = read.mb
            print(f"  {name}: {read.mb:,.0f} MB read from disk during the timed requests", flush=True)
    return figures


def library_sizes(url: str) -> dict[str, float]:
    """Megabytes of the pathway library on disk: the table with all its indexes, and the HNSW
    index alone (what the matcher reads at random, one page per hop)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size(%s::regclass), pg_relation_size(%s::regclass)",
            [bench_matcher.TABLE, bench_matcher.HNSW_INDEX],
        ).fetchone()
    total, hnsw = (int(row[0]), int(row[1])) if row else (0, 0)
    return {"pathway_library_mb": total / 2**20, "pathway_hnsw_mb": hnsw / 2**20}


def autovacuum_workers(url: str) -> int:
    """How many autovacuum workers are running now (the reads are measured right after)."""
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'").fetchone()
    return int(row[0]) if row else 0


class DiskReads:
    """Megabytes the machine read from its block devices (``pgpgin`` of /proc/vmstat) in the block."""

    def __init__(self) -> None:
        self.mb = 0.0

    @staticmethod
    def _kib() -> int:
        with open("/proc/vmstat") as handle:
            for line in handle:
                if line.startswith("pgpgin "):
                    return int(line.split()[1])
        return 0

    def __enter__(self) -> DiskReads:
        self._start = self._kib()
        return self

    def __exit__(self, *exc: object) -> None:
        self.mb = (self._kib() - self._start) / 1024


def prewarm(url: str, table: str) -> str:
    """Reads ``table`` and its indexes into the OS page cache, as ``pg_prewarm(…, 'read')`` does
    (the managed services ship it; the embedded server does not, so then the relation files are
    read directly, which needs them on this machine). Says how it was done."""
    with psycopg.connect(url, autocommit=True) as conn:
        relations = [
            int(row[0])
            for row in conn.execute(
                "SELECT %s::regclass::oid UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass",
                [table, table],
            )
        ]
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        except psycopg.Error:
            pass
        else:
            for oid in relations:
                conn.execute("SELECT pg_prewarm(%s::oid::regclass, 'read')", [oid])
            return f"pg_prewarm of {len(relations)} relations"
        row = conn.execute("SHOW data_directory").fetchone()
        files = [
            Path(str(row[0] if row else "")) / str(path)
            for (path,) in conn.execute("SELECT pg_relation_filepath(oid) FROM unnest(%s::oid[]) AS oid", [relations])
        ]
    size = 0
    try:
        for base in files:
            segment = 0
            while (path := base.with_name(base.name + (f".{segment}" if segment else ""))).exists():
                with open(path, "rb", buffering=0) as handle:
                    while chunk := handle.read(1 << 20):
                        size += len(chunk)
                segment += 1
    except OSError as error:
        return f"not done: {error}"
    return f"{size / 2**20:,.0f} MB of relation files read"


def summarise(name: str, latencies: Sequence[float], errors: int) -> dict[str, float]:
    print(
        f"  {name}: p50 {percentile(latencies, 50):.1f} ms, p95 {percentile(latencies, 95):.1f} ms, "
        f"{errors} errors ({len(latencies)} requests)",
        flush=True,
    )
    return {
        f"{name}_p50_ms": percentile(latencies, 50),
        f"{name}_p95_ms": percentile(latencies, 95),
        f"{name}_errors": errors,
    }


def measure_writes(port: int, tokens: dict[str, str], seconds: int, ingest_flows: int, seed: int) -> dict[str, float]:
    run_wrk(port, tokens["write"], 8, 2, "single")  # warm-up
    result = run_wrk(port, tokens["write"], 8, seconds, "single")
    single = step_rate(result)
    print(f"  single-step writes: {single:.0f} steps/s ({result['errors']} errors)", flush=True)
    bench_ingest.send_all(port, tokens["ingest"], bench_ingest.encode(bench_ingest.generate(20, seed + 1), 10), 4)
    bodies = bench_ingest.encode(bench_ingest.generate(ingest_flows, seed), 10)
    sent = bench_ingest.send_all(port, tokens["ingest"], bodies, 4)
    ingest = sent.spans / sent.seconds if sent.spans else 0.0
    print(f"  OTLP ingest: {ingest:.0f} spans/s ({sent.errors} errors)", flush=True)
    return {
        "single_step_writes_per_s": single,
        "single_step_errors": result["errors"],
        "ingest_spans_per_s": ingest,
        "ingest_errors": sent.errors,
    }


def export_day(env: dict[str, str], day: date, out: Path) -> dict[str, float]:
    command = [
        *(sys.executable, "manage.py", "reasoning_export", "--format", "raw", "--no-progress"),
        *("--since", day.isoformat(), "--until", (day + timedelta(days=1)).isoformat(), "--out", str(out)),
    ]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    match = EXPORT_SUMMARY.search(result.stderr)
    if result.returncode != 0 or not match:
        sys.exit(f"reasoning_export failed ({result.returncode}):\n{result.stderr[-2000:]}")
    rows, seconds = int(match[1]), float(match[3])
    out.unlink(missing_ok=True)
    print(f"  export of {day}: {rows:,} rows in {seconds:.2f} s ({wall:.1f} s with start-up)", flush=True)
    return {"export_day_s": seconds, "export_rows": rows, "export_rows_per_s": rows / seconds if seconds else 0.0}


PROGRESS = re.compile(r"(\d+)/(\d+)")


def verify_since_checkpoint(env: dict[str, str]) -> dict[str, float]:
    """``audit_verify --since-checkpoint`` (what follows the latest signed checkpoint) timed."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "manage.py", "audit_verify", "--since-checkpoint", "--no-progress"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    lines = result.stdout.strip().splitlines()
    if result.returncode == 1 or not lines:
        sys.exit(f"FAILED: audit_verify --since-checkpoint exited {result.returncode}:\n{result.stdout}{result.stderr}")
    links = re.search(r"(\d+) links verified", result.stdout)
    print(f"  audit_verify --since-checkpoint: {seconds:.1f} s (exit {result.returncode}): {lines[0]}", flush=True)
    return {"audit_verify_incremental_s": seconds, "audit_incremental_links": int(links[1]) if links else 0}


def verify(env: dict[str, str], timeout: float) -> dict[str, float]:
    """``audit_verify`` (everything) timed; when cut at ``timeout``, projected from the links walked."""
    command = [sys.executable, "manage.py", "audit_verify"]
    with tempfile.TemporaryFile("w+") as stderr:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            stdout, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            stderr.seek(0)
            found = PROGRESS.findall(stderr.read())
            done, total = (int(found[-1][0]), int(found[-1][1])) if found else (0, 0)
            if not done:  # still planning or sorting: nothing to project from
                print(f"  audit_verify cut after {timeout:.0f} s before its first link ({total:,} links)", flush=True)
                return {"audit_verify_s": timeout, "audit_verify_projected": 2, "audit_links": total}
            projected = timeout * total / done
            print(
                f"  audit_verify cut after {timeout:.0f} s at {done:,} of {total:,} links: "
                f"projected >= {projected:.0f} s",
                flush=True,
            )
            return {"audit_verify_s": projected, "audit_verify_projected": 1, "audit_links": total}
        seconds = time.perf_counter() - started
        stderr.seek(0)
        errors = stderr.read()
    lines = stdout.strip().splitlines()
    if process.returncode == 1 or not lines:
        sys.exit(f"FAILED: audit_verify exited {process.returncode}:\n{stdout}\n{errors[-2000:]}")
    links = re.search(r"(\d+) links verified", stdout)
    print(f"  audit_verify: {seconds:.1f} s (exit {process.returncode}): {lines[0]}", flush=True)
    return {"audit_verify_s": seconds, "audit_verify_projected": 0, "audit_links": int(links[1]) if links else 0}


# --- Output ----------------------------------------------------------------------------------

TABLE = (
    ("flow DAG page p50 / p95 (ms)", "dag_page"),
    ("admin list by trace_id p50 / p95 (ms)", "trace_list"),
    ("narrative p50 / p95 (ms)", "narrative"),
    ("pathway match route p50 / p95 (ms)", "match_route"),
    ("  its reads from disk (MB)", "match_route_disk_mb"),
    ("the same, library read into memory first: p50 / p95 (ms)", "match_resident"),
    ("  its reads from disk (MB)", "match_resident_disk_mb"),
    ("autovacuum workers running when the reads start", "autovacuum_workers"),
    ("pathway library on disk, all / its HNSW index (MB)", "pathway_library_mb"),
    ("export of one day (s)", "export_day_s"),
    ("export rows/s", "export_rows_per_s"),
    ("audit_verify --since-checkpoint after +N events (s)", "audit_verify_incremental_s"),
    ("links it verified", "audit_incremental_links"),
    ("audit_verify, everything (s)", "audit_verify_s"),
    ("audit links verified", "audit_links"),
    ("single-step writes (steps/s)", "single_step_writes_per_s"),
    ("OTLP ingest (spans/s)", "ingest_spans_per_s"),
    ("load of the added steps: COPY + VACUUM ANALYZE (s)", "load_s"),
)


def cell(figures: dict[str, float], key: str) -> str:
    if f"{key}_p95_ms" in figures:
        return f"{figures[f'{key}_p50_ms']:.1f} / {figures[f'{key}_p95_ms']:.1f}"
    if key not in figures:
        return "—"
    value = figures[key]
    if key == "pathway_library_mb":
        return f"{value:,.0f} / {figures.get('pathway_hnsw_mb', 0):,.0f}"
    if key == "audit_verify_s" and figures.get("audit_verify_projected") == 2:
        return f"> {value:,.0f} (cut before the first link)"
    if key == "audit_verify_s" and figures.get("audit_verify_projected"):
        return f"≥ {value:,.0f} (projected)"
    seconds = key.endswith("_s") and not key.endswith("_per_s")
    return f"{value:,.2f}" if seconds and value < 100 else f"{value:,.0f}"


def table(results: dict[int, dict[str, float]]) -> str:
    sizes = sorted(results)
    lines = [
        "| steps | " + " | ".join(f"{size:,}" for size in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for label, key in TABLE:
        lines.append(f"| {label} | " + " | ".join(cell(results[size], key) for size in sizes) + " |")
    return "\n".join(lines)


def plot(results: dict[int, dict[str, float]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    fig, (reads, jobs, writes) = plt.subplots(1, 3, figsize=(15, 4.8))
    for key, label in READS:
        if all(f"{key}_p95_ms" in results[s] for s in sizes):
            reads.plot(sizes, [results[s][f"{key}_p95_ms"] for s in sizes], marker="o", label=label)
    reads.set_title("Read routes, p95 over HTTP")
    reads.set_ylabel("ms")
    jobs.plot(sizes, [results[s]["export_day_s"] for s in sizes], marker="o", label="reasoning_export, one day")
    if all("audit_verify_incremental_s" in results[s] for s in sizes):
        incremental = [results[s]["audit_verify_incremental_s"] for s in sizes]
        jobs.plot(sizes, incremental, marker="o", label="audit_verify --since-checkpoint")
    jobs.plot(sizes, [results[s]["audit_verify_s"] for s in sizes], marker="o", label="audit_verify (full)")
    cut = [s for s in sizes if results[s].get("audit_verify_projected")]
    jobs.scatter(
        cut, [results[s]["audit_verify_s"] for s in cut], marker="^", s=80, zorder=3, label="audit_verify cut: at least"
    )
    jobs.set_title("Commands")
    jobs.set_ylabel("seconds")
    jobs.set_yscale("log")
    for key, label in (
        ("single_step_writes_per_s", "steps/s, one request per step"),
        ("ingest_spans_per_s", "OTLP spans/s"),
    ):
        writes.plot(sizes, [results[s][key] for s in sizes], marker="o", label=label)
    writes.set_title("Writes")
    writes.set_ylabel("per second")
    for axes in (reads, jobs, writes):
        axes.set_xscale("log")
        axes.set_xlabel("steps in the database")
        axes.set_ylim(bottom=0 if axes is not jobs else None)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    # No creation date in the file: the same figures give the same SVG.
    fig.savefig(path, metadata={"Date": None} if path.suffix == ".svg" else None)
    plt.close(fig)


def machine() -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} vCPU {model}, {memory:.0f} GiB"


FIGURE_LINE = re.compile(r"^size=(\d+) (\w+)=([\d.]+|inf)$", re.MULTILINE)
TITLE_LINE = re.compile(r"^make bench-scale, .*$", re.MULTILINE)


def redraw(log: Path, path: Path, timeout: float) -> int:
    """The table and the plot again from the ``size=`` lines of a saved run."""
    text = log.read_text(errors="replace")
    results: dict[int, dict[str, float]] = {}
    for size, key, value in FIGURE_LINE.findall(text):
        results.setdefault(int(size), {})[key] = float(value)
    for figures in results.values():  # a run printed inf when cut before the first link (``verify``)
        if figures.get("audit_verify_s") == float("inf"):
            figures["audit_verify_s"], figures["audit_verify_projected"] = timeout, 2
    title = TITLE_LINE.search(text)
    print(table(results))
    plot(results, path, title[0] if title else str(log))
    print(f"plot: {path}")
    return 0


# --- Main ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000000,3000000,10000000", help="step counts to measure at, ascending")
    parser.add_argument("--pathways", type=int, default=1_000_000, help="pathway library (0: no matcher)")
    parser.add_argument("--requests", type=int, default=200, help="timed requests per read route (default 200)")
    parser.add_argument("--write-seconds", type=int, default=10, help="seconds of wrk single-step writes")
    parser.add_argument("--ingest-flows", type=int, default=500, help="OTLP traces of 6 spans per size")
    parser.add_argument("--verify-events", type=int, default=10_000, help="events appended before audit_verify")
    parser.add_argument(
        "--verify-timeout", type=float, default=150.0, help="seconds before audit_verify is cut (default 150)"
    )
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (default 3)")
    parser.add_argument("--plot", type=Path, default=PLOT, help=f"plot file (default {PLOT.relative_to(ROOT)})")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--keep-db", action="store_true", help=f"leave the {BENCH_DB} database for inspection")
    parser.add_argument("--from-log", type=Path, help="print the table and draw the plot from a saved run's output")
    args = parser.parse_args()
    if args.from_log:
        return redraw(args.from_log, args.plot, args.verify_timeout)
    sizes = sorted({int(size) for size in args.sizes.split(",")})
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed: apt-get install wrk (make wrk)")
    began = time.perf_counter()
    started_at = datetime.now(UTC)

    url = server_url()
    env = child_env(url, BENCH_DB)
    env["NARRATIVE_RATE_LIMIT"] = "off"
    env["PATHWAY_EMBEDDING_MODEL"] = bench_matcher.MODEL
    bench_url = with_database(url, BENCH_DB)
    print(f"[setup] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    results: dict[int, dict[str, float]] = {}
    try:
        manage(env, "migrate", "--no-input")
        tokens = {
            "write": create_token(env, "bench-agent", "reasoning.write"),
            "ingest": create_token(env, "bench-ingest", "reasoning.write,reasoning.admin"),
            "admin": create_token(env, "bench-admin", "reasoning.admin"),
        }
        bench_matcher.setup_django(env)
        from django.db import connections

        operator, patient_ids, patient_tokens = setup_people(env)
        rng = random.Random(args.seed)
        library = None
        if args.pathways:
            print(f"[setup] loading {args.pathways:,} pathways (bench_matcher.load)", flush=True)
            library = bench_matcher.build_library(args.pathways, rng)
            connections.close_all()  # the load forks embedding workers
            mem = f"{max(256, args.pathways * 3 // 1000)}MB"
            timings = bench_matcher.load(bench_url, library, rng, mem)
            print(f"  pathways loaded: {', '.join(f'{k} {v:.0f} s' for k, v in timings.items())}", flush=True)

        # All history before the bench's own writes; the export day is in the first size's oldest month.
        t0 = started_at - timedelta(hours=2)
        first_flows = sizes[0] // STEPS_PER_FLOW
        # (A first size of less than two days of history: t0's own day, partly loaded.)
        day = min((flow_time(t0, first_flows) + timedelta(days=2)).date(), t0.date())
        targets = Targets()
        loader = Loader(bench_url, t0, patient_ids, targets, args.seed)
        loaded = 0
        for size in sizes:
            flows = size // STEPS_PER_FLOW
            print(f"[{size:,} steps] loading flows {loaded:,}..{flows:,} ({STEPS_PER_FLOW} steps each)", flush=True)
            drain()
            load = loader.load(loaded, flows)
            added = (flows - loaded) * STEPS_PER_FLOW
            loaded = flows
            print(
                f"  COPY {load['copy_s']:.0f} s ({added / load['copy_s']:,.0f} steps/s with"
                f" {load['events']:,.0f} audit events, links and tree nodes); VACUUM ANALYZE {load['analyze_s']:.0f} s",
                flush=True,
            )
            figures: dict[str, float] = {"load_s": load["copy_s"] + load["analyze_s"]}
            print(f"  checkpoint signed at tree size {sign():,}", flush=True)
            connections.close_all()
            cookies = operator_cookie(operator)
            print(f"[{size:,} steps] reads ({args.requests} requests each), then writes", flush=True)
            with serving(env, args.workers) as port:
                size_rng = random.Random(args.seed + size)
                figures["autovacuum_workers"] = autovacuum_workers(bench_url)
                figures |= measure_reads(
                    bench_url, port, targets, tokens, patient_tokens, cookies, library, args.requests, size_rng
                )
                figures |= measure_writes(port, tokens, args.write_seconds, args.ingest_flows, args.seed + size)
            with tempfile.TemporaryDirectory() as tmp:
                figures |= export_day(env, day, Path(tmp) / "day.jsonl")
            signed = sign()
            chain_s = append_events(args.verify_events, targets.flows)
            print(
                f"  checkpoint at {signed:,}; +{args.verify_events:,} events linked by chain_all in {chain_s:.1f} s",
                flush=True,
            )
            connections.close_all()
            figures |= verify_since_checkpoint(env)
            figures |= verify(env, args.verify_timeout)
            results[size] = figures
            for key, value in figures.items():
                print(f"size={size} {key}={value:.2f}" if isinstance(value, float) else f"size={size} {key}={value}")
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep_db:
            drop_database(url, BENCH_DB)
    wall = time.perf_counter() - began
    title = (
        f"make bench-scale, {started_at:%Y-%m-%d %H:%M} UTC, {machine()}, "
        f"{args.pathways:,} pathways; wall {wall / 60:.0f} min"
    )
    print(title)
    print(table(results))
    plot(results, args.plot, title)
    print(f"plot: {args.plot}")
    print(f"bench_scale_wall_s={wall:.0f}")
    return 1 if any(v for r in results.values() for k, v in r.items() if k.endswith("errors")) else 0


if __name__ == "__main__":
    sys.exit(main())
