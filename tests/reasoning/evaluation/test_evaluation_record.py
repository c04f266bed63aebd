"""``--record`` on reasoning_signature_check and reasoning_replay: the run is stored for the
evaluation page, with its counts per trigger type and its non-matching results, and audited."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from reasoning.evaluation import EXIT_FAILED, FIXTURES
from reasoning.models import EvaluationRun

pytestmark = pytest.mark.django_db


def test_a_recorded_signature_check_stores_its_counts_and_drifting_flows() -> None:
    with pytest.raises(CommandError) as failed:
        call_command(
            "reasoning_signature_check",
            "--input",
            str(FIXTURES / "sample-flows-drift.jsonl"),
            "--record",
            stdout=StringIO(),
        )

    assert failed.value.returncode == EXIT_FAILED  # recorded, and the gate still fails
    (run,) = EvaluationRun.objects.all()
    assert (run.kind, run.source, run.total, run.drifting, run.skipped, run.passed) == (
        "signature_check",
        "sample-flows-drift.jsonl",
        13,
        3,
        1,
        False,
    )
    assert run.drift_share == pytest.approx(0.25)
    assert sum(entry["total"] for entry in run.by_trigger_type.values()) == 13
    assert sorted(finding["status"] for finding in run.findings) == [
        "outcome_drift",
        "sequence_drift",
        "sequence_drift",
        "skipped",
    ]
    (event,) = AuditEvent.objects.filter(action="reasoning.evaluation.run_recorded")
    assert event.target_id == str(run.pk)
    assert event.payload == {"kind": "signature_check", "total": 13, "drifting": 3, "skipped": 1, "passed": False}


def test_a_recorded_replay_stores_every_case_by_trigger_type() -> None:
    call_command("reasoning_replay", "--record", stdout=StringIO())

    (run,) = EvaluationRun.objects.all()
    assert (run.kind, run.source, run.drifting, run.passed, run.findings) == ("replay", "stub", 0, True, [])
    assert run.total == sum(entry["total"] for entry in run.by_trigger_type.values()) >= 5
    assert set(run.by_trigger_type) == {"user_question", "claim_review", "correlation_request", "benchmark_case"}


def test_without_record_nothing_is_stored() -> None:
    call_command("reasoning_replay", stdout=StringIO())
    call_command("reasoning_signature_check", "--input", str(FIXTURES / "sample-flows-clean.jsonl"), stdout=StringIO())

    assert not EvaluationRun.objects.exists()
    assert not AuditEvent.objects.filter(action="reasoning.evaluation.run_recorded").exists()
