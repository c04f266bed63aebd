"""Monthly partitions of reasoning_step (core.partitions, migration reasoning.0017) and the job
that makes them ahead (reasoning.jobs.create_partitions_ahead)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import IntegrityError, connection, transaction

from audit.models import AuditEvent
from core.bulk import insert_rows
from core.errors import Conflict
from core.partitions import add_months, month_start, partition_name, partition_names
from reasoning.jobs import create_partitions_ahead
from reasoning.models import ReasoningFlow, ReasoningStep
from reasoning.recording import services
from tests.factories import make_flow

pytestmark = pytest.mark.django_db(transaction=True)

LONG_AGO = datetime(2024, 5, 17, 9, 30, tzinfo=UTC)


def step_partitions() -> list[str]:
    with connection.cursor() as cursor:
        return partition_names(cursor, "reasoning_step")


def partition_of(step_id: uuid.UUID) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM reasoning_step WHERE id = %s", [step_id])
        row = cursor.fetchone()
    assert row is not None
    return str(row[0])


def test_the_migration_leaves_this_month_and_three_ahead_plus_a_default() -> None:
    this_month = month_start(datetime.now(UTC))
    names = step_partitions()
    for n in range(4):
        assert partition_name("reasoning_step", add_months(this_month, n)) in names
    assert names[-1] == "reasoning_step_default"


def test_a_step_is_stored_in_its_flows_month() -> None:
    flow_id = make_flow(steps=["Retrieved guidelines"])
    step = ReasoningStep.objects.get(flow_id=flow_id)
    assert step.flow_created_at == step.flow.created_at
    assert partition_of(step.pk) == partition_name("reasoning_step", month_start(step.flow_created_at))


def test_the_job_moves_a_backdated_flows_steps_out_of_the_default_and_audits_it() -> None:
    with time_machine.travel(LONG_AGO, tick=False):
        flow_id = make_flow(steps=["Retrieved guidelines", "Compared the targets"])
    steps = list(ReasoningStep.objects.filter(flow_id=flow_id).order_by("position"))
    assert {partition_of(step.pk) for step in steps} == {"reasoning_step_default"}

    created = create_partitions_ahead()

    assert created == ["reasoning_step_2024_05"]
    assert {partition_of(step.pk) for step in steps} == {"reasoning_step_2024_05"}
    assert [s.summary_text for s in ReasoningStep.objects.filter(flow_id=flow_id).order_by("position")] == [
        "Retrieved guidelines",
        "Compared the targets",
    ]
    made = AuditEvent.objects.filter(action="database.partition.created")
    assert [(e.target_type, e.target_id, e.actor) for e in made] == [
        ("partition", "reasoning_step_2024_05", "system:partitions")
    ]
    completed = AuditEvent.objects.get(action="memory.job.partitions_ahead.completed")
    assert completed.payload == {"created": 1}
    # Nothing left to do: a second run makes nothing.
    assert create_partitions_ahead() == []


def test_a_step_id_stays_unique_across_months() -> None:
    flow_now = make_flow(steps=[])
    with time_machine.travel(LONG_AGO, tick=False):
        flow_then = make_flow(steps=["Retrieved guidelines"])
    create_partitions_ahead()
    taken = ReasoningStep.objects.get(flow_id=flow_then)
    now_flow = ReasoningFlow.objects.get(pk=flow_now)
    assert month_start(now_flow.created_at) != month_start(taken.flow_created_at)
    # The service refuses the id (it reads every partition first) ...
    with pytest.raises(Conflict):
        services.add_steps(
            flow_now, [{"id": str(taken.pk), "kind": "retrieval", "agent": "a", "summary_text": "s"}], actor="t"
        )
    # ... and so does the database, for a writer that skipped the read: a copy of the step in
    # another month's partition, same id.
    taken.flow_id, taken.flow_created_at, taken.position = flow_now, now_flow.created_at, 1
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows([taken])


def test_audit_events_are_partitioned_by_their_own_time_and_the_job_keeps_three_months_ahead() -> None:
    flow_id = make_flow(steps=["Retrieved guidelines"])
    this_month = month_start(datetime.now(UTC))
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tableoid::regclass::text FROM audit_event WHERE target_id = %s", [str(flow_id)])
        assert [row[0] for row in cursor.fetchall()] == [partition_name("audit_event", this_month)]
        names = partition_names(cursor, "audit_event")
    assert names == [partition_name("audit_event", add_months(this_month, n)) for n in range(4)]

    # A month later, the job adds the month now three ahead, for both tables.
    with time_machine.travel(add_months(this_month, 1), tick=False):
        created = create_partitions_ahead()

    ahead = add_months(this_month, 4)
    assert created == [partition_name("reasoning_step", ahead), partition_name("audit_event", ahead)]
    targets = AuditEvent.objects.filter(action="database.partition.created").values_list("target_id", flat=True)
    assert sorted(targets) == sorted(created)
