"""Statements on the application's connections: parameters bound server-side, and a statement a
connection has run DB_PREPARE_THRESHOLD times (5) prepared there for the next (config.settings;
docs/performance.md, "Prepared statements")."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow

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
