"""Export benchmark: ``manage.py reasoning_export --format raw`` over 10,000 and 100,000 flows.

1. Creates a throw-away database (``rft_bench_export``) on the same Postgres server and
   migrates it.
2. Loads flows of 5 steps each with ``INSERT ... SELECT`` over ``generate_series``: 6 trigger
   types, 10 agents, ~4% aborted and ~1% active (not exported), ~3% blocked by the summary
   guard, a step chain (each step's parent is the one before), model usage on the LLM steps,
   and the columns the export must never read filled in (inputs/outputs JSON, rationale, and
   "encrypted" reasoning content that is not even valid ciphertext: reading it would fail).
   One flow in 50 seeded a pathway (a third of those reused, a tenth demoted). Then ``ANALYZE``.
3. Runs the export in a subprocess (``--no-progress --out <tmp>``) at each size (the first
   batch of flows, then the rest added), reaping it with ``os.wait4`` so its own peak RSS
   is read; rows/s comes from the command's summary line (its export time, not Django's
   start-up).
4. Prints a line per size ``export_rows_per_s=<n> peak_rss_mib=<n> flows=<n>``: a flat
   peak RSS from 10k to 100k flows is the constant-memory streaming.

Run with ``make bench-export`` (or ``make bench``) or alone: ``.venv/bin/python bench/bench_export.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from bench_common import ROOT, child_env, drop_database, manage, recreate_database, report, server_url, with_database

BENCH_DB = "rft_bench_export"
STEPS_PER_FLOW = 5

FLOWS = """
INSERT INTO reasoning_flow (
    id, trigger_type, trigger_ref, trigger_summary, trace_id, session_id, agent, flow_state, step_count,
    outcome_type, outcome_summary, outcome_confidence, abort_reason, patient_safe_summary, summary_guard_rule,
    request_hash, created_at, closed_at, outcome_metrics, dispatched_from_backlog, root_span_id
)
SELECT
    md5('flow-' || i)::uuid,
    (ARRAY['user_question','claim_review','correlation_request','lab_result','refill_request','triage'])[1 + i %% 6],
    'bench/' || (i %% 997) || '/case-' || i,
    'A benchmark question arrived',
    md5(i::text),
    's-' || (i %% 5000),
    (ARRAY['researcher','researcher','researcher','critic','critic','correlator','triage','intake',
           'scheduler','pharmacist'])[1 + (i * 7) %% 10],
    CASE WHEN i %% 100 = 0 THEN 'active' WHEN i %% 25 = 0 THEN 'aborted' ELSE 'completed' END,
    %(steps)s,
    CASE WHEN i %% 100 = 0 OR i %% 25 = 0 THEN '' ELSE 'recommendation_delivered' END,
    'Suggested a follow-up visit',
    CASE WHEN i %% 100 = 0 THEN NULL ELSE 0.5 + (i %% 50) / 100.0 END,
    CASE WHEN i %% 25 = 0 AND i %% 100 <> 0 THEN 'timeout' ELSE '' END,
    CASE WHEN i %% 100 = 0 THEN NULL ELSE i %% 33 <> 0 END,
    CASE WHEN i %% 33 = 0 AND i %% 100 <> 0 THEN 'email' ELSE '' END,
    md5('h' || i::text) || md5('g' || i::text),
    now() - make_interval(secs => (%(last)s - i) * 20),
    CASE WHEN i %% 100 = 0 THEN NULL
         ELSE now() - make_interval(secs => (%(last)s - i) * 20) + make_interval(secs => (i %% 2000) / 100.0) END,
    '{}'::jsonb, i %% 40 = 0, ''
FROM generate_series(%(first)s::int, %(last)s::int) AS i
"""

STEPS = """
INSERT INTO reasoning_step (
    id, flow_id, position, parent_step_id, extra_parent_ids, kind, agent, summary_text, rationale, inputs, outputs,
    pii_fields, inputs_pii, outputs_pii, confidence, latency_ms, llm_call_log_ref, experiment_trace_ref,
    decision_graph_node_ref, memory_claim_ref, span_id, model, input_tokens, output_tokens, reasoning_tokens,
    started_at, reasoning_content, reasoning_content_chars, reasoning_content_purged_at, request_hash, created_at,
    flow_created_at
)
SELECT
    md5('step-' || i || '-' || p)::uuid,
    md5('flow-' || i)::uuid,
    p,
    CASE WHEN p = 1 THEN NULL ELSE md5('step-' || i || '-' || (p - 1))::uuid END,
    '{}',
    (ARRAY['retrieval','llm_prompt','evidence_assembly','llm_prompt','verdict'])[p],
    (ARRAY['researcher','critic','correlator'])[1 + (i + p) %% 3],
    (ARRAY['Retrieved candidate evidence for the question','Asked the model to weigh the evidence',
           'Checked that the evidence is sufficient','Asked the model to summarise the evidence',
           'Reached a verdict'])[p],
    repeat('The rationale of a benchmark step. ', 6),
    jsonb_build_object('query', 'benchmark query ' || i, 'top_k', 8, 'filters', jsonb_build_array('a', 'b')),
    jsonb_build_object('hits', p * 3, 'best', 'doc-' || (i %% 1000)),
    '{}', NULL, NULL,
    0.5 + ((i + p) %% 50) / 100.0,
    50 + (i * p) %% 3000,
    'llm-log-' || i || '-' || p, '', '', CASE WHEN p = 5 THEN 'claim-' || i ELSE '' END,
    '',
    CASE WHEN p IN (2, 4) THEN 'offline-reasoner-1' ELSE '' END,
    CASE WHEN p IN (2, 4) THEN 400 + i %% 300 END,
    CASE WHEN p IN (2, 4) THEN 80 + i %% 90 END,
    CASE WHEN p IN (2, 4) THEN 40 + i %% 60 END,
    NULL,
    CASE WHEN p IN (2, 4) THEN 'not-a-fernet-token-' || repeat(md5(i::text), 8) END,
    CASE WHEN p IN (2, 4) THEN 275 END,
    NULL,
    md5('s' || i || '-' || p) || md5('t' || i || '-' || p),
    now() - make_interval(secs => (%(last)s - i) * 20) + make_interval(secs => p * 0.2),
    (SELECT f.created_at FROM reasoning_flow f WHERE f.id = md5('flow-' || i)::uuid)
FROM generate_series(%(first)s::int, %(last)s::int) AS i CROSS JOIN generate_series(1, %(steps)s::int) AS p
"""

PATHWAYS = """
INSERT INTO pathways_pathway (
    id, trigger_type, trigger_ref, parent_ref, step_kinds, agents, seed_flow_id, confidence, hit_count,
    last_hit_at, embedding, embedding_model, demoted_at, demotion_reason, created_at
)
SELECT md5('pathway-' || f.id)::uuid, f.trigger_type, f.trigger_ref, 'bench/' || (i %% 997),
       ARRAY['retrieval','llm_prompt','evidence_assembly','llm_prompt','verdict'], ARRAY['researcher'], f.id, 0.9,
       CASE WHEN i %% 150 = 7 THEN 1 + i %% 7 ELSE 0 END, NULL, NULL, '',
       CASE WHEN i %% 500 = 57 THEN now() END, CASE WHEN i %% 500 = 57 THEN 'cold_no_hits_30d' ELSE '' END, now()
FROM generate_series(%(first)s::int, %(last)s::int) AS i JOIN reasoning_flow f ON f.id = md5('flow-' || i)::uuid
WHERE i %% 50 = 7 AND f.flow_state = 'completed'
"""

SUMMARY = re.compile(r"rows=(\d+) bytes=(\d+) seconds=([\d.]+)")


def load(url: str, first: int, last: int) -> float:
    started = time.perf_counter()
    params = {"first": first, "last": last, "steps": STEPS_PER_FLOW}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FLOWS, params)
        conn.execute(STEPS, params)
        conn.execute(PATHWAYS, params)
        conn.execute("ANALYZE reasoning_flow")
        conn.execute("ANALYZE reasoning_step")
        conn.execute("ANALYZE pathways_pathway")
    return time.perf_counter() - started


def run_export(env: dict[str, str], out: Path) -> tuple[int, int, float, float, float]:
    """Run the export; return rows, bytes, the command's seconds, wall seconds and peak RSS (MiB)."""
    command = [sys.executable, "manage.py", "reasoning_export", "--format", "raw", "--no-progress", "--out", str(out)]
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        # wait4: this child's own resource usage (RUSAGE_CHILDREN would mix in migrate's).
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        stderr.seek(0)
        errors = stderr.read()
    if process.returncode != 0:
        sys.exit(f"reasoning_export failed ({process.returncode}):\n{errors}")
    match = SUMMARY.search(errors)
    if not match:
        sys.exit(f"reasoning_export printed no summary line:\n{errors}")
    return int(match[1]), int(match[2]), float(match[3]), wall, usage.ru_maxrss / 1024  # ru_maxrss: KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sizes", default="10000,100000", help="flow counts to export at, ascending (default 10000,100000)"
    )
    parser.add_argument("--keep-db", action="store_true", help=f"leave the {BENCH_DB} database for inspection")
    args = parser.parse_args()
    sizes = sorted({int(size) for size in args.sizes.split(",")})

    url = server_url()
    env = child_env(url, BENCH_DB)
    print(f"[1/3] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    manage(env, "migrate", "--no-input")
    results = []
    loaded = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for size in sizes:
                print(f"[2/3] loading flows {loaded + 1:,}..{size:,} ({STEPS_PER_FLOW} steps each)", flush=True)
                seconds = load(with_database(url, BENCH_DB), loaded + 1, size)
                loaded = size
                print(f"  loaded in {seconds:.1f} s", flush=True)
                print(f"[3/3] exporting {size:,} flows", flush=True)
                out = Path(tmp) / f"export-{size}.jsonl"
                rows, written, export_seconds, wall, rss = run_export(env, out)
                print(
                    f"  {rows:,} rows, {written / 2**20:.1f} MiB in {export_seconds:.1f} s "
                    f"({wall:.1f} s with start-up), peak RSS {rss:.0f} MiB",
                    flush=True,
                )
                out.unlink()
                results.append((size, rows / export_seconds if export_seconds else float("inf"), rss))
    finally:
        if not args.keep_db:
            drop_database(url, BENCH_DB)
    for size, rate, rss in results:
        report(f"export_rows_per_s={rate:.0f} peak_rss_mib={rss:.0f} flows={size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
