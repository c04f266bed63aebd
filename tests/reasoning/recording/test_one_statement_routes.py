"""The single routes (open, a step, a batch of steps, a close) without a transaction around them.

A request that names at most one stored flow takes it as this process last wrote it, or reads it
without a lock, and is written as one statement, which PostgreSQL commits on its own
(``reasoning.recording.ingest.write``, ``core.bulk.one_statement``): no ``BEGIN``,
``SELECT … FOR UPDATE`` or ``COMMIT``. The statement's update of the flow refuses a flow whose step
count or state moved since (``reasoning_flow_moved``); the request is then written again under the
flow's row lock.

These tests run outside a test transaction (``transaction=True``), as the server does: inside
one, every request takes the transaction path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from audit.models import AuditEvent
from pathways.models import Pathway
from reasoning.models import CloseWork, ReasoningFlow, ReasoningStep
from reasoning.recording.ingest import recent_flows
from tests.factories import FLOWS, add_step, open_flow

pytestmark = pytest.mark.django_db(transaction=True)

STEP = {"kind": "retrieval", "agent": "researcher", "summary_text": "Retrieved guidelines", "confidence": 0.95}
CLOSE = {"flow_state": "completed", "outcome_type": "recommendation_delivered", "outcome_summary": "Done"}


def statements(captured: CaptureQueriesContext) -> list[str]:
    """The write path's statements (not the token's and the rate limit's)."""
    every = [" ".join(query["sql"].split()) for query in captured]
    return [sql for sql in every if "reasoning_api_token" not in sql and "rft_rate_limit" not in sql]


def test_open_step_and_close_need_no_begin_commit_or_row_lock(agent: APIClient) -> None:
    with CaptureQueriesContext(connection) as opened:
        flow = open_flow(agent, trigger_ref="q/1", agent="researcher")
    with CaptureQueriesContext(connection) as stepped:
        response = agent.post(f"{FLOWS}/{flow['id']}/steps", STEP, format="json")
    assert response.status_code == 201, response.content
    with CaptureQueriesContext(connection) as closed:
        response = agent.patch(f"{FLOWS}/{flow['id']}", CLOSE, format="json")
    assert response.status_code == 200, response.content

    (open_write,) = statements(opened)  # the flow and its audit event: one statement
    assert 'INSERT INTO "reasoning_flow"' in open_write and "INSERT INTO audit_event" in open_write
    # The flow as this process wrote it (not read again), and the step: one statement.
    (step_write,) = statements(stepped)
    assert 'INSERT INTO "reasoning_step"' in step_write and "reasoning_flow_moved" in step_write
    # The close reads the flow's steps and the library's facts, then writes in one statement: the
    # close, and the pathway it seeds (nothing owed to the outbox, nothing after it).
    close = statements(closed)
    assert [sql.split()[0] for sql in close] == ["SELECT", "SELECT", "WITH"]
    assert "UPDATE reasoning_flow" in close[2] and 'INSERT INTO "pathways_pathway"' in close[2]
    assert "reasoning_close_work" not in close[2]

    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert (stored.flow_state, stored.step_count, stored.outcome_confidence) == ("completed", 1, 0.95)
    pathway = Pathway.objects.get(seed_flow_id=flow["id"])
    assert (pathway.step_kinds, pathway.agents, pathway.confidence) == (["retrieval"], ["researcher"], 0.95)
    assert not CloseWork.objects.exists()
    actions = AuditEvent.objects.filter(action__startswith="reasoning.").order_by("id")
    assert list(actions.values_list("action", flat=True)) == [
        "reasoning.flow.started",
        "reasoning.step.created",
        "reasoning.flow.completed",
        "reasoning.pathway.extracted",
    ]


def test_a_flow_another_process_wrote_is_read_without_a_lock(agent: APIClient) -> None:
    flow = open_flow(agent, trigger_ref="q/1", agent="researcher")
    add_step(agent, flow["id"])
    recent_flows.clear()  # as in a process that did not write it

    with CaptureQueriesContext(connection) as stepped:
        response = agent.post(f"{FLOWS}/{flow['id']}/steps", STEP, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["position"] == 2
    read, step_write = statements(stepped)
    assert read.startswith('SELECT "reasoning_flow"') and "FOR UPDATE" not in read
    assert 'INSERT INTO "reasoning_step"' in step_write
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 2


def side_connection() -> dict[str, Any]:
    """What ``psycopg.connect`` needs for a connection of its own to the test database (another
    request's, in effect)."""
    params: dict[str, Any] = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return params


@contextmanager
def meanwhile(flow_id: str, *changes: str) -> Iterator[list[str]]:
    """Run ``changes`` (SQL of one ``%s``, the flow's id) from another connection, committed, just
    before the request's first write statement: as a concurrent request would between its read
    and its write. Yields the statements the request sent."""
    params = side_connection()
    sent: list[str] = []

    def wrapper(execute: Callable[..., Any], sql: str, params_: Any, many: bool, context: Any) -> Any:
        if not any(not sql.startswith("SELECT") for sql in sent) and not sql.lstrip().startswith("SELECT"):
            with psycopg.connect(**params) as other, other.transaction():
                for change in changes:
                    other.execute(change, [flow_id])
        sent.append(" ".join(sql.split()))
        return execute(sql, params_, many, context)

    with connection.execute_wrapper(wrapper):
        yield sent


def second_step(confidence: float) -> str:
    """SQL of one ``%s`` (the flow's id): another request's step at position 2, a critic's verdict."""
    return (
        "INSERT INTO reasoning_step (id, flow_id, flow_created_at, position, extra_parent_ids, kind, agent,"
        " summary_text, rationale, inputs, outputs, pii_fields, llm_call_log_ref, experiment_trace_ref,"
        " decision_graph_node_ref, memory_claim_ref, span_id, request_hash, created_at, confidence)"
        " SELECT gen_random_uuid(), id, created_at, 2, '{}', 'verdict', 'critic', 'Checked', '', '{}', '{}', '{}',"
        f" '', '', '', '', '', '', now(), {confidence} FROM reasoning_flow WHERE id = %s"
    )


def test_a_step_whose_flow_moved_since_it_was_read_is_written_after_it(agent: APIClient) -> None:
    flow = open_flow(agent, trigger_ref="q/1", agent="researcher")
    add_step(agent, flow["id"])

    # Another request's step (its count; the row itself does not matter here) lands in between.
    with meanwhile(flow["id"], "UPDATE reasoning_flow SET step_count = step_count + 1 WHERE id = %s") as sent:
        response = agent.post(f"{FLOWS}/{flow['id']}/steps", STEP, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["position"] == 3, sent  # after the concurrent one, not over it
    refused, *after = [sql for sql in sent if not sql.startswith("SELECT")]
    assert "reasoning_flow_moved" in refused
    assert "BEGIN" in after or any("FOR UPDATE" in sql for sql in sent)  # again, under the row lock
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert stored.step_count == 3
    assert list(ReasoningStep.objects.filter(flow_id=flow["id"]).values_list("position", flat=True)) == [1, 3]
    assert AuditEvent.objects.filter(action="reasoning.step.created").count() == 2  # not 3: one was refused


def test_a_step_on_a_flow_closed_since_it_was_read_is_refused(agent: APIClient) -> None:
    flow = open_flow(agent, trigger_ref="q/1", agent="researcher")
    add_step(agent, flow["id"])

    with meanwhile(flow["id"], "UPDATE reasoning_flow SET flow_state = 'aborted' WHERE id = %s"):
        response = agent.post(f"{FLOWS}/{flow['id']}/steps", STEP, format="json")

    assert response.status_code == 409, response.content
    assert ReasoningStep.objects.filter(flow_id=flow["id"]).count() == 1
    assert ReasoningFlow.objects.get(pk=flow["id"]).step_count == 1
    assert AuditEvent.objects.filter(action="reasoning.step.created").count() == 1


def test_a_close_whose_flow_took_a_step_since_it_was_read_counts_it(agent: APIClient) -> None:
    flow = open_flow(agent, trigger_ref="q/1", agent="researcher")
    add_step(agent, flow["id"], confidence=0.99)

    with meanwhile(flow["id"], second_step(0.5), "UPDATE reasoning_flow SET step_count = 2 WHERE id = %s"):
        response = agent.patch(f"{FLOWS}/{flow['id']}", CLOSE, format="json")

    assert response.status_code == 200, response.content
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    # The close was computed again over both steps: the lower confidence is the flow's.
    assert (stored.flow_state, stored.step_count, stored.outcome_confidence) == ("completed", 2, 0.5)
    assert AuditEvent.objects.filter(action="reasoning.flow.completed").count() == 1


def test_a_close_written_again_under_the_lock_owes_its_pathway_and_it_is_extracted_after(agent: APIClient) -> None:
    flow = open_flow(agent, trigger_ref="q/1", agent="researcher")
    add_step(agent, flow["id"], confidence=0.99)

    with meanwhile(flow["id"], second_step(0.95), "UPDATE reasoning_flow SET step_count = 2 WHERE id = %s") as sent:
        response = agent.patch(f"{FLOWS}/{flow['id']}", CLOSE, format="json")

    assert response.status_code == 200, response.content
    refused = next(sql for sql in sent if "reasoning_flow_moved" in sql)
    assert 'INSERT INTO "pathways_pathway"' in refused  # the extraction went with the refused statement
    # Under the lock the close owed the extraction; done right after its commit, over both steps.
    assert any("INSERT INTO reasoning_close_work" in sql for sql in sent)
    pathway = Pathway.objects.get(seed_flow_id=flow["id"])
    assert (pathway.step_kinds, pathway.agents, pathway.confidence) == (
        ["retrieval", "verdict"],
        ["critic", "researcher"],
        0.95,
    )
    assert not CloseWork.objects.exists()
    assert AuditEvent.objects.filter(action="reasoning.pathway.extracted").count() == 1


def test_a_close_waits_for_the_flows_lock_before_writing_what_the_holder_writes(agent: APIClient) -> None:
    """A request that holds the flow's row lock (a request written under the lock) and writes the
    close's owed work for it does not wait for a close written without a lock: that one takes the
    flow's lock before writing anything else, and waits. The other way round they would deadlock."""
    flow = open_flow(agent, trigger_ref="q/1", agent="researcher")
    add_step(agent, flow["id"], confidence=0.99)
    params = side_connection()
    answer: dict[str, Any] = {}

    def close() -> None:
        try:
            answer["response"] = agent.patch(f"{FLOWS}/{flow['id']}", CLOSE, format="json")
        finally:
            connection.close()  # this thread's own

    with psycopg.connect(**params, autocommit=True) as watcher, psycopg.connect(**params) as holder:
        holder.execute("SET lock_timeout = '5s'")
        holder.execute("SELECT id FROM reasoning_flow WHERE id = %s FOR UPDATE", [flow["id"]])
        closing = threading.Thread(target=close)
        closing.start()
        deadline = time.monotonic() + 10
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        while watcher.execute(waiting).fetchone() != (1,):
            assert time.monotonic() < deadline, "the close never waited for the flow's lock"
            time.sleep(0.01)
        # What a close under the lock writes: its owed work, then the flow (aborted here).
        holder.execute(
            "INSERT INTO reasoning_close_work (receiver, flow_id, created_at, next_attempt_at, attempts, last_error)"
            " VALUES ('pathways.extract', %s, now(), now(), 0, '')",
            [flow["id"]],
        )
        holder.execute(
            "UPDATE reasoning_flow SET flow_state = 'aborted', abort_reason = 'timeout', closed_at = now()"
            " WHERE id = %s",
            [flow["id"]],
        )
        holder.commit()
        closing.join(10)

    assert answer["response"].status_code == 409, answer["response"].content  # closed meanwhile, differently
    stored = ReasoningFlow.objects.get(pk=flow["id"])
    assert (stored.flow_state, stored.abort_reason) == ("aborted", "timeout")
    assert AuditEvent.objects.filter(action="reasoning.flow.completed").count() == 0
