from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.management import call_command
from django.db.models import Q
from django.utils import timezone

from audit.models import AuditEvent
from patients.models import Patient
from reasoning.dashboard.queries import operator_dashboard
from reasoning.management.demo_flows import PRIVATE_MODEL
from reasoning.management.demo_sessions import SESSION_AGENTS, SESSIONS_PER_AGENT, TURN_TRACE_ID, session_id
from reasoning.models import DriftReport, ReasoningFlow, ReasoningStep
from reasoning.outcomes.sessions import session_summaries
from reasoning.turns.graph import turn_edges
from tests.factories import logged_in
from tests.html import doc

pytestmark = pytest.mark.django_db


def test_load_demo_twice_writes_once_even_days_later() -> None:
    call_command("load_demo", stdout=StringIO())
    counts = (ReasoningFlow.objects.count(), ReasoningStep.objects.count(), AuditEvent.objects.count())
    out = StringIO()
    # The flows are dated back from the hour of the run: a later run finds them by their fixed ids.
    with time_machine.travel(timezone.now() + timedelta(days=2, hours=5)):
        call_command("load_demo", stdout=out)
    assert (ReasoningFlow.objects.count(), ReasoningStep.objects.count(), AuditEvent.objects.count()) == counts
    assert "(0 new)" in out.getvalue()


def test_load_demo_spreads_the_flows_over_the_last_30_days() -> None:
    call_command("load_demo", stdout=StringIO())
    now = timezone.now()

    flows = ReasoningFlow.objects.all()
    assert not flows.filter(Q(created_at__gt=now) | Q(closed_at__gt=now) | Q(created_at__lt=now - timedelta(days=30)))
    days = {timezone.localdate(created) for created in flows.values_list("created_at", flat=True)}
    assert len(days) >= 20
    # Steps are dated within their flow, so narratives and charts put them on its day.
    assert not ReasoningStep.objects.filter(created_at__lt=now - timedelta(days=30))
    assert ReasoningStep.objects.filter(created_at__lt=now - timedelta(days=20)).exists()
    # The dashboard's daily chart has bars on most days, and not all of one height or duration.
    chart = operator_dashboard(now).days
    assert sum(day.total > 0 for day in chart) >= 20
    assert len({day.total for day in chart}) >= 5
    assert len({day.p50 for day in chart if day.p50 is not None}) >= 10
    # Still-active flows are young: the 24-hour timeout would abort older ones.
    assert not flows.filter(flow_state="active", created_at__lt=now - timedelta(hours=24))


def test_load_demo_has_agents_failures_aborts_and_models_with_tokens() -> None:
    call_command("load_demo", stdout=StringIO())

    agents = set(ReasoningFlow.objects.values_list("agent", flat=True))
    assert {"researcher", "critic", "correlator"} < agents and len(agents) >= 4
    failed = ReasoningStep.objects.filter(outcome="error")
    assert failed.exists() and not failed.filter(error_type="").exists()
    assert len(set(failed.values_list("error_type", flat=True))) >= 3
    aborted = ReasoningFlow.objects.filter(flow_state="aborted")
    assert {"tool_error", "timeout"} <= set(aborted.values_list("abort_reason", flat=True))
    calls = ReasoningStep.objects.filter(input_tokens__gt=0, output_tokens__gt=0)
    models = set(calls.values_list("model", flat=True))
    assert {"gpt-4o", "gpt-4o-mini", "claude-3-5-sonnet-20241022", "o3-mini", PRIVATE_MODEL} <= models
    assert calls.filter(cached_tokens__gt=0).exists() and calls.filter(reasoning_tokens__gt=0).exists()
    assert ReasoningFlow.objects.filter(outcome_type="escalated").exists()


def test_load_demo_gives_the_consenting_patient_decisions_that_differ() -> None:
    call_command("load_demo", stdout=StringIO())
    client = logged_in(Patient.objects.get(user__username="patient"))

    cards = doc(client.get("/dashboard/profile")).select("li", "decision")

    assert len(cards) >= 10
    summaries = [card.select("p")[0].text.strip() for card in cards]
    assert len(set(summaries)) >= len(cards) // 2
    assert len({card.one("time").attrs["datetime"][:10] for card in cards}) >= 10
    assert len({card.one("span", "decision-agent").text for card in cards}) >= 3
    assert {card.attrs["data-status"] for card in cards} == {"ready", "in_progress", "stopped", "ask_care_team"}


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


def test_load_demo_records_sessions_with_outcomes_for_the_three_agents() -> None:
    call_command("load_demo", stdout=StringIO())
    summaries = session_summaries(
        [session_id(agent, number) for agent in SESSION_AGENTS for number in range(1, SESSIONS_PER_AGENT + 1)]
    )
    assert len(summaries) == 3 * SESSIONS_PER_AGENT >= 3 * 6
    for summary in summaries.values():
        assert summary.with_outcome == summary.total_decisions  # every decision has its outcome
    outcomes = set(ReasoningFlow.objects.exclude(session_id="").values_list("outcome_correct", flat=True))
    assert outcomes == {True, False, None}
    assert not ReasoningFlow.objects.exclude(session_id="").filter(outcome_recorded_at__isnull=True).exists()


def test_load_demo_makes_the_correlators_latest_session_drift() -> None:
    out = StringIO()
    call_command("load_demo", stdout=out)
    latest = DriftReport.objects.get(agent="correlator", session_id=session_id("correlator", SESSIONS_PER_AGENT))
    assert latest.baseline_sessions == SESSIONS_PER_AGENT - 1
    assert latest.level in {"alert", "investigate"}
    for agent in ("researcher", "critic"):
        report = DriftReport.objects.get(agent=agent, session_id=session_id(agent, SESSIONS_PER_AGENT))
        assert report.level in {"normal", "watch"}
    assert "drifting agent: correlator" in out.getvalue()


def test_load_demo_makes_a_turn_of_three_agents_linked_across_flows() -> None:
    out = StringIO()
    call_command("load_demo", stdout=out)
    assert f"trace id {TURN_TRACE_ID}" in out.getvalue()
    flows = list(ReasoningFlow.objects.filter(trace_id=TURN_TRACE_ID).order_by("created_at"))
    assert len(flows) >= 3
    assert len({flow.agent for flow in flows}) >= 2
    steps = list(ReasoningStep.objects.filter(flow__trace_id=TURN_TRACE_ID).order_by("created_at", "position"))
    cross = [edge for edge in turn_edges(flows, steps) if edge.kind == "cross_flow"]
    assert {edge.reason for edge in cross} == {"trigger_ref"}
    assert len(cross) == 2


def test_load_demo_twice_adds_no_session_outcome_or_drift_report() -> None:
    call_command("load_demo", stdout=StringIO())
    counts = (
        DriftReport.objects.count(),
        ReasoningFlow.objects.filter(outcome_recorded_at__isnull=False).count(),
        AuditEvent.objects.count(),
    )
    out = StringIO()
    call_command("load_demo", stdout=out)
    assert (
        DriftReport.objects.count(),
        ReasoningFlow.objects.filter(outcome_recorded_at__isnull=False).count(),
        AuditEvent.objects.count(),
    ) == counts
    assert "(0 new flows, 0 new outcomes, 0 new drift reports)" in out.getvalue()


def test_load_demo_leaves_the_logins_for_make_runs_box(settings: Any, tmp_path: Path) -> None:
    settings.DATA_DIR = tmp_path
    call_command("load_demo", stdout=StringIO())

    logins = (tmp_path / "demo_logins.txt").read_text()
    assert "operator  operator / operator-demo-2026   -> the dashboard" in logins
    assert "patient   patient / patient-demo-2026   -> their decision: /dashboard/reasoning/" in logins
    assert f"/dashboard/admin/reasoning/turns/{TURN_TRACE_ID}" in logins
