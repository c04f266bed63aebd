"""The OTLP route's lookup of stored spans reads a few pages by key, never a whole step partition.

Each request looks its spans up by their derived ids (``traces._stored``). Through
``reasoning_step``'s partitions alone, PostgreSQL read a partition whole while it had no
statistics, or those of when it was small (a fresh database, the first minute of a month): ~2 ms a
request at 10,000 steps, more as it grows. Through the id registry (one unpartitioned key), then
each step and its flow by key, it reads a few pages whatever the statistics say.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reasoning.models import ReasoningFlow
from reasoning.recording.traces import _stored, span_uuid
from tests.factories import make_flow

pytestmark = pytest.mark.django_db

# Reading the partition of 10,000 steps whole takes ~1,100 pages; a lookup by key ~100.
MOST_PAGES = 400
ANALYSE = ("ANALYZE reasoning_step", "ANALYZE reasoning_step_registry", "ANALYZE reasoning_flow")


def run(*statements: str) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


# A step's size as agents write them: a full summary, a few inputs, a request hash.
SUMMARY = "Read the patient's latest lab results and compared them with the reference ranges " * 3
INPUTS = json.dumps({"query": "labs since the last visit", "filters": ["hba1c", "ldl", "egfr"], "note": "x" * 200})


def store_steps(count: int, *, ids: tuple[str, ...] = ()) -> None:
    """``count`` steps of one flow, written as SQL (their ids registered by the table's trigger);
    the first ones with ``ids``."""
    flow = ReasoningFlow.objects.get(pk=make_flow(steps=[]))
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO reasoning_step (id, flow_id, flow_created_at, position, extra_parent_ids, kind, agent, "
            "summary_text, rationale, inputs, outputs, pii_fields, llm_call_log_ref, experiment_trace_ref, "
            "decision_graph_node_ref, memory_claim_ref, span_id, request_hash, created_at) "
            "SELECT coalesce((%s::uuid[])[n], gen_random_uuid()), %s, %s, n, '{}', 'retrieval', 'researcher', "
            "%s, '', %s, '{}', '{}', '', '', '', '', '', md5(n::text) || md5(n::text), now() "
            "FROM generate_series(1, %s) AS n",
            ["{" + ",".join(ids) + "}", flow.pk, flow.created_at, SUMMARY, INPUTS, count],
        )


def lookup(keys: list[tuple[str, str]]) -> tuple[int, int]:
    """(steps found, pages the lookup's statement reads)."""
    with CaptureQueriesContext(connection) as queries:
        found = _stored(keys)
    [statement] = [q["sql"] for q in queries.captured_queries if "reasoning_step" in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}")
        raw = cursor.fetchone()[0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return len(found.steps), int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


# A request of ten flows of six spans, two of them already stored as steps.
KEYS = [(f"{n:032x}", f"{n:016x}") for n in range(60)]
STORED = (str(span_uuid(*KEYS[0])), str(span_uuid(*KEYS[1])))


# Emptied anew: no statistics, as on a fresh database (rolled back with the test).
NO_STATISTICS = ("TRUNCATE reasoning_step_registry, reasoning_step, reasoning_flow CASCADE",)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (NO_STATISTICS, ()),
        (NO_STATISTICS, ANALYSE),  # up to date
        (NO_STATISTICS + ANALYSE, ()),  # taken while the tables were empty
    ],
    ids=["no statistics", "analysed", "analysed when empty"],
)
def test_the_span_lookup_reads_a_few_pages_of_ten_thousand_steps(
    before: tuple[str, ...], after: tuple[str, ...]
) -> None:
    run(*before)
    store_steps(10_000, ids=STORED)
    run(*after)

    found, pages = lookup(KEYS)

    assert found == 2
    assert pages < MOST_PAGES
