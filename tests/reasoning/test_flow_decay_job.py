"""The flow decay job (abort flows active > 24 h) and the idempotent schedule setup."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django_q.models import Schedule
from rest_framework.test import APIClient

from audit.models import AuditEvent
from reasoning.jobs import decay_stale_flows
from reasoning.management.commands.setup_schedules import collect_schedules
from reasoning.models import ReasoningFlow
from tests.conftest import events
from tests.factories import open_flow

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
ACTOR = "system:reasoning_flow_decay"


def open_flow_at(client: APIClient, clock: time_machine.Coordinates, age: timedelta, **fields: Any) -> str:
    """Open a flow ``age`` before NOW, leaving the clock at NOW."""
    clock.move_to(NOW - age)
    flow_id: str = open_flow(client, **fields)["id"]
    clock.move_to(NOW)
    return flow_id


def state_of(flow_id: str) -> ReasoningFlow:
    return ReasoningFlow.objects.get(pk=flow_id)


def test_flow_active_for_25_hours_is_aborted_with_reason_timeout(
    agent: APIClient, clock: time_machine.Coordinates
) -> None:
    flow_id = open_flow_at(agent, clock, timedelta(hours=25))

    aborted = decay_stale_flows()

    assert aborted == 1
    flow = state_of(flow_id)
    assert flow.flow_state == ReasoningFlow.State.ABORTED
    assert flow.abort_reason == "timeout"
    assert flow.closed_at == NOW


def test_flow_active_for_23_hours_stays_active(agent: APIClient, clock: time_machine.Coordinates) -> None:
    flow_id = open_flow_at(agent, clock, timedelta(hours=23))

    assert decay_stale_flows() == 0

    flow = state_of(flow_id)
    assert flow.flow_state == ReasoningFlow.State.ACTIVE
    assert flow.closed_at is None


def test_decayed_flow_refuses_further_steps(agent: APIClient, clock: time_machine.Coordinates) -> None:
    flow_id = open_flow_at(agent, clock, timedelta(hours=25))
    decay_stale_flows()

    response = agent.post(
        f"/api/reasoning/flows/{flow_id}/steps",
        {"kind": "retrieval", "agent": "researcher", "summary_text": "Late step"},
        format="json",
    )

    assert response.status_code == 409


def test_decay_command_aborts_stale_flows(agent: APIClient, clock: time_machine.Coordinates) -> None:
    stale = open_flow_at(agent, clock, timedelta(hours=25))
    fresh = open_flow_at(agent, clock, timedelta(hours=23))
    out = StringIO()

    call_command("decay_flows", stdout=out)

    assert state_of(stale).flow_state == ReasoningFlow.State.ABORTED
    assert state_of(stale).abort_reason == "timeout"
    assert state_of(fresh).flow_state == ReasoningFlow.State.ACTIVE
    assert "aborted 1 stale flow" in out.getvalue()


def test_already_closed_old_flows_are_left_untouched(agent: APIClient, clock: time_machine.Coordinates) -> None:
    completed = open_flow_at(agent, clock, timedelta(hours=30))
    aborted = open_flow_at(agent, clock, timedelta(hours=30))
    clock.move_to(NOW - timedelta(hours=29))
    agent.patch(
        f"/api/reasoning/flows/{completed}",
        {"flow_state": "completed", "outcome_type": "claim_created"},
        format="json",
    )
    agent.patch(
        f"/api/reasoning/flows/{aborted}", {"flow_state": "aborted", "abort_reason": "tool_error"}, format="json"
    )
    clock.move_to(NOW)
    before = {pk: state_of(pk) for pk in (completed, aborted)}

    assert decay_stale_flows() == 0

    for pk, old in before.items():
        now = state_of(pk)
        assert (now.flow_state, now.abort_reason, now.closed_at, now.outcome_type) == (
            old.flow_state,
            old.abort_reason,
            old.closed_at,
            old.outcome_type,
        )
    assert [e for e in events("reasoning.flow.aborted") if e.actor == ACTOR] == []


def test_decay_audits_its_lifecycle_and_one_abort_per_flow(agent: APIClient, clock: time_machine.Coordinates) -> None:
    stale = {open_flow_at(agent, clock, timedelta(hours=hours)) for hours in (25, 48)}
    open_flow_at(agent, clock, timedelta(hours=1))
    first_event = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0

    decay_stale_flows()

    job_events = list(AuditEvent.objects.filter(id__gt=first_event).order_by("id"))
    # Each abort commits with the pathway extractor's skip of that flow (an aborted flow never seeds one).
    assert [e.action for e in job_events] == [
        "memory.job.reasoning_flow_decay.started",
        "reasoning.flow.aborted",
        "reasoning.pathway.skipped",
        "reasoning.flow.aborted",
        "reasoning.pathway.skipped",
        "memory.job.reasoning_flow_decay.completed",
    ]
    assert {e.actor for e in job_events if e.action != "reasoning.pathway.skipped"} == {ACTOR}
    assert [e.payload for e in job_events if e.action == "reasoning.pathway.skipped"] == [
        {"disqualifier": "not_completed"}
    ] * 2
    assert {e.target_id for e in job_events if e.action == "reasoning.flow.aborted"} == stale
    assert all(e.payload["timeout"] is True for e in job_events if e.action == "reasoning.flow.aborted")
    assert job_events[-1].payload["aborted"] == 2


def test_second_run_aborts_nothing(agent: APIClient, clock: time_machine.Coordinates) -> None:
    open_flow_at(agent, clock, timedelta(hours=25))
    assert decay_stale_flows() == 1
    aborts_after_first_run = len(events("reasoning.flow.aborted"))

    assert decay_stale_flows() == 0

    assert len(events("reasoning.flow.aborted")) == aborts_after_first_run
    assert len(events("memory.job.reasoning_flow_decay.started")) == 2
    assert events("memory.job.reasoning_flow_decay.completed")[-1].payload["aborted"] == 0


def test_decay_works_through_more_flows_than_one_batch(agent: APIClient, clock: time_machine.Coordinates) -> None:
    stale = [open_flow_at(agent, clock, timedelta(hours=25 + n)) for n in range(5)]

    assert decay_stale_flows(batch_size=2) == 5

    assert {state_of(pk).flow_state for pk in stale} == {ReasoningFlow.State.ABORTED}


# --- setup_schedules ------------------------------------------------------------------


def test_setup_schedules_twice_leaves_one_schedule_per_name() -> None:
    call_command("setup_schedules", stdout=StringIO())
    call_command("setup_schedules", stdout=StringIO())

    names = [spec["name"] for spec in collect_schedules() if spec.get("enabled", True)]
    assert "reasoning.flow_decay" in names
    assert "audit.chain_pending" in names
    for name in names:
        assert Schedule.objects.filter(name=name).count() == 1, name
    assert Schedule.objects.count() == len(set(names))


def test_flow_decay_is_scheduled_hourly() -> None:
    call_command("setup_schedules", stdout=StringIO())

    schedule = Schedule.objects.get(name="reasoning.flow_decay")
    assert schedule.func == "reasoning.jobs.decay_stale_flows"
    assert schedule.schedule_type == Schedule.HOURLY == "H"
    assert schedule.repeats == -1  # forever


def test_audit_chainer_is_scheduled() -> None:
    call_command("setup_schedules", stdout=StringIO())

    schedule = Schedule.objects.get(name="audit.chain_pending")
    assert schedule.func == "audit.jobs.run_chainer"
    assert schedule.repeats == -1


def test_setup_schedules_restores_an_edited_schedule() -> None:
    call_command("setup_schedules", stdout=StringIO())
    Schedule.objects.filter(name="reasoning.flow_decay").update(schedule_type=Schedule.DAILY, repeats=0)

    call_command("setup_schedules", stdout=StringIO())

    schedule = Schedule.objects.get(name="reasoning.flow_decay")
    assert schedule.schedule_type == Schedule.HOURLY
    assert schedule.repeats == -1
