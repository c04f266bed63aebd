"""A step's write updates its flow by key, never by reading the flow table whole.

The write path updates stored flows (their step count, usage, close fields) from one JSON
parameter (``ingest._update_flows``). The statement is prepared after a few executions, and a
prepared statement's generic plan guesses a JSON parameter at 100 rows: on a table of a few
thousand flows it joined them to a scan of the whole table, in every step request (~0.3 ms of
PostgreSQL's CPU a request at 5,000 flows). With the flows' ids also given as an array it finds
them by the primary key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from core.bulk import Write, _together
from reasoning.models import ReasoningFlow
from reasoning.recording.ingest import _update_flows
from tests.factories import make_flow

pytestmark = pytest.mark.django_db


def store_flows(count: int) -> ReasoningFlow:
    """``count`` more flows, copies of one opened through the service (written as SQL), analysed."""
    flow = ReasoningFlow.objects.get(pk=make_flow(close=False))
    columns = ", ".join(f.column for f in ReasoningFlow._meta.concrete_fields if f.column != "id")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO reasoning_flow (id, {columns}) SELECT gen_random_uuid(), {columns} "
            "FROM reasoning_flow, generate_series(1, %s) WHERE id = %s",
            [count, flow.pk],
        )
        cursor.execute("ANALYZE reasoning_flow")
    return flow


def generic_plan(write: Write) -> dict[str, Any]:
    """The plan PostgreSQL makes for the write's statement whatever its parameters' values: the
    plan a prepared statement keeps."""
    sql = _together(((write.body, write.parts),))
    numbered = iter(range(1, sql.count("%s") + 1))
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (GENERIC_PLAN, FORMAT JSON) {re.sub('%s', lambda _: f'${next(numbered)}', sql)}")
        raw = cursor.fetchone()[0]
    plan: dict[str, Any] = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


@pytest.mark.parametrize("stored", [2_000, 5_000])
def test_the_flow_of_a_new_step_is_updated_by_key(stored: int) -> None:
    flow = store_flows(stored)
    flow.step_count += 1  # what a step request writes

    plan = generic_plan(_update_flows([flow], [False], {flow.pk: flow.step_count - 1}))

    flow_reads = [node for node in nodes(plan) if node.get("Relation Name") == "reasoning_flow"]
    assert flow_reads, "the statement reads no flow"
    assert all(node["Node Type"] != "Seq Scan" for node in flow_reads), [node["Node Type"] for node in flow_reads]
    assert any(node.get("Index Name") == "reasoning_flow_pkey" for node in nodes(plan))
