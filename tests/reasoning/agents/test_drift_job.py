"""The drift job (reasoning.jobs.compute_drift_reports) and ``manage.py reasoning_drift``, against
Postgres: levels for planted sessions, the insufficient baseline, what counts as a completed
session, one read pass whatever the number of sessions, the audit trail and the schedule."""

from __future__ import annotations

import json
import uuid
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from pytest_django.fixtures import Settings

from audit.models import AuditEvent
from reasoning.agents.drift_queries import ESCALATED_OUTCOME, ESCALATION_STEP_KIND
from reasoning.jobs import compute_drift_reports
from reasoning.management.commands.setup_schedules import collect_schedules
from reasoning.models import DriftReport
from reasoning.outcomes import services as outcomes_services
from reasoning.recording import services as recording_services

pytestmark = pytest.mark.django_db

ACTOR = "system:test"


def session(
    agent: str,
    session_id: str,
    *,
    decisions: int = 8,
    confidence: float = 0.75,
    escalations: int = 1,
    correct: int = 6,
    incorrect: int = 2,
    trigger_types: tuple[str, ...] = ("user_question",),
    close: bool = True,
) -> list[uuid.UUID]:
    """A session of ``decisions`` flows of ``agent``: the first ``escalations`` escalated
    (alternately by outcome type and by an escalation step), then ``correct`` right and
    ``incorrect`` wrong outcomes, the rest unjudged. Trigger types cycle through ``trigger_types``."""
    ids = []
    for n in range(decisions):
        escalated = n < escalations
        by_step = escalated and n % 2 == 1
        flow, _ = recording_services.start_flow(
            {
                "trigger_type": trigger_types[n % len(trigger_types)],
                "agent": agent,
                "session_id": session_id,
                "trace_id": f"{session_id}-{n}",
            },
            actor=ACTOR,
        )
        step = {
            "kind": ESCALATION_STEP_KIND if by_step else "retrieval",
            "agent": agent,
            "summary_text": "Weighed the guideline",
            "confidence": confidence,
        }
        recording_services.add_steps(flow.pk, [step], actor=ACTOR)
        ids.append(flow.pk)
        if not close:
            continue
        recording_services.close_flow(
            flow.pk,
            state="completed",
            actor=ACTOR,
            outcome_type=ESCALATED_OUTCOME if escalated and not by_step else "recommendation_delivered",
            outcome_summary="Suggested a follow-up visit",
        )
        if n < correct + incorrect:
            outcomes_services.record_outcome(flow.pk, "Follow-up visit booked", n < correct, actor=ACTOR)
    return ids


def baseline(agent: str, sessions: int = 6, prefix: str = "base", **fields: Any) -> None:
    """``sessions`` alike sessions: 8 decisions, 0.75 confident, 1 escalation, 6 of 8 right."""
    for n in range(sessions):
        session(agent, f"{agent}-{prefix}-{n}", **fields)


def levels(report: DriftReport) -> dict[str, str]:
    return {name: signal["level"] for name, signal in report.signals.items()}


def report_of(agent: str, session_id: str) -> DriftReport:
    return DriftReport.objects.get(agent=agent, session_id=session_id)


# --- Levels ----------------------------------------------------------------------------------


def test_half_the_decisions_with_doubled_escalations_is_alert_and_investigate() -> None:
    baseline("critic")
    # 4 decisions (half of 8), 1 escalated (0.25, double 0.125), 3 of 4 right (0.75, as usual).
    session("critic", "critic-new", decisions=4, escalations=1, correct=3, incorrect=1)

    compute_drift_reports()

    report = report_of("critic", "critic-new")
    assert report.baseline_sessions == 6
    assert report.decisions == 4
    assert levels(report) == {
        "confidence": "normal",
        "decisions": "alert",
        "escalation_rate": "investigate",
        "accuracy": "normal",
        "decision_mix": "normal",
    }
    assert report.level == "investigate"
    assert report.signals["decisions"] == {"value": 4.0, "baseline": 8.0, "level": "alert"}
    assert report.signals["escalation_rate"] == {"value": 0.25, "baseline": 0.125, "level": "investigate"}
    assert report.signals["accuracy"] == {"value": 0.75, "baseline": 0.75, "level": "normal"}


def test_lower_confidence_and_a_new_decision_type_are_alert_and_investigate() -> None:
    baseline("critic")
    # 0.75 -> 0.6: a relative drop of 0.2 (alert); half the decisions of a type never seen.
    session("critic", "critic-new", confidence=0.6, trigger_types=("user_question", "refill_request"))

    compute_drift_reports()

    report = report_of("critic", "critic-new")
    assert levels(report)["confidence"] == "alert"
    assert report.signals["confidence"]["value"] == pytest.approx(0.6)
    assert report.signals["decision_mix"]["baseline"] == 0.0
    assert report.signals["decision_mix"]["level"] == "investigate"
    assert levels(report)["decisions"] == "normal"


def test_a_session_like_its_baseline_is_normal() -> None:
    baseline("critic")
    session("critic", "critic-new")

    compute_drift_reports()

    report = report_of("critic", "critic-new")
    assert set(levels(report).values()) == {"normal"}
    assert report.level == "normal"


def test_fewer_than_five_earlier_sessions_is_insufficient_baseline_for_every_signal() -> None:
    baseline("critic", sessions=5)
    # Wildly different, but only 5 earlier sessions: the sixth is the first one judged.
    session("critic", "critic-new", decisions=2, escalations=2, confidence=0.1)

    compute_drift_reports()

    reports = DriftReport.objects.filter(agent="critic").order_by("session_ended_at")
    assert [r.baseline_sessions for r in reports] == [0, 1, 2, 3, 4, 5]
    for report in reports[:5]:
        assert report.level == "insufficient_baseline"
        assert set(levels(report).values()) == {"insufficient_baseline"}
    assert reports[5].level == "investigate"


def test_baseline_is_per_agent() -> None:
    baseline("critic")
    # The researcher's first session is judged against no one else's history.
    session("researcher", "researcher-1", decisions=2)

    compute_drift_reports()

    assert report_of("researcher", "researcher-1").level == "insufficient_baseline"


def test_baseline_takes_the_last_n_sessions(settings: Settings) -> None:
    settings.DRIFT_BASELINE_SESSIONS = 5
    baseline("critic", sessions=3, prefix="old", decisions=16, escalations=2)
    baseline("critic", sessions=5)  # the 5 latest: 8 decisions each
    session("critic", "critic-new")

    compute_drift_reports(agent="critic")

    report = report_of("critic", "critic-new")
    assert report.baseline_sessions == 5
    assert report.signals["decisions"]["baseline"] == 8.0


# --- Completed sessions ------------------------------------------------------------------------


def test_a_session_with_an_active_flow_is_neither_judged_nor_in_a_baseline() -> None:
    baseline("critic", sessions=5)
    session("critic", "critic-open", decisions=2, close=False)
    session("critic", "critic-new")

    compute_drift_reports()

    assert not DriftReport.objects.filter(session_id="critic-open").exists()
    assert report_of("critic", "critic-new").baseline_sessions == 5


def test_flows_without_an_agent_or_a_session_are_in_no_session() -> None:
    flow, _ = recording_services.start_flow({"trigger_type": "user_question", "session_id": "s-x"}, actor=ACTOR)
    recording_services.close_flow(flow.pk, state="aborted", actor=ACTOR, abort_reason="tool_error")
    flow, _ = recording_services.start_flow({"trigger_type": "user_question", "agent": "critic"}, actor=ACTOR)
    recording_services.close_flow(flow.pk, state="aborted", actor=ACTOR, abort_reason="tool_error")

    assert compute_drift_reports() == []


def test_an_aborted_flow_counts_as_a_closed_decision() -> None:
    baseline("critic", sessions=5)
    (flow_id,) = session("critic", "critic-new", decisions=1, close=False)
    recording_services.close_flow(flow_id, state="aborted", actor=ACTOR, abort_reason="tool_error")

    compute_drift_reports()

    assert report_of("critic", "critic-new").decisions == 1


# --- Runs --------------------------------------------------------------------------------------


def test_a_second_run_judges_only_new_sessions_and_agent_recomputes_all() -> None:
    baseline("critic")
    assert len(compute_drift_reports()) == 6
    session("critic", "critic-new")

    assert [r.session_id for r in compute_drift_reports()] == ["critic-new"]
    assert compute_drift_reports() == []

    again = compute_drift_reports(agent="critic")
    assert len(again) == 7
    assert DriftReport.objects.count() == 7  # replaced, not appended


def test_reads_take_the_same_number_of_queries_whatever_the_number_of_sessions() -> None:
    def queries_for_a_run() -> list[str]:
        DriftReport.objects.all().delete()
        with CaptureQueriesContext(connection) as queries:
            compute_drift_reports()
        return [q["sql"] for q in queries.captured_queries]

    baseline("critic", sessions=6)
    few = queries_for_a_run()
    baseline("critic", sessions=6, prefix="more", decisions=2)
    many = queries_for_a_run()

    assert DriftReport.objects.count() == 12
    assert len(few) == len(many)
    # The session aggregates of every agent, in one statement; then the sessions already reported.
    assert sum("FROM reasoning_flow" in sql for sql in many) == 1
    assert sum('FROM "reasoning_drift_report"' in sql for sql in many) == 1


def test_each_stored_report_is_audited_with_levels_and_counts_only() -> None:
    baseline("critic")
    session("critic", "critic-new", decisions=4)

    compute_drift_reports()

    report = report_of("critic", "critic-new")
    events = AuditEvent.objects.filter(action="reasoning.drift.report_stored")
    assert events.count() == 7
    event = events.get(target_id=str(report.pk))
    assert event.actor == "system:reasoning_drift"
    assert event.payload == {
        "agent": "critic",
        "level": "investigate",
        "levels": levels(report),
        "baseline_sessions": 6,
        "decisions": 4,
    }
    assert "critic-new" not in json.dumps(event.payload)  # agents choose session ids freely
    run = list(
        AuditEvent.objects.filter(action__startswith="memory.job.reasoning_drift.").values_list("action", "payload")
    )
    assert [action for action, _ in run] == [
        "memory.job.reasoning_drift.started",
        "memory.job.reasoning_drift.completed",
    ]
    assert run[1][1]["sessions"] == 7
    assert run[1][1]["investigate"] == 1


def test_the_daily_schedule_is_registered() -> None:
    specs = {spec["name"]: spec for spec in collect_schedules()}

    assert specs["reasoning.drift"] == {
        "name": "reasoning.drift",
        "func": "reasoning.jobs.compute_drift_reports",
        "schedule_type": "D",
    }


# --- The command -------------------------------------------------------------------------------


def run(*args: str) -> str:
    out = StringIO()
    call_command("reasoning_drift", *args, stdout=out)
    return out.getvalue()


def test_command_prints_each_session_with_its_levels() -> None:
    baseline("critic", sessions=5)
    session("critic", "critic-new", decisions=4, escalations=0)

    lines = run().splitlines()

    assert lines[0].startswith("critic critic-base-0: insufficient_baseline (baseline 0 sessions;")
    assert lines[5] == (
        "critic critic-new: alert (baseline 5 sessions; confidence=normal decisions=alert "
        "escalation_rate=normal accuracy=normal decision_mix=normal)"
    )
    assert lines[-1] == "judged 6 session(s) of 1 agent(s)"


def test_command_json_for_one_agent_recomputes_its_sessions() -> None:
    baseline("critic", sessions=5)
    baseline("researcher", sessions=2)
    run()

    rows = json.loads(run("--agent", "critic", "--json"))

    assert [row["session_id"] for row in rows] == [f"critic-base-{n}" for n in range(5)]
    assert rows[0]["level"] == "insufficient_baseline"
    assert set(rows[0]["signals"]) == {"confidence", "decisions", "escalation_rate", "accuracy", "decision_mix"}
    assert rows[0]["signals"]["decisions"]["value"] == 8.0


def test_command_refuses_an_agent_that_is_not_a_label() -> None:
    with pytest.raises(CommandError, match="--agent"):
        run("--agent", "the critic")


def test_escalation_definition_is_the_sessions_summary_one() -> None:
    from reasoning.outcomes import sessions

    assert (ESCALATED_OUTCOME, ESCALATION_STEP_KIND) == (sessions.ESCALATED_OUTCOME, sessions.ESCALATION_STEP)
