from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from reasoning.models import ReasoningFlow, ReasoningStep

pytestmark = pytest.mark.django_db


def test_load_demo_twice_writes_once() -> None:
    call_command("load_demo", stdout=StringIO())
    counts = (ReasoningFlow.objects.count(), ReasoningStep.objects.count(), AuditEvent.objects.count())
    out = StringIO()
    call_command("load_demo", stdout=out)
    assert (ReasoningFlow.objects.count(), ReasoningStep.objects.count(), AuditEvent.objects.count()) == counts
    assert "(0 new)" in out.getvalue()


def test_load_demo_shows_every_flow_state_and_a_merge_step() -> None:
    call_command("load_demo", stdout=StringIO())
    states = set(ReasoningFlow.objects.values_list("flow_state", flat=True))
    assert states == {"active", "completed", "aborted"}
    assert ReasoningStep.objects.exclude(extra_parent_ids=[]).exists()


def test_load_demo_prints_credentials_and_a_decision_the_patient_can_read() -> None:
    out = StringIO()
    call_command("load_demo", stdout=out)
    text = out.getvalue()
    assert "patient / patient-demo-2026" in text
    decision_id = text.rsplit("/dashboard/reasoning/", 1)[1].strip()
    flow = ReasoningFlow.objects.get(pk=decision_id)
    assert flow.patient_safe_summary is True
    assert flow.patient is not None and flow.patient.reasoning_read_consent


def test_load_demo_includes_flows_that_failed_the_summary_guard() -> None:
    call_command("load_demo", stdout=StringIO())
    assert ReasoningFlow.objects.filter(patient_safe_summary=False, summary_guard_rule="medication_dose").exists()
