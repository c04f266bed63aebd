"""OpenTelemetry instruments of the flow lifecycle, read as deltas between snapshots.

Each test uses its own trigger type / agent label, so other tests' points never mix in.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from reasoning.models import ReasoningFlow
from tests.factories import add_step, open_flow

pytestmark = pytest.mark.django_db

Snapshot = Callable[[], Any]
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def delta(before: Any, after: Any, name: str, **attributes: str) -> float:
    """How much ``name`` (points whose attributes include ``attributes``) grew between snapshots."""
    growth: float = after.value(name, **attributes) - before.value(name, **attributes)
    return growth


def unique_label(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def close(client: APIClient, flow_id: str, body: dict[str, str]) -> Any:
    return client.patch(f"/api/reasoning/flows/{flow_id}", body, format="json")


COMPLETE = {"flow_state": "completed", "outcome_type": "recommendation_delivered"}
ABORT = {"flow_state": "aborted", "abort_reason": "tool_error"}


def test_opening_a_flow_counts_flow_started_by_trigger_type(agent: APIClient, metric_snapshot: Snapshot) -> None:
    trigger = unique_label("started")
    other = unique_label("other")
    before = metric_snapshot()

    open_flow(agent, trigger_type=trigger)
    open_flow(agent, trigger_type=trigger)
    open_flow(agent, trigger_type=other)

    after = metric_snapshot()
    assert delta(before, after, "reasoning.flow.started", trigger_type=trigger) == 2
    assert delta(before, after, "reasoning.flow.started", trigger_type=other) == 1


def test_retried_or_rejected_flow_is_not_counted_again(agent: APIClient, metric_snapshot: Snapshot) -> None:
    trigger = unique_label("retry")
    body = {"id": str(uuid.uuid4()), "trigger_type": trigger}
    before = metric_snapshot()

    assert agent.post("/api/reasoning/flows", body, format="json").status_code == 201
    assert agent.post("/api/reasoning/flows", body, format="json").status_code == 200
    rejected = agent.post(
        "/api/reasoning/flows", {"trigger_type": trigger, "patient_id": str(uuid.uuid4())}, format="json"
    )
    assert rejected.status_code == 400

    after = metric_snapshot()
    assert delta(before, after, "reasoning.flow.started", trigger_type=trigger) == 1


def test_step_writes_are_counted_by_step_kind_and_agent(
    agent: APIClient, flow: dict[str, Any], metric_snapshot: Snapshot
) -> None:
    writer = unique_label("agent")
    before = metric_snapshot()

    add_step(agent, flow["id"], kind="retrieval", agent=writer)
    add_step(agent, flow["id"], kind="retrieval", agent=writer)
    add_step(agent, flow["id"], kind="verdict", agent=writer)

    after = metric_snapshot()
    assert delta(before, after, "reasoning.step.writes", step_kind="retrieval", agent=writer) == 2
    assert delta(before, after, "reasoning.step.writes", step_kind="verdict", agent=writer) == 1
    assert delta(before, after, "reasoning.step.writes", step_kind="llm_prompt", agent=writer) == 0


def test_rejected_step_is_not_counted(agent: APIClient, flow: dict[str, Any], metric_snapshot: Snapshot) -> None:
    writer = unique_label("agent")
    before = metric_snapshot()

    body = {"kind": "retrieval", "agent": writer, "summary_text": "x" * 281}
    assert agent.post(f"/api/reasoning/flows/{flow['id']}/steps", body, format="json").status_code == 400

    after = metric_snapshot()
    assert delta(before, after, "reasoning.step.writes", agent=writer) == 0


def test_completing_a_flow_counts_flow_completed_with_outcome_trigger_and_summary_safety(
    agent: APIClient, metric_snapshot: Snapshot
) -> None:
    trigger = unique_label("completed")
    flow_id = open_flow(agent, trigger_type=trigger)["id"]
    add_step(agent, flow_id)
    before = metric_snapshot()

    assert close(agent, flow_id, COMPLETE).status_code == 200

    after = metric_snapshot()
    safe = str(ReasoningFlow.objects.get(pk=flow_id).patient_safe_summary).lower()
    attributes = {"trigger_type": trigger, "outcome_type": "recommendation_delivered", "patient_safe_summary": safe}
    assert delta(before, after, "reasoning.flow.completed", **attributes) == 1
    assert after.value("reasoning.flow.aborted", trigger_type=trigger) == 0


def test_aborting_a_flow_counts_flow_aborted_not_completed(agent: APIClient, metric_snapshot: Snapshot) -> None:
    trigger = unique_label("aborted")
    flow_id = open_flow(agent, trigger_type=trigger)["id"]
    before = metric_snapshot()

    assert close(agent, flow_id, ABORT).status_code == 200

    after = metric_snapshot()
    assert delta(before, after, "reasoning.flow.aborted", trigger_type=trigger) == 1
    assert after.value("reasoning.flow.completed", trigger_type=trigger) == 0


def test_second_close_is_not_counted(agent: APIClient, metric_snapshot: Snapshot) -> None:
    trigger = unique_label("twice")
    flow_id = open_flow(agent, trigger_type=trigger)["id"]
    assert close(agent, flow_id, COMPLETE).status_code == 200
    before = metric_snapshot()

    assert close(agent, flow_id, COMPLETE).status_code == 409
    assert close(agent, flow_id, ABORT).status_code == 409

    after = metric_snapshot()
    for name in ("reasoning.flow.completed", "reasoning.flow.aborted", "reasoning.flow.latency_ms"):
        assert delta(before, after, name, trigger_type=trigger) == 0


@pytest.mark.parametrize(("steps", "bucket"), [(0, "0"), (2, "1-3"), (5, "4-7"), (8, "8-15"), (16, "16+")])
def test_close_records_latency_with_step_count_bucket(
    agent: APIClient, metric_snapshot: Snapshot, steps: int, bucket: str
) -> None:
    trigger = unique_label("latency")
    with time_machine.travel(T0, tick=False):
        flow_id = open_flow(agent, trigger_type=trigger)["id"]
        for _ in range(steps):
            add_step(agent, flow_id)
    before = metric_snapshot()

    with time_machine.travel(T0 + timedelta(seconds=3), tick=False):
        assert close(agent, flow_id, COMPLETE).status_code == 200

    after = metric_snapshot()
    attributes = {"trigger_type": trigger, "outcome_type": "recommendation_delivered", "step_count_bucket": bucket}
    assert delta(before, after, "reasoning.flow.latency_ms", **attributes) == 1
    assert delta(before, after, "reasoning.flow.latency_ms", trigger_type=trigger) == 1


def test_aborted_flow_also_records_latency(agent: APIClient, metric_snapshot: Snapshot) -> None:
    trigger = unique_label("abort_latency")
    flow_id = open_flow(agent, trigger_type=trigger)["id"]
    add_step(agent, flow_id)
    before = metric_snapshot()

    assert close(agent, flow_id, ABORT).status_code == 200

    after = metric_snapshot()
    attributes = {"trigger_type": trigger, "step_count_bucket": "1-3"}
    assert delta(before, after, "reasoning.flow.latency_ms", **attributes) == 1
