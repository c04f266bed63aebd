"""Dashboard benchmark: the operators' dashboard over 1,000,000 flows, from its rollups and from the flows.

1. Creates a throw-away database (``rft_bench_dashboard``) on the same Postgres server and migrates it.
2. Loads ``--flows`` flows (default 1,000,000) over the last 30 days, in chunks of ``CHUNK`` rows, each
   an ``INSERT ... SELECT`` over ``generate_series`` run by the server (as ``bench_flow_list`` does:
   no row crosses the socket, faster than COPY from here), with every index, constraint and trigger
   in place: 10 agents (skewed), ~1 % active, ~4 % aborted, ~3 % blocked by the summary guard,
   step counts over every bucket, durations spread evenly on a log scale from 50 ms to 10 minutes
   (the duration histograms' worst case: many distinct buckets an hour). One flow in five has a
   model call: a step reporting tokens (``--flows`` / 5 steps, 200,000 by default; four models, one
   without a price) whose cost the flow carries, in the step partitions of its flow's month. Then
   ``ANALYZE``.
3. Builds the rollups as a deployment would after the migration: every hour marked, every step's usage
   owed (``reasoning.rollups.owe_everything``), then the job (``refresh``): ``rollup_build_s``.
4. Leaves what ingest leaves between two runs of the job: 20 requests through the write path (100
   flows with a model call, now), and as many dirty marks (3,000: a minute of transactions at 50 a
   second) and pending usage rows (500) as a minute leaves, so each timed read computes the current
   hour from the flows and adds pending usage, as a real one does.
5. Times, in this process (Django against the bench database): ``operator_dashboard(now)`` (the five
   queries, not from Django's cache; PostgreSQL's buffer cache is warm: one untimed call first), each
   of its five queries alone, the page itself with Django's cache cleared before each request, and
   ``operator_dashboard(now, direct_queries=True)``: the former five aggregates over the flows and
   steps. Checks that both agree (counts equal, percentiles within 2 %); then times one run of the
   job over what step 4 left (``rollup_refresh_ms``: its cost every minute).
6. Prints ``dashboard_cold_ms=<median> flows=<n>`` (the issue's target: <= 300 ms at 1,000,000 flows)
   and ``dashboard_direct_ms=<median> flows=<n>``, each against ``bench/baseline.txt``; drops the
   database (unless ``--keep-db``).

Run with ``make bench-dashboard`` (``make bench`` runs it too): about 5 minutes on the 2-core dev machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import statistics
import sys
import time
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench_common import ROOT, child_env, drop_database, manage, recreate_database, report, server_url

BENCH_DB = "rft_bench_dashboard"
CHUNK = 100_000
DAYS = 30

# Flow i of the workload, as SQL over i (generate_series) and %(t0)s / %(spacing)s: the columns both
# the flow and its step (one flow in five) need.
WORKLOAD = """
SELECT i,
       md5('flow' || i)::uuid AS flow_id,
       %(t0)s::timestamptz - make_interval(secs => i * %(spacing)s) AS created_at,
       (ARRAY['researcher','researcher','researcher','critic','critic','correlator','triage','intake',
              'scheduler','pharmacist'])[1 + (i * 7) %% 10] AS agent,
       CASE WHEN i %% 100 = 0 THEN 'active' WHEN i %% 25 = 0 THEN 'aborted' ELSE 'completed' END AS state,
       0.05 * power(12000, ((i * 7919) %% 10007) / 10007.0) AS seconds,
       (ARRAY['gpt-4o','gpt-4o-mini','claude-sonnet-4','clinic-llm-7b'])[1 + (i / 5) %% 4] AS model,
       200 + (i * 13) %% 3000 AS input_tokens,
       20 + (i * 7) %% 800 AS output_tokens,
       CASE WHEN (i / 5) %% 4 = 2 THEN 50 + i %% 400 END AS reasoning_tokens,
       i %% 5 = 0 AS calls
FROM generate_series(%(lo)s::int8, %(hi)s::int8) AS i
"""

# A call's cost: the models' prices per million tokens in and out (clinic-llm-7b has none: no cost).
COST = """
CASE w.model WHEN 'gpt-4o' THEN (w.input_tokens * 2.5 + w.output_tokens * 10.0) / 1e6
             WHEN 'gpt-4o-mini' THEN (w.input_tokens * 0.15 + w.output_tokens * 0.6) / 1e6
             WHEN 'claude-sonnet-4' THEN (w.input_tokens * 3.0 + (w.output_tokens + w.reasoning_tokens) * 15.0) / 1e6
END
"""

LOAD_FLOWS = f"""
INSERT INTO reasoning_flow (
    id, trigger_type, trigger_ref, trigger_summary, trace_id, session_id, agent, flow_state, step_count,
    outcome_type, outcome_summary, outcome_confidence, abort_reason, patient_safe_summary, summary_guard_rule,
    request_hash, created_at, closed_at, outcome_metrics, dispatched_from_backlog, root_span_id,
    cost_usd, input_tokens, output_tokens, model_names
)
SELECT
    w.flow_id,
    (ARRAY['user_question','claim_review','correlation_request','lab_result','refill_request','triage'])[1 + w.i %% 6],
    'bench/' || (w.i %% 997) || '/case-' || w.i,
    'Question about a dose change after new labs',
    md5(w.i::text),
    's-' || (w.i %% 50000),
    w.agent,
    w.state,
    CASE WHEN w.i %% 10 = 0 THEN w.i %% 97 ELSE 1 + w.i %% 9 END,
    CASE WHEN w.state = 'completed' THEN 'recommendation_delivered' ELSE '' END,
    '',
    CASE WHEN w.state = 'active' THEN NULL ELSE 0.5 + (w.i %% 50) / 100.0 END,
    CASE WHEN w.state = 'aborted' THEN 'timeout' ELSE '' END,
    CASE WHEN w.state = 'active' THEN NULL ELSE w.i %% 33 <> 0 END,
    CASE WHEN w.i %% 33 = 0 AND w.state <> 'active' THEN 'email' ELSE '' END,
    md5('h' || w.i::text) || md5('g' || w.i::text),
    w.created_at,
    CASE WHEN w.state = 'active' THEN NULL ELSE w.created_at + make_interval(secs => w.seconds) END,
    '{{}}'::jsonb, false, '',
    CASE WHEN w.calls THEN {COST} END,
    CASE WHEN w.calls THEN w.input_tokens END,
    CASE WHEN w.calls THEN w.output_tokens END,
    CASE WHEN w.calls THEN ARRAY[w.model]::varchar[] ELSE '{{}}'::varchar[] END
FROM ({WORKLOAD}) w
"""

LOAD_STEPS = f"""
INSERT INTO reasoning_step (
    id, flow_id, position, extra_parent_ids, kind, agent, summary_text, rationale, inputs, outputs, pii_fields,
    confidence, latency_ms, llm_call_log_ref, experiment_trace_ref, decision_graph_node_ref, memory_claim_ref,
    span_id, request_hash, created_at, flow_created_at, started_at, model, input_tokens, output_tokens,
    reasoning_tokens, cost_usd
)
SELECT
    md5('step' || w.i)::uuid, w.flow_id, 1, '{{}}', 'llm_prompt', w.agent, 'Asked the model', '',
    '{{}}', '{{}}', '{{}}', 0.9, 800, '', '', '', '', '', md5('s' || w.i::text) || md5('t' || w.i::text),
    w.created_at + interval '1 second', w.created_at, w.created_at, w.model, w.input_tokens, w.output_tokens,
    w.reasoning_tokens, {COST}
FROM ({WORKLOAD}) w
WHERE w.calls
"""


def load(flows: int, t0: datetime) -> float:
    """The flows and their steps (see the module); seconds taken."""
    from django.db import connection, transaction
    from tqdm import tqdm

    from audit.privileges import as_owner
    from core.partitions import add_months, create_month, month_start

    started = time.perf_counter()
    # The step partitions of the workload's months (DDL: as the owner role, when there is one).
    with as_owner(), transaction.atomic(), connection.cursor() as cursor:
        month = month_start(t0 - timedelta(days=DAYS + 1))
        while month <= t0:
            create_month(cursor, "reasoning_step", month)
            month = add_months(month, 1)
    spacing = DAYS * 86400 / flows
    with tqdm(total=flows, unit="flow", desc="  load", mininterval=2.0) as progress:
        for lo in range(1, flows + 1, CHUNK):
            hi = min(lo + CHUNK - 1, flows)
            params: dict[str, Any] = {"t0": t0, "spacing": spacing, "lo": lo, "hi": hi}
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit = off")
                cursor.execute(LOAD_FLOWS, params)
                cursor.execute(LOAD_STEPS, params)
            progress.update(hi - lo + 1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE reasoning_flow")
        cursor.execute("ANALYZE reasoning_step")
    return time.perf_counter() - started


def build_rollups() -> float:
    from reasoning import rollups

    started = time.perf_counter()
    owed = rollups.owe_everything()
    print(f"  owed: {owed.dirty_hours} hours, {owed.pending_usage} usage rows", flush=True)
    done = rollups.refresh(budget_s=float("inf"))
    assert not rollups.status().owed, done
    seconds = time.perf_counter() - started
    with connection_cursor() as cursor:
        cursor.execute("VACUUM ANALYZE reasoning_flow_rollup")
        cursor.execute("VACUUM ANALYZE reasoning_flow_agent_rollup")
        cursor.execute("VACUUM ANALYZE reasoning_step_rollup")
    return seconds


def connection_cursor() -> Any:
    from django.db import connection

    return connection.cursor()


def leave_ingest_traces(t0: datetime) -> None:
    """What a minute of ingest leaves for the next run of the job (step 4 of the module): 20 requests
    through the write path (5 flows each, each with a model call), then the dirty marks and pending
    usage rows of the rest of that minute's transactions (padding rows that change no sum)."""
    import uuid

    from reasoning.recording import ingest

    for request in range(20):
        items = [
            ingest.Item(
                flow_id=uuid.uuid4(),
                create={"trigger_type": "user_question", "agent": "researcher"},
                steps=[
                    {
                        "kind": "llm_prompt",
                        "agent": "researcher",
                        "summary_text": "Asked the model",
                        "model": "gpt-4o",
                        "input_tokens": 1000 + request,
                        "output_tokens": 100,
                    }
                ],
                close={"flow_state": "completed", "outcome_type": "recommendation_delivered"},
                created_at=t0 + timedelta(milliseconds=request),
                closed_at=t0 + timedelta(seconds=2),
            )
            for _ in range(5)
        ]
        for result in ingest.write(items, actor="system:bench"):
            result.raise_error()
    with connection_cursor() as cursor:
        cursor.execute(
            "INSERT INTO reasoning_flow_rollup_dirty (hour)"
            " SELECT date_trunc('hour', %s::timestamptz, 'UTC') FROM generate_series(1, 2980)",
            [t0],
        )
        cursor.execute(
            "INSERT INTO reasoning_step_rollup_pending"
            " (hour, agent, model, steps, input_tokens, output_tokens, reasoning_tokens, cost, priced)"
            " SELECT date_trunc('hour', %s::timestamptz, 'UTC'), 'researcher', 'gpt-4o', 0, 0, 0, 0, 0, 0"
            " FROM generate_series(1, 480)",
            [t0],
        )
        cursor.execute("ANALYZE reasoning_flow_rollup_dirty")
        cursor.execute("ANALYZE reasoning_step_rollup_pending")


def timed(call: Callable[[], Any], times: int) -> list[float]:
    """Milliseconds of each of ``times`` calls."""
    result = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        result.append((time.perf_counter() - started) * 1000)
    return result


def agree(rolled: Any, direct: Any) -> list[str]:
    """Where the dashboard from the rollups differs from the one from the flows."""
    from reasoning.rollups import DURATION_ERROR

    problems = []
    for name in ("hours", "agents", "step_buckets", "usage"):
        if getattr(rolled, name) != getattr(direct, name):
            problems.append(f"{name} differ")
    for ours, exact in zip(rolled.days, direct.days, strict=True):
        if dataclasses.replace(ours, p50=None, p95=None) != dataclasses.replace(exact, p50=None, p95=None):
            problems.append(f"day {ours.start:%Y-%m-%d} differs")
        for key in ("p50", "p95"):
            a, b = getattr(ours, key), getattr(exact, key)
            if (a is None) != (b is None) or (a is not None and abs(a - b) > DURATION_ERROR * b + 0.001):
                problems.append(f"day {ours.start:%Y-%m-%d} {key} {a} against {b}")
    return problems


def measure(t0: datetime, calls: int, direct_calls: int) -> dict[str, list[float]]:
    from django.core.cache import cache
    from django.test import Client
    from django.utils import timezone

    from reasoning import rollups
    from reasoning.dashboard import rollup_reads
    from reasoning.dashboard.queries import operator_dashboard
    from reasoning.tokens import create_operator

    now = timezone.now()
    assert now >= t0
    times: dict[str, list[float]] = {}
    first = timed(lambda: operator_dashboard(now), 1)
    print(f"  first call after the build: {first[0]:.0f} ms", flush=True)
    times["rollups"] = timed(lambda: operator_dashboard(now), calls)
    # Each of the five queries alone, over the default 30 days.
    zone = zoneinfo.ZoneInfo("UTC")
    today = datetime(now.year, now.month, now.day, tzinfo=zone)
    since, until = today - timedelta(days=DAYS - 1), today + timedelta(days=1)
    last_hour = now.replace(minute=0, second=0, microsecond=0)
    queries: dict[str, Callable[[], Any]] = {
        "hours": lambda: rollup_reads.hours(last_hour - timedelta(hours=23), last_hour, zone),
        "days": lambda: rollup_reads.days(since, today, zone, until),
        "agents": lambda: rollup_reads.agents(since, until, 12),
        "step_buckets": lambda: rollup_reads.step_buckets(since, until),
        "usage": lambda: rollup_reads.usage(since, until, 12),
    }
    for name, query in queries.items():
        times[f"query {name}"] = timed(query, calls)
    user = create_operator(username="bench-operator", password=secrets.token_urlsafe(16), actor="system:bench")
    client = Client()
    client.force_login(user)

    def page() -> None:
        cache.clear()
        assert client.get("/dashboard/admin/reasoning/").status_code == 200

    page()
    times["page"] = timed(page, calls)
    timed(lambda: operator_dashboard(now, direct_queries=True), 1)
    times["direct"] = timed(lambda: operator_dashboard(now, direct_queries=True), direct_calls)
    problems = agree(operator_dashboard(now), operator_dashboard(now, direct_queries=True))
    if problems:
        sys.exit("the rollups disagree with the flows: " + "; ".join(problems[:10]))
    times["refresh"] = timed(lambda: rollups.refresh(), 1)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flows", type=int, default=1_000_000, help="flows to load (default 1,000,000)")
    parser.add_argument("--calls", type=int, default=7, help="timed calls of the dashboard (default 7)")
    parser.add_argument("--direct-calls", type=int, default=3, help="timed calls of the direct queries (default 3)")
    parser.add_argument("--keep-db", action="store_true", help="leave the database for inspection")
    args = parser.parse_args()

    url = server_url()
    env = child_env(url, BENCH_DB)
    print(f"[1/4] creating database {BENCH_DB} and migrating", flush=True)
    recreate_database(url, BENCH_DB)
    manage(env, "migrate", "--no-input")
    os.environ.update({key: value for key, value in env.items() if key in ("DATABASE_URL", "RFT_EMBEDDED_DB_NAME")})
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    try:
        t0 = datetime.now(UTC)
        print(f"[2/4] loading {args.flows:,} flows and {args.flows // 5:,} steps reporting tokens", flush=True)
        print(f"  loaded in {load(args.flows, t0):.0f} s", flush=True)
        print("[3/4] building the rollups", flush=True)
        build_s = build_rollups()
        print(f"  built in {build_s:.1f} s", flush=True)
        leave_ingest_traces(t0)
        print(f"[4/4] timing the dashboard ({args.calls} calls; the direct queries {args.direct_calls})", flush=True)
        times = measure(t0, args.calls, args.direct_calls)
    finally:
        if not args.keep_db:
            from django.db import connections

            connections.close_all()
            drop_database(url, BENCH_DB)
    for name, values in times.items():
        print(
            f"  {name:20s} median {statistics.median(values):8.1f} ms  (min {min(values):.1f}, max {max(values):.1f})"
        )
    print(f"rollup_build_s={build_s:.1f} rollup_refresh_ms={times['refresh'][0]:.0f} flows={args.flows}")
    report(f"dashboard_cold_ms={statistics.median(times['rollups']):.0f} flows={args.flows}")
    report(f"dashboard_direct_ms={statistics.median(times['direct']):.0f} flows={args.flows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
