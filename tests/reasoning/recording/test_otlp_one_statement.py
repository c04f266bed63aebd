"""POST /v1/traces without a transaction around a trace's first request: its rows, their audit
events and the work its closes owe are one statement, which PostgreSQL commits on its own
(``reasoning.recording.traces._record``, ``core.bulk.one_statement``). A request of whole traces
is written without looking its spans up first: the statement fails whole when some are stored
already or spans of its traces are pending, and the request goes on through the lookup.

These tests run outside a test transaction (``transaction=True``), as the server does: inside
one, every request takes the transaction path.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.models import PendingSpan, ReasoningFlow, ReasoningStep
from reasoning.recording import traces
from reasoning.recording.traces import span_uuid
from tests import otlp
from tests.otlp import chat, tool

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/v1/traces"
TRACE = otlp.TRACE_ID
ROOT, CHILD = otlp.ROOT_SPAN_ID, otlp.CHILD_SPAN_ID
TOOL = otlp.GRANDCHILD_SPAN_ID


def root() -> Any:
    return otlp.span(
        "invoke_agent triage",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage"},
    )


def send(client: APIClient, *spans: Any) -> tuple[ExportTraceServiceResponse, list[str]]:
    """The answer, and the write path's statements (not the token's and the rate limit's)."""
    with CaptureQueriesContext(connection) as captured:
        response = client.post(URL, otlp.protobuf_body(otlp.request(*spans)), content_type="application/x-protobuf")
    assert response.status_code == 200, response.content
    answer = ExportTraceServiceResponse()
    answer.ParseFromString(response.content)
    statements = [" ".join(query["sql"].split()) for query in captured]
    return answer, [sql for sql in statements if "reasoning_api_token" not in sql and "rft_rate_limit" not in sql]


def lookups(statements: list[str]) -> list[int]:
    return [n for n, sql in enumerate(statements) if sql.startswith("SELECT id, NULL::uuid")]


def writes(statements: list[str]) -> list[str]:
    return [sql for sql in statements if not sql.startswith("SELECT")]


def test_a_traces_first_request_is_one_statement_without_begin_or_commit_or_lookup(agent: APIClient) -> None:
    answer, statements = send(agent, root(), chat(), tool())

    assert answer.partial_success.rejected_spans == 0
    assert not lookups(statements)  # a whole trace: written without looking its spans up
    (write,) = writes(statements)  # no BEGIN, no COMMIT: the statement is its own transaction
    assert 'INSERT INTO "reasoning_flow"' in write and 'INSERT INTO "reasoning_step"' in write
    assert "INSERT INTO audit_event" in write
    assert write.rindex("SELECT reasoning_no_pending_span(") > write.rindex("INSERT INTO")  # the main query
    flow = ReasoningFlow.objects.get(pk=span_uuid(TRACE, ROOT))
    assert (flow.agent, flow.flow_state, flow.step_count) == ("triage", "completed", 2)
    assert ReasoningStep.objects.filter(flow=flow).count() == 2
    actions = list(AuditEvent.objects.filter(action__startswith="reasoning.").values_list("action", flat=True))
    assert sorted(actions) == [
        "reasoning.flow.completed",
        "reasoning.flow.started",
        "reasoning.pathway.skipped",
        "reasoning.step.created",
        "reasoning.step.created",
    ]


def test_spans_stored_already_are_a_replay_in_a_transaction(agent: APIClient) -> None:
    send(agent, root(), chat(), tool())
    events = AuditEvent.objects.count()

    answer, statements = send(agent, root(), chat(), tool())

    assert answer.partial_success.rejected_spans == 0
    # The statement written without a lookup failed (the flow's primary key); then the lookup found
    # the spans, and the replay ran in a transaction that wrote nothing.
    assert "INSERT INTO audit_event" in statements[1], statements
    (lookup,) = lookups(statements)
    assert lookup > 1 and statements[lookup + 1] == "BEGIN" and statements[-1] == "COMMIT", statements
    assert ReasoningStep.objects.filter(flow_id=span_uuid(TRACE, ROOT)).count() == 2
    assert AuditEvent.objects.count() == events


def test_spans_waiting_for_their_parent_are_parked_in_a_transaction(agent: APIClient) -> None:
    _, statements = send(agent, tool())

    assert lookups(statements) == [0]  # not a whole trace: looked up first
    assert "BEGIN" in statements and statements[-1] == "COMMIT"
    assert PendingSpan.objects.filter(trace_id=TRACE, span_id=TOOL).exists()

    # A whole trace, but with a span of it parked: the statement without a lookup fails on the
    # check; the lookup finds the parked span, which is placed (locked) in a transaction.
    _, statements = send(agent, root(), chat())

    assert any("reasoning_no_pending_span" in sql for sql in statements[: lookups(statements)[0]])
    assert "BEGIN" in statements
    assert not PendingSpan.objects.exists()
    assert ReasoningStep.objects.filter(flow_id=span_uuid(TRACE, ROOT)).count() == 2


def test_spans_a_concurrent_request_stored_after_the_lookup_are_a_replay(agent: APIClient) -> None:
    send(agent, root())  # a root alone: not a whole trace, so looked up first
    events = AuditEvent.objects.count()
    # The lookup misses it once, as when another request stores it between the lookup and the
    # write: the one statement fails whole, and the retry finds it stored. (The lookup's statement
    # is wrapped to find nothing: the compiled write path's calls cannot be patched.)
    missed: list[bool] = []

    def lookup_finds_nothing_once(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql == traces._STORED_SQL and not missed:
            missed.append(True)
            sql = f"SELECT * FROM ({sql}) AS missed WHERE false"
        return execute(sql, params, many, context)

    with connection.execute_wrapper(lookup_finds_nothing_once):
        answer, statements = send(agent, root())

    assert missed and answer.partial_success.rejected_spans == 0
    assert len([sql for sql in statements if "INSERT INTO audit_event" in sql]) == 1  # the failed one
    assert ReasoningFlow.objects.count() == 1
    assert AuditEvent.objects.count() == events
