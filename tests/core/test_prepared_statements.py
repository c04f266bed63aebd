"""Statements on the application's connections: parameters bound server-side, and a statement a
connection has run DB_PREPARE_THRESHOLD times (5) prepared there for the next (config.settings;
docs/performance.md, "Prepared statements")."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from audit.chain import chain_pending
from reasoning.models import ReasoningFlow
from tests import otlp

pytestmark = pytest.mark.django_db


def prepared() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
        return [statement for (statement,) in cursor.fetchall()]


def test_a_query_run_five_times_is_prepared_with_its_values_apart(flow: dict[str, Any]) -> None:
    query = ReasoningFlow.objects.filter(agent="researcher-7f3a")
    for _ in range(5):
        assert not query.exists()
    assert not [s for s in prepared() if "researcher-7f3a" in s or ('"agent" = $' in s and "LIMIT 1" in s)]

    assert not query.exists()  # the sixth time

    (statement,) = [s for s in prepared() if '"reasoning_flow"."agent" = $' in s and "LIMIT 1" in s]
    assert "researcher-7f3a" not in statement


def test_the_write_paths_statements_are_prepared_after_a_few_requests(agent: APIClient) -> None:
    for n in range(6):
        response = agent.post(
            "/api/reasoning/flows",
            {"trigger_type": "lab_result", "trigger_ref": f"labs/{n}", "trigger_summary": "A lab result", "agent": "a"},
            format="json",
        )
        assert response.status_code == 201, response.content
    statements = prepared()
    assert any('INSERT INTO "reasoning_flow"' in s for s in statements)
    assert any("INSERT INTO audit_event" in s for s in statements)


def test_the_otlp_routes_and_the_chainers_statements_are_planned_once(agent: APIClient) -> None:
    """PostgreSQL keeps planning a prepared statement at every execution when the plan made for all
    values is estimated dearer than one made for the values at hand (an array parameter is guessed
    at ten elements; an index whose predicate names a state is usable only by a constant): each
    replanning cost a request of one flow ~0.3 ms of PostgreSQL's CPU, and the chainer the same
    for every batch (a batch's size as a parameter, the tree nodes' keys as arrays)."""
    for n in range(1, 13):
        trace, root = f"{n:032x}", f"{n:016x}"
        spans = [
            otlp.span("flow", trace_id=trace, span_id=root),
            otlp.span("step", trace_id=trace, span_id=f"{n + 100:016x}", parent_span_id=root),
        ]
        body = otlp.protobuf_body(otlp.request(*spans))
        response = agent.post("/v1/traces", body, content_type="application/x-protobuf")
        assert response.status_code == 200, response.content
        assert chain_pending(wait=False) > 0  # the chainer's batch, on the same connection here
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE NOT from_sql")
        plans = cursor.fetchall()
    # Prepared from the sixth request on (DB_PREPARE_THRESHOLD): seven executions, of which PostgreSQL
    # plans the first five for their values before it decides, and the rest with the plan it kept.
    facts = [(generic, custom) for statement, generic, custom in plans if "FROM pathways_pathway" in statement]
    assert facts == [(2, 5)]  # the close's library facts: the family's maturity, the aborted siblings
    assert [(statement, custom) for statement, _, custom in plans if custom > 5] == []
