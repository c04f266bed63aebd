"""Retention by partition (reasoning.jobs.drop_expired_partitions): whole months of steps and
of audit events detached and dropped, a patient's legal hold keeping their months, audit months
kept until a signed checkpoint covers them, and audit_verify after a drop."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from audit.canonical import canonical_bytes
from audit.chain import chain_all
from audit.checkpoints import sign_checkpoint
from audit.models import AuditDroppedPartition, AuditEvent
from audit.privileges import as_owner
from audit.verify import verify_chain
from core.partitions import create_month, drop, partition_name, partition_names
from patients.models import Patient
from patients.services import create_patient, set_legal_hold
from reasoning import rollups
from reasoning.dashboard.queries import operator_dashboard
from reasoning.jobs import create_partitions_ahead, drop_expired_partitions
from reasoning.models import ReasoningFlow, ReasoningStep, StepRollup
from reasoning.recording import services
from tests.factories import make_flow

pytestmark = pytest.mark.django_db(transaction=True)

LONG_AGO = datetime(2024, 5, 17, 9, 30, tzinfo=UTC)
OLD_MONTH = datetime(2024, 5, 1, tzinfo=UTC)
A_YEAR = 365
VERIFIER = Path(__file__).resolve().parents[1] / "tools" / "verify_audit_log.py"


@pytest.fixture(autouse=True)
def _drop_old_month() -> Iterator[None]:
    """The flush between these tests empties tables but keeps them: drop May 2024's partitions
    (made here, or kept by a test) so later tests see only the months the job makes."""
    yield
    with as_owner(), connection.cursor() as cursor:
        for table in ("reasoning_step", "audit_event"):
            name = partition_name(table, OLD_MONTH)
            if name in partition_names(cursor, table):
                drop(cursor, table, name)


def old_flow(patient: Patient | None = None) -> uuid.UUID:
    with time_machine.travel(LONG_AGO, tick=False):
        return make_flow(patient, steps=["Retrieved guidelines", "Compared the targets"])


def actions(action: str) -> list[tuple[str, dict[str, object]]]:
    return [(e.target_id, e.payload) for e in AuditEvent.objects.filter(action=action).order_by("id")]


def test_nothing_is_dropped_while_no_retention_is_set() -> None:
    flow_id = old_flow()
    create_partitions_ahead()

    assert drop_expired_partitions() == []

    assert ReasoningStep.objects.filter(flow_id=flow_id).count() == 2
    completed = AuditEvent.objects.get(action="memory.job.partitions_retention.completed")
    assert completed.payload == {"dropped": 0, "held": 0, "awaiting_checkpoint": 0}


@override_settings(REASONING_STEP_RETENTION_DAYS=A_YEAR)
def test_a_month_of_steps_past_retention_is_dropped_whole_and_its_ids_freed() -> None:
    old = old_flow()
    recent = make_flow(steps=["Retrieved guidelines"])
    create_partitions_ahead()
    old_step = ReasoningStep.objects.filter(flow_id=old).order_by("position").first()
    assert old_step is not None
    with connection.cursor() as cursor:
        assert "reasoning_step_2024_05" in partition_names(cursor, "reasoning_step")

    assert drop_expired_partitions() == ["reasoning_step_2024_05"]

    with connection.cursor() as cursor:
        assert "reasoning_step_2024_05" not in partition_names(cursor, "reasoning_step")
    assert not ReasoningStep.objects.filter(flow_id=old).exists()
    assert ReasoningStep.objects.filter(flow_id=recent).count() == 1
    # The flow itself (its outcome, its audit trail) stays; only its steps went.
    assert ReasoningFlow.objects.filter(pk=old).exists()
    assert actions("database.partition.dropped") == [("reasoning_step_2024_05", {"rows": 2})]
    # The registry let go of the dropped ids: one can be used again.
    reuse = make_flow(steps=[], close=False)
    services.add_steps(
        reuse, [{"id": str(old_step.pk), "kind": "retrieval", "agent": "a", "summary_text": "again"}], actor="t"
    )
    assert ReasoningStep.objects.get(pk=old_step.pk).flow_id == reuse
    # Nothing else is old enough: a second run drops nothing.
    assert drop_expired_partitions() == []


@override_settings(REASONING_STEP_RETENTION_DAYS=A_YEAR)
def test_a_dropped_month_of_steps_takes_its_usage_off_the_dashboard() -> None:
    call = {
        "kind": "llm_prompt",
        "agent": "researcher",
        "summary_text": "Asked",
        "model": "gpt-4o",
        "input_tokens": 100,
    }
    with time_machine.travel(LONG_AGO, tick=False):
        make_flow(steps=[call, call])
    create_partitions_ahead()
    rollups.refresh()
    may = (date(2024, 5, 1), date(2024, 5, 31))
    assert [(row.steps, row.input_tokens) for row in operator_dashboard(timezone.now(), *may).usage] == [(2, 200)]

    assert drop_expired_partitions() == ["reasoning_step_2024_05"]

    # Owed in the drop's transaction (the negation of the month's usage), before the job runs.
    assert operator_dashboard(timezone.now(), *may).usage == ()
    rollups.refresh()
    assert not StepRollup.objects.exists()
    assert operator_dashboard(timezone.now(), *may, direct_queries=True).usage == ()
    # The flows stay, and so do their counts.
    assert operator_dashboard(timezone.now(), *may).days[16].completed == 1


@override_settings(REASONING_STEP_RETENTION_DAYS=A_YEAR)
def test_a_legal_hold_keeps_the_month_of_the_patients_flows_until_it_is_lifted() -> None:
    patient = create_patient(username="held.patient", password="pw-123456789", actor="system:test")
    flow_id = old_flow(patient)
    create_partitions_ahead()
    assert set_legal_hold(patient.pk, held=True, actor="user:counsel")

    assert drop_expired_partitions() == []

    assert ReasoningStep.objects.filter(flow_id=flow_id).count() == 2
    assert actions("database.partition.drop_blocked_by_legal_hold") == [
        ("reasoning_step_2024_05", {"held_patients": 1})
    ]
    assert actions("patient.legal_hold.changed") == [(str(patient.pk), {"legal_hold": True})]

    out = StringIO()
    call_command("legal_hold", str(patient.pk), "--off", stdout=out)
    assert "is not under legal hold" in out.getvalue()
    assert drop_expired_partitions() == ["reasoning_step_2024_05"]
    assert not ReasoningStep.objects.filter(flow_id=flow_id).exists()


# --- audit events -----------------------------------------------------------------------------


def write_dated_event(at: datetime, *, action: str, target_id: str, payload: dict[str, int]) -> int:
    """One event dated ``at`` (not queued). The database stamps every event now, so it is
    written with the stamp trigger off, as a restored archive would be."""
    canonical = canonical_bytes(
        action=action, actor="token:agent", target_type="test.item", target_id=target_id, payload=payload, created_at=at
    )
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_stamp")
        try:
            cursor.execute(
                "INSERT INTO audit_event (action, actor, target_type, target_id, payload, created_at, canonical)"
                " VALUES (%s, 'token:agent', 'test.item', %s, %s::jsonb, %s, %s) RETURNING id",
                [action, target_id, json.dumps(payload), at, canonical],
            )
            return int(cursor.fetchone()[0])
        finally:
            cursor.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_stamp")


@pytest.fixture
def old_events() -> Iterator[list[int]]:
    """Three events dated in May 2024, chained first (positions 1-3)."""
    with connection.cursor() as cursor:
        create_month(cursor, "audit_event", OLD_MONTH)
    ids = []
    for n in range(3):
        ids.append(
            write_dated_event(
                LONG_AGO + timedelta(minutes=n), action="reasoning.flow.started", target_id=str(n), payload={"n": n}
            )
        )
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO audit_pending (event_id) VALUES (%s)", [ids[-1]])
    assert chain_all() == 3
    yield ids


@override_settings(AUDIT_RETENTION_DAYS=A_YEAR)
def test_a_month_of_audit_events_waits_for_a_checkpoint_then_is_dropped_and_the_trail_still_verifies(
    old_events: list[int],
) -> None:
    make_flow(steps=["Retrieved guidelines"])  # newer events, chained after the old ones
    chain_all()

    assert drop_expired_partitions() == []
    assert actions("database.partition.drop_awaiting_checkpoint") == [
        ("audit_event_2024_05", {"events": 3, "unlinked": 0})
    ]
    assert AuditEvent.objects.filter(pk__in=old_events).count() == 3

    chain_all()
    signed = sign_checkpoint().checkpoint
    assert signed is not None
    assert drop_expired_partitions() == ["audit_event_2024_05"]

    assert not AuditEvent.objects.filter(pk__in=old_events).exists()
    (dropped,) = AuditDroppedPartition.objects.all()
    assert (dropped.name, dropped.events, dropped.first_position, dropped.last_position) == (
        "audit_event_2024_05",
        3,
        1,
        3,
    )
    assert dropped.checkpoint_id == signed.id
    assert actions("database.partition.dropped")[-1][1] == {
        "rows": 3,
        "last_position": 3,
        "checkpoint_id": signed.id,
    }
    # The walk starts after the dropped positions; the checkpoint vouches for them.
    chain_all()
    result = verify_chain()
    assert result.ok, result.broken
    assert result.start == 3
    out = StringIO()
    call_command("audit_verify", "--no-progress", stdout=out)
    assert f"audit chain intact: {result.linked - 3} links verified after position 3" in out.getvalue()


@override_settings(AUDIT_RETENTION_DAYS=A_YEAR)
def test_an_offline_export_after_an_audit_drop_starts_from_the_tree_edge_and_the_standalone_verifier_accepts_it(
    old_events: list[int], tmp_path: Path, make_token: Callable[..., str]
) -> None:
    make_flow(steps=["Retrieved guidelines"])
    chain_all()
    sign_checkpoint()
    assert drop_expired_partitions() == ["audit_event_2024_05"]

    out = StringIO()
    call_command("audit_export", "--out", str(tmp_path / "audit"), "--no-progress", stdout=out, stderr=StringIO())

    manifest = json.loads((tmp_path / "audit" / "manifest.json").read_text())
    assert manifest["format"] == "rft-audit-export/3"
    assert manifest["start"] == 3
    size = manifest["tree_size"]
    assert [level for level, _ in manifest["start_edge"]] == [1, 0]  # 3 = 2 + 1
    assert f"exported {size - 3} events (positions 4-{size}; 1-3 were dropped by retention" in out.getvalue()
    lines = (tmp_path / "audit" / "events.txt").read_bytes().splitlines()
    assert len(lines) == size - 3
    assert not any(line.split(b" ", 1)[0] in {str(i).encode() for i in old_events} for line in lines)

    key = (tmp_path / "audit" / "public-keys.txt").read_text().splitlines()[0]
    verifier = [sys.executable, "-I", str(VERIFIER), "--key", key, "--dir", str(tmp_path / "audit")]
    result = subprocess.run(verifier, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert f"audit log verified: {size} events" in result.stdout
    assert "the first 3 were dropped by retention" in result.stdout

    # The edge is bound by the signed root: a forged one fails.
    forged = [[level, base64.b64encode(bytes(32)).decode()] for level, _ in manifest["start_edge"]]
    (tmp_path / "audit" / "manifest.json").write_text(json.dumps({**manifest, "start_edge": forged}))
    result = subprocess.run(verifier, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1
    assert "does not match" in result.stderr

    # Online, the events route says where the dropped prefix ends and serves the same edge.
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token('audit.read', name='auditor')}")
    page = client.get("/audit/v1/events?start=1&limit=5").json()
    assert page["dropped_through"] == 3
    assert page["start_edge"] == manifest["start_edge"]
    assert [(e["position"], e["canonical"]) for e in page["events"][:3]] == [(1, None), (2, None), (3, None)]
    assert page["events"][3]["canonical"] is not None


@override_settings(AUDIT_RETENTION_DAYS=A_YEAR)
def test_an_audit_month_with_an_unchained_event_is_kept(old_events: list[int]) -> None:
    sign_checkpoint()
    write_dated_event(LONG_AGO + timedelta(hours=1), action="x.late", target_id="late", payload={})

    assert drop_expired_partitions() == []
    assert actions("database.partition.drop_awaiting_checkpoint") == [
        ("audit_event_2024_05", {"events": 4, "unlinked": 1})
    ]
