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
