"""The OTLP route's lookup of stored spans reads by key, never a whole step partition.

Each request looks its spans up by their derived ids (``traces._stored``). Through
``reasoning_step``'s partitions alone, PostgreSQL reads a partition whole while it has no
statistics (a fresh database, the first minute of a month): ~2 ms a request at 10,000 steps, more
as it grows. Through the id registry (one unpartitioned key), then the partition's key, it never does.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reasoning.models import ReasoningFlow
from reasoning.recording.traces import _stored
from tests.factories import make_flow

pytestmark = pytest.mark.django_db


def plan_of(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_span_lookup_reads_steps_by_key_while_their_partitions_have_no_statistics() -> None:
    flow = ReasoningFlow.objects.get(pk=make_flow(steps=[]))
    with connection.cursor() as cursor:
        # 10,000 stored steps (their ids registered by the table's trigger), no statistics yet.
        cursor.execute(
            "INSERT INTO reasoning_step (id, flow_id, flow_created_at, position, extra_parent_ids, kind, agent, "
            "summary_text, rationale, inputs, outputs, pii_fields, llm_call_log_ref, experiment_trace_ref, "
            "decision_graph_node_ref, memory_claim_ref, span_id, request_hash, created_at) "
            "SELECT gen_random_uuid(), %s, %s, n, '{}', 'retrieval', 'researcher', 'A step', '', '{}', '{}', "
            "'{}', '', '', '', '', '', '', now() FROM generate_series(1, 10000) AS n",
            [flow.pk, flow.created_at],
        )
    keys = [(f"{n:032x}", f"{n:016x}") for n in range(60)]  # a request of ten flows of six spans

    with CaptureQueriesContext(connection) as queries:
        found = _stored(keys)

    assert not (found.flows or found.steps or found.calls)
    [lookup] = [q["sql"] for q in queries.captured_queries if "reasoning_step" in q["sql"]]
    plan = plan_of(lookup)
    assert "Seq Scan on reasoning_step" not in plan, plan
    assert "reasoning_step_registry_pkey" in plan, plan
