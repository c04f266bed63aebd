"""Demo sessions, outcomes, drift and a multi-agent turn for ``load_demo`` (idempotent: fixed ids).

1. Seven sessions for each reference agent, four decisions each, every flow closed and its
   outcome recorded (correct, incorrect or unknown) through ``services.record_outcome``. The
   n-th sessions of the three agents fall on one day, four days apart: 27 days ago to 3 days
   ago (each written with its own times by ``demo_flows.write_flows``).
2. The correlator's latest session drifts: one decision instead of four, at a much lower
   confidence, so its drift report is ``investigate`` against a baseline of six sessions.
3. One turn (``TURN_TRACE_ID``), two hours ago, run by three agents: the critic's flow names the
   researcher's flow as its ``trigger_ref`` and the correlator's names the critic's, the
   turn view's cross-flow links.
4. Drift reports for the sessions that have none yet (``jobs.compute_drift_reports``); a
   second run finds every demo session reported and writes nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from reasoning.jobs import compute_drift_reports
from reasoning.management.demo_flows import AGENTS, Course, DemoFlow, build_steps, demo_id, write_flows
from reasoning.models import DriftReport, ReasoningFlow
from reasoning.outcomes.services import record_outcome

SESSION_AGENTS = ("researcher", "critic", "correlator")
SESSIONS_PER_AGENT = 7
DECISIONS_PER_SESSION = 4
DRIFTING_AGENT = "correlator"
TURN_TRACE_ID = "demo-turn-1"
_ACTOR = "system:demo"
# Hours before the session's day ends at which each agent starts its session.
_START_HOURS = {"researcher": 9.0, "critic": 7.0, "correlator": 5.0}


@dataclass(frozen=True)
class DemoSessions:
    sessions: int
    new_flows: int
    new_outcomes: int
    new_reports: int
    turn_trace_id: str
    drifting_agent: str
    drifting_level: str


def session_id(agent: str, number: int) -> str:
    return f"demo-session-{agent}-{number}"


def session_day(number: int) -> int:
    """How many days ago the ``number``-th sessions ran: 27, 23, … 3."""
    return 27 - 4 * (number - 1)


def _correct(number: int, decision: int) -> bool | None:
    """The outcome of a session's decision: the last unknown, the first wrong in every third
    session, else right (so the latest, seventh, session is as accurate as usual)."""
    if decision == DECISIONS_PER_SESSION - 1:
        return None
    return not (decision == 0 and number % 3 == 0)


def _flow(name: str, agent: str, topic_index: int, opened: datetime, *, confidence: float, **fields: str) -> DemoFlow:
    """A completed flow of ``agent`` whose every step has ``confidence``."""
    spec = AGENTS[agent]
    topic = spec.topics[topic_index % len(spec.topics)]
    rng = random.Random(name)
    steps, ended = build_steps(name, agent, topic, opened, rng, Course(confidence=(confidence, confidence)))
    create = {"trigger_type": spec.trigger_type, "agent": agent, "trigger_summary": topic.trigger, **fields}
    close = {
        "flow_state": "completed",
        "outcome_type": topic.outcome_type or spec.outcome_type,
        "outcome_summary": topic.outcome,
    }
    return DemoFlow(name, opened, create, steps, close, ended + timedelta(milliseconds=rng.randint(20, 300)))


def load_sessions_and_turn(anchor: datetime) -> DemoSessions:
    """Load the demo sessions, their outcomes, the drift reports and the turn (see the module),
    dated before ``anchor``."""
    flows: list[DemoFlow] = []
    outcomes: list[tuple[DemoFlow, bool | None]] = []
    wanted_sessions: list[str] = []
    for number in range(1, SESSIONS_PER_AGENT + 1):
        # Interleaved, as agents run side by side; each agent's sessions still end in number order.
        for agent in SESSION_AGENTS:
            drifting = agent == DRIFTING_AGENT and number == SESSIONS_PER_AGENT
            wanted_sessions.append(session_id(agent, number))
            start = anchor - timedelta(days=session_day(number), hours=_START_HOURS[agent])
            for decision in range(1 if drifting else DECISIONS_PER_SESSION):
                flow = _flow(
                    f"{session_id(agent, number)}-{decision}",
                    agent,
                    number + decision,
                    start + timedelta(minutes=25 * decision + (7 * number) % 11),
                    confidence=0.42 if drifting else round(0.9 - 0.02 * ((number + decision) % 3), 2),
                    trigger_ref=f"demo/{agent}/session-{number}/{decision}",
                    trace_id=f"demo-session-trace-{agent}-{number}-{decision}",
                    session_id=session_id(agent, number),
                )
                flows.append(flow)
                outcomes.append((flow, False if drifting else _correct(number, decision)))

    # One turn of three agents under one trace id, each flow triggered by the previous one.
    previous_ref = "demo/turn-1/question"
    for offset, agent in enumerate(SESSION_AGENTS):
        name = f"demo-turn-1-{agent}"
        opened = anchor - timedelta(hours=2) + timedelta(minutes=3 * offset)
        flows.append(_flow(name, agent, 0, opened, confidence=0.88, trigger_ref=previous_ref, trace_id=TURN_TRACE_ID))
        previous_ref = str(demo_id(name))

    new_flows = write_flows(flows)
    recorded = set(
        ReasoningFlow.objects.filter(
            pk__in=[flow.id for flow, _ in outcomes], outcome_recorded_at__isnull=False
        ).values_list("pk", flat=True)
    )
    label = {True: "follow_up_confirmed", False: "follow_up_not_needed", None: "not_yet_known"}
    new_outcomes = 0
    for flow, correct in outcomes:
        if flow.id not in recorded:
            record_outcome(flow.id, label[correct], correct, actor=_ACTOR)
            new_outcomes += 1

    # The job writes audit events on every run: only run it when a demo session lacks a report.
    reported = DriftReport.objects.filter(session_id__in=wanted_sessions).count()
    new_reports = len(compute_drift_reports()) if reported < len(wanted_sessions) else 0
    latest = DriftReport.objects.filter(
        agent=DRIFTING_AGENT, session_id=session_id(DRIFTING_AGENT, SESSIONS_PER_AGENT)
    ).first()
    return DemoSessions(
        sessions=len(wanted_sessions),
        new_flows=new_flows,
        new_outcomes=new_outcomes,
        new_reports=new_reports,
        turn_trace_id=TURN_TRACE_ID,
        drifting_agent=DRIFTING_AGENT,
        drifting_level=latest.level if latest else "",
    )
