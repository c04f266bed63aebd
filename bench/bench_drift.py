"""Drift benchmark: the daily drift job over a fleet of agents with recorded outcomes.

1. Creates a throw-away database (``rft_bench_drift``) on the same Postgres server, migrates it,
   and loads ``--agents`` agents x ``--sessions`` sessions x ``--decisions`` decisions (default
   100 x 50 x 20 = 100,000 flows) with one ``INSERT ... SELECT`` over ``generate_series``: every
   flow closed (2% aborted), one session an hour per agent over the last days, 4 trigger types,
   confidences 0.6-0.99, ~4% escalated by outcome type and ~3% by an escalation step, 80% of
   the outcomes judged (4 in 5 of them correct). Two steps per flow (200,000 steps). Then ``ANALYZE``.
2. In process, runs ``reasoning.jobs.compute_drift_reports()`` once (no report exists yet, so
   every session is judged and stored, each with its audit event) and times it; the session
   aggregates query is also timed on its own.
3. Prints the levels found and, last, ``drift_agents_per_s=<n> sessions=<n>``.

Run with ``make bench-drift`` (or ``make bench``) or alone: ``.venv/bin/python bench/bench_drift.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

import psycopg
from bench_common import ROOT, child_env, drop_database, manage, recreate_database, report, server_url, with_database

BENCH_DB = "rft_bench_drift"

# i runs over every flow: agent a = i / per_agent, session s = (i % per_agent) / decisions, decision k.
FLOWS = """
INSERT INTO reasoning_flow (
    id, trigger_type, trigger_ref, trigger_summary, trace_id, session_id, agent, flow_state, step_count,
    outcome_type, outcome_summary, outcome_confidence, abort_reason, patient_safe_summary, summary_guard_rule,
    request_hash, created_at, closed_at, outcome_metrics, dispatched_from_backlog, root_span_id,
    outcome, outcome_correct, outcome_recorded_at
)
SELECT
    md5('flow-' || i)::uuid,
    (ARRAY['user_question','lab_result','refill_request','triage'])[1 + ((i * 7) %% 11) %% 4],
    'bench/' || i,
    '',
    'bench-' || i,
    'agent-' || (i / %(per_agent)s) || '-s-' || ((i %% %(per_agent)s) / %(decisions)s),
    'agent-' || (i / %(per_agent)s),
    CASE WHEN i %% 50 = 7 THEN 'aborted' ELSE 'completed' END,
    2,
    CASE WHEN i %% 50 = 7 THEN '' WHEN i %% 23 = 0 THEN 'escalated' ELSE 'recommendation_delivered' END,
    '',
    0.6 + ((i * 13) %% 40) / 100.0,
    CASE WHEN i %% 50 = 7 THEN 'timeout' ELSE '' END,
    true,
    '',
    md5('h' || i::text) || md5('g' || i::text),
    t.created_at,
    t.created_at + interval '30 seconds',
    '{}'::jsonb, false, '',
    CASE WHEN i %% 5 = 0 THEN '' ELSE 'Follow-up booked' END,
    CASE WHEN i %% 5 = 0 THEN NULL ELSE (i * 11) %% 10 < 8 END,
    CASE WHEN i %% 5 = 0 THEN NULL ELSE t.created_at + interval '1 hour' END
FROM generate_series(0, %(flows)s - 1) AS i,
LATERAL (
    SELECT now() - make_interval(hours => %(sessions)s) + make_interval(
        hours => (i %% %(per_agent)s) / %(decisions)s, mins => i %% %(decisions)s
    ) AS created_at
) AS t
"""

STEPS = """
INSERT INTO reasoning_step (
    id, flow_id, position, parent_step_id, extra_parent_ids, kind, agent, summary_text, rationale, inputs, outputs,
    pii_fields, confidence, llm_call_log_ref, experiment_trace_ref, decision_graph_node_ref, memory_claim_ref,
    span_id, model, request_hash, created_at,
    flow_created_at
)
SELECT
    md5('step-' || i || '-' || p)::uuid,
    md5('flow-' || i)::uuid,
    p,
    CASE WHEN p = 1 THEN NULL ELSE md5('step-' || i || '-1')::uuid END,
    '{}',
    CASE WHEN p = 1 THEN 'retrieval' WHEN i %% 31 = 0 THEN 'escalation' ELSE 'decision' END,
    'agent-' || (i / %(per_agent)s),
    'Weighed the evidence',
    '', '{}'::jsonb, '{}'::jsonb, '{}',
    0.6 + ((i * 13) %% 40) / 100.0,
    '', '', '', '', '', '',
    md5('s' || i || '-' || p) || md5('t' || i || '-' || p),
    now() - make_interval(hours => %(sessions)s),
    (SELECT f.created_at FROM reasoning_flow f WHERE f.id = md5('flow-' || i)::uuid)
FROM generate_series(0, %(flows)s - 1) AS i CROSS JOIN generate_series(1, 2) AS p
"""


def load(url: str, agents: int, sessions: int, decisions: int) -> float:
    started = time.perf_counter()
    params = {
        "flows": agents * sessions * decisions,
        "per_agent": sessions * decisions,
        "decisions": decisions,
        "sessions": sessions,
    }
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FLOWS, params)
        conn.execute(STEPS, params)
        conn.execute("ANALYZE reasoning_flow")
        conn.execute("ANALYZE reasoning_step")
    return time.perf_counter() - started


def run_job() -> tuple[float, float, int, int, Counter[str]]:
    """Seconds of the whole job and of its aggregate query alone; agents; sessions; levels."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from reasoning.agents.drift_queries import completed_sessions
    from reasoning.jobs import compute_drift_reports

    started = time.perf_counter()
    found = completed_sessions()
    query_seconds = time.perf_counter() - started
    started = time.perf_counter()
    reports = compute_drift_reports()
    job_seconds = time.perf_counter() - started
    assert sum(len(s) for s in found.values()) == len(reports), "every completed session gets a report"
    return job_seconds, query_seconds, len({r.agent for r in reports}), len(reports), Counter(r.level for r in reports)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=50, help="sessions per agent (default 50)")
    parser.add_argument("--decisions", type=int, default=20, help="decisions (flows) per session (default 20)")
    parser.add_argument("--keep-db", action="store_true", help="leave the rft_bench_drift database for inspection")
    args = parser.parse_args()

    url = server_url()
    env = child_env(url, BENCH_DB)
    flows = args.agents * args.sessions * args.decisions
    print(f"[1/3] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    manage(env, "migrate", "--no-input")
    print(f"[2/3] loading {flows:,} flows ({args.agents} agents x {args.sessions} sessions x {args.decisions})")
    print(f"  loaded in {load(with_database(url, BENCH_DB), args.agents, args.sessions, args.decisions):.1f} s")
    print("[3/3] running the drift job", flush=True)
    os.environ.update({key: value for key, value in env.items() if key in ("DATABASE_URL", "RFT_EMBEDDED_DB_NAME")})
    try:
        job_seconds, query_seconds, agents, sessions, levels = run_job()
    finally:
        if not args.keep_db:
            from django.db import connections

            connections.close_all()
            drop_database(url, BENCH_DB)
    print(f"  session aggregates (one query): {query_seconds * 1000:.0f} ms")
    print(f"  whole job (read, judge, store {sessions} reports with their audit events): {job_seconds:.2f} s")
    print("  levels: " + ", ".join(f"{level} {count}" for level, count in sorted(levels.items())))
    report(f"drift_agents_per_s={agents / job_seconds:.0f} sessions={sessions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
